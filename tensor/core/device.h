// Where a tensor's bytes live: the host, or CUDA device N.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace mixtape {

struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int i = 0) { return {Kind::cuda, i}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:1"; throws otherwise
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// Runs `cpu` or `cuda` for device d: the one device switch, through which every op front-end,
// Tensor's copies and casts, and Storage reach a backend (docs/design.md section 3, "One switch per
// op").
template <class Cpu, class Cuda>
decltype(auto) on_device(Device d, Cpu&& cpu, Cuda&& cuda) {
  switch (d.kind) {
    case Device::Kind::cpu: return cpu();
    case Device::Kind::cuda: return cuda();
  }
  return cpu();
}

}  // namespace mixtape
