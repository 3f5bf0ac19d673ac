#include "tensor/core/device.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "tensor/core/error.h"

namespace mixtape {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string n = s.substr(5);
    // At most 9 digits, so std::stoi cannot overflow.
    MT_CHECK(!n.empty() && n.size() <= 9 &&
                 std::all_of(n.begin(), n.end(), [](unsigned char c) { return std::isdigit(c) != 0; }),
             "bad device '", s, "' (expected cpu, cuda or cuda:N)");
    return cuda(std::stoi(n));
  }
  throw Error("bad device '" + s + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace mixtape
