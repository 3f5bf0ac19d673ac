// Catch2 v2 (Debian 12, Ubuntu 22.04) or v3 (Debian 13, Ubuntu 24.04), whichever the system has
// (tests/CMakeLists.txt finds it). The tests are written with v2's names, Catch::Contains for
// strings and Approx; under v3 they map onto its ContainsSubstring and Catch::Approx.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>

#include <string>

namespace Catch {
inline Matchers::StringContainsMatcher Contains(const std::string& s, CaseSensitive cs = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(s, cs);
}
}  // namespace Catch
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
