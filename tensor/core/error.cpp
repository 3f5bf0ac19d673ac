#include "tensor/core/error.h"

namespace mixtape::detail {

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  throw Error(cat("internal error: assertion `", cond, "` failed at ", file, ":", line, msg.empty() ? "" : ": ", msg));
}

}  // namespace mixtape::detail
