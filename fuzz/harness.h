// What the libFuzzer harnesses share (docs/fuzzing.md).
//
// Note [What a harness counts as a finding]
// The readers take paths, so each input is written to a file in a scratch folder first. A bad
// file must end in an exception that says what was wrong: mixtape::Error, or another
// std::exception from the standard library (a file-system error). Everything else is a finding,
// and libFuzzer saves the input that caused it:
//   - a crash, or a report from AddressSanitizer or UBSan;
//   - a hang (libFuzzer's -timeout) or an allocation above -malloc_limit_mb / -rss_limit_mb;
//   - std::bad_alloc: a file whose sizes drive an allocation until it fails;
//   - a failed MT_ASSERT ("internal error: ..."): an invariant of the library broken by file input;
//   - a harness's own check of what a successful read returned (check()).
// The harness then aborts, which libFuzzer reports as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "tensor/core/error.h"

namespace fuzz {

// A scratch folder for this process, made under $TMPDIR (else /tmp) on first use and removed
// when the process exits normally (after a finding it stays behind for inspection).
const std::string& scratch_dir();

// Writes `data` to `<scratch>/<name>` (replacing it) and returns the path.
std::string write_input(const std::string& name, const uint8_t* data, size_t size);

// Reports a finding (message on stderr) and aborts.
[[noreturn]] void finding(const std::string& what);

// Fails the run with `what` when `ok` is false: a property of a successful read.
inline void check(bool ok, const std::string& what) {
  if (!ok) finding(what);
}

// Runs `read`; the exceptions Note [What a harness counts as a finding] allows are swallowed,
// everything else is a finding.
template <class Read>
void run_reader(Read&& read) {
  try {
    read();
  } catch (const std::bad_alloc&) {
    finding("std::bad_alloc: the input drove an allocation until it failed");
  } catch (const mixtape::Error& e) {
    const std::string what = e.what();
    if (what.rfind("internal error:", 0) == 0) finding("a library invariant failed: " + what);
  } catch (const std::exception&) {
    // a file-system error: a normal outcome
  }
}

}  // namespace fuzz
