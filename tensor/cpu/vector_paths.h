// The table of a kernel family's vector paths (the conversions, convert.cpp; the GEMM, gemm.cpp):
// the paths this CPU runs, the reference first and the default last, and the one in use.
#pragma once

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/core/error.h"

namespace mixtape::cpu {

// P: a path struct with a `const char* name`.
template <class P>
class VectorPaths {
 public:
  // kind: what the error for an unknown path calls them ("conversion", "GEMM").
  VectorPaths(const char* kind, std::vector<const P*> supported)
      : kind_(kind), supported_(std::move(supported)), active_(supported_.back()) {}

  const P& active() const { return *active_.load(std::memory_order_relaxed); }

  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const P* p : supported_) n.emplace_back(p->name);
    return n;
  }

  // Selects the path called `name`; `what` names the caller in the error for a path the CPU lacks.
  void select(std::string_view name, const char* what) {
    std::string known;
    for (const P* p : supported_) {
      if (name == p->name) {
        active_.store(p, std::memory_order_relaxed);
        return;
      }
      known += known.empty() ? p->name : std::string(", ") + p->name;
    }
    MT_CHECK(false, what, ": '", name, "' is not a ", kind_, " path this CPU supports (", known, ")");
  }

 private:
  const char* kind_;
  std::vector<const P*> supported_;
  std::atomic<const P*> active_;
};

}  // namespace mixtape::cpu
