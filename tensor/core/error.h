// Errors. Bad user input (shapes, dtypes, files, flags) throws mixtape::Error with a message
// that says what was wrong and where; broken internal invariants throw through MT_ASSERT with
// file:line. Library code never calls exit().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mixtape {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace mixtape

// MT_CHECK(cond, parts...): user-facing validation; throws mixtape::Error(parts...).
#define MT_CHECK(cond, ...)                                                   \
  do {                                                                        \
    if (!(cond)) throw ::mixtape::Error(::mixtape::detail::cat(__VA_ARGS__)); \
  } while (0)

// MT_ASSERT(cond, parts...): internal invariant; the message carries file:line.
#define MT_ASSERT(cond, ...)                                                                 \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::mixtape::detail::assert_fail(#cond, __FILE__, __LINE__,                              \
                                     ::mixtape::detail::cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
