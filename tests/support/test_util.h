// Small helpers shared by the tests.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

#include "tensor/core/error.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/gemm.h"
#include "tensor/tensor.h"

namespace mixtape::test {

// A fresh folder under the system temp dir, removed with everything in it at scope exit
// (write permission is restored first, for tests that take it away).
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "test") {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("mixtape-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  // Names of the entries in the folder, sorted (to find leftover temporary files).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// The same shape, dtype and bytes (the signs of zeros and NaN payloads count).
inline bool same_bytes(const Tensor& x, const Tensor& y) {
  if (x.shape() != y.shape() || x.dtype() != y.dtype()) return false;
  const Tensor a = x.contiguous(), b = y.contiguous();
  return std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * dtype_size(a.dtype())) == 0;
}

// The message of the mixtape::Error that f() throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) { return e.what(); }
  return "(no error)";
}

// The CPU's conversion path (convert.h) or GEMM path (gemm.h) set for a scope, restored after.
class ConversionPathScope {
 public:
  explicit ConversionPathScope(const std::string& name) : saved_(cpu::conversion_path()) {
    cpu::set_conversion_path(name);
  }
  ~ConversionPathScope() { cpu::set_conversion_path(saved_); }
  ConversionPathScope(const ConversionPathScope&) = delete;
  ConversionPathScope& operator=(const ConversionPathScope&) = delete;

 private:
  std::string saved_;
};

class GemmPathScope {
 public:
  explicit GemmPathScope(const std::string& name) : saved_(cpu::gemm_path()) { cpu::set_gemm_path(name); }
  ~GemmPathScope() { cpu::set_gemm_path(saved_); }
  GemmPathScope(const GemmPathScope&) = delete;
  GemmPathScope& operator=(const GemmPathScope&) = delete;

 private:
  std::string saved_;
};

}  // namespace mixtape::test
