// The example programs' resume path on arbitrary files: Checkpointer::resume_state (load_safetensors
// with its checksums, then the run's identity) and load_training_state (model, generators,
// trainer, schedule) into each setup of checkpoint_setup.h, then the progress entries.
// A checkpoint that is restored must be restored exactly, and must train: the state the run holds
// afterwards saves to the same tensors, byte for byte, and one training step then throws nothing
// (a file accepted at resume and refused at the first step is a late error).
//
// Note [Fuzzing past the checksums]
// A mutated checkpoint almost never carries the right CRC-32s, so on its own the fuzzer would only
// ever reach the checksum check. The custom mutator below therefore repairs half of its
// mutations: when the mutated bytes still parse as safetensors (read with Checksums::none), it
// writes them again with fresh checksums, so the model's, the trainer's and the schedule's
// loaders meet damaged contents behind valid checksums (the file of a program with a bug, rather
// than of a bad disk). The other half stays as mutated and exercises the checksum check itself.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "fuzz/checkpoint_setup.h"
#include "fuzz/harness.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

// Restores `path` into setup `s`; returns normally when the file is refused with an error.
void restore(const std::string& path, const fuzz::CheckpointSetup& s) {
  fuzz::CheckpointRun run = fuzz::make_checkpoint_run(s);
  const mixtape::train::Checkpointer checkpointer = mixtape::train::Checkpointer(path, 0, true);
  const std::optional<mixtape::TensorDict> ckpt = checkpointer.resume_state(run.identity);
  fuzz::check(ckpt.has_value(), "resume_state found no file at " + path);
  mixtape::train::check_all_read(*ckpt, mixtape::train::training_state_prefixes("", true), {}, path);
  mixtape::train::load_training_state(*ckpt, "", *run.model, *run.trainer, run.sched.get());
  const int64_t step = mixtape::train::progress_int(*ckpt, "step");

  // Restored exactly: what the run saves now is what the file held.
  const mixtape::TensorDict again = fuzz::checkpoint_of(run, step);
  fuzz::check(again.tensors.size() == ckpt->tensors.size(),
              std::string(s.name) + ": the file has " + std::to_string(ckpt->tensors.size()) +
                  " tensors, the restored run saves " + std::to_string(again.tensors.size()));
  for (const auto& [name, t] : again) {
    fuzz::check(ckpt->contains(name),
                std::string(s.name) + ": the restored run saves '" + name + "', absent from the file");
    const mixtape::Tensor& f = ckpt->at(name);
    const size_t n = size_t(t.numel()) * mixtape::dtype_size(t.dtype());
    fuzz::check(f.dtype() == t.dtype() && f.shape() == t.shape() &&
                    (n == 0 || std::memcmp(f.contiguous().raw_data(), t.contiguous().raw_data(), n) == 0),
                std::string(s.name) + ": tensor '" + name + "' is not restored byte for byte");
  }
  // And it trains: nothing the file holds may make the first step throw.
  try {
    fuzz::checkpoint_train_step(run);
  } catch (const std::exception& e) {
    fuzz::finding(std::string(s.name) +
                  ": the checkpoint was accepted, and the first step after it threw: " + e.what());
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input("ckpt.safetensors", data, size);
  for (const fuzz::CheckpointSetup& s : fuzz::checkpoint_setups()) fuzz::run_reader([&] { restore(path, s); });
  return 0;
}

// Note [Fuzzing past the checksums].
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed % 2 == 0) return size;
  try {
    const std::string in = fuzz::write_input("mutated.safetensors", data, size);
    mixtape::TensorDict d = mixtape::load_safetensors(in, mixtape::Checksums::none);
    for (auto it = d.metadata.begin(); it != d.metadata.end();)
      it = it->first.rfind("crc32:", 0) == 0 ? d.metadata.erase(it) : std::next(it);
    const std::string out = fuzz::scratch_dir() + "/repaired.safetensors";
    mixtape::save_safetensors(out, d);
    const std::string bytes = read_file(out);
    if (bytes.size() > max_size) return size;
    std::memcpy(data, bytes.data(), bytes.size());
    return bytes.size();
  } catch (const std::exception&) {
    return size;  // not a safetensors file any more: fuzzed as it is
  }
}
