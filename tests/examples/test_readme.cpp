// The README's model is examples/readme_model.cpp verbatim, so the compiled file keeps the
// README honest.
#include "support/catch.h"

#include <fstream>
#include <sstream>
#include <string>

namespace {
std::string read_file(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("the README's model is examples/readme_model.cpp", "[examples][readme]") {
  const std::string readme = read_file(MIXTAPE_SOURCE_DIR "/README.md");
  const std::string code = read_file(MIXTAPE_SOURCE_DIR "/examples/readme_model.cpp");
  const std::string marker = "<!-- examples/readme_model.cpp -->\n```cpp\n";
  const size_t begin = readme.find(marker);
  REQUIRE(begin != std::string::npos);
  const size_t start = begin + marker.size();
  const size_t end = readme.find("```\n", start);
  REQUIRE(end != std::string::npos);
  CHECK(readme.substr(start, end - start) == code);
}
