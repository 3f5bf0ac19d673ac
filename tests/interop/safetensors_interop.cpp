// mixtape's side of the safetensors interop tests (test_safetensors_interop.py runs both sides):
//   safetensors_interop write FILE   saves the checkpoint below with save_safetensors
//   safetensors_interop check FILE   loads FILE with load_safetensors and exits 0 when it holds
//                                    exactly that checkpoint, bit for bit; else prints every
//                                    difference and exits 1
// test_safetensors_interop.py writes the same checkpoint down independently, with numpy, and
// scripts/safetensors_np.py must read the file written here, write one this program accepts, and
// write the same bytes.
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "mixtape.h"

using namespace mixtape;

namespace {

// A tensor holding exactly these bit patterns; U is the unsigned integer as wide as the dtype.
template <class U>
Tensor from_bits(const std::vector<U>& bits, const Shape& shape, DType dtype) {
  MT_CHECK(dtype_size(dtype) == sizeof(U), "from_bits: ", dtype_name(dtype), " is not ", sizeof(U), " bytes wide");
  Tensor t = empty(shape, dtype);
  MT_CHECK(size_t(t.numel()) == bits.size(), "from_bits: ", bits.size(), " values for shape ", shape_str(shape));
  std::memcpy(t.raw_data(), bits.data(), bits.size() * sizeof(U));
  return t;
}

// The checkpoint: the edge cases of every dtype as bit patterns (signed zeros, the smallest and
// largest subnormals and normals, infinities, quiet and signalling NaNs with payloads), values
// rounded by mixtape's own conversions (ties, overflow, underflow), a 0-d tensor, empty tensors,
// names that need quoting and metadata that needs escaping in JSON.
TensorDict checkpoint() {
  TensorDict c;
  c.add("i64", from_vector(std::vector<int64_t>{0, -1, 1, std::numeric_limits<int64_t>::min(),
                                                std::numeric_limits<int64_t>::max(), (int64_t(1) << 53) + 1},
                           {2, 3}));
  // +0, -0, 0.1, smallest subnormal, largest finite, -inf, quiet NaN with payload 1, signalling -NaN
  c.add("f64.bits",
        from_bits<uint64_t>({0x0000000000000000, 0x8000000000000000, 0x3FB999999999999A, 0x0000000000000001,
                             0x7FEFFFFFFFFFFFFF, 0xFFF0000000000000, 0x7FF8000000000001, 0xFFF0000000000001},
                            {8}, DType::f64));
  // +0, -0, smallest subnormal, -largest subnormal, largest finite, inf, quiet NaN, signalling -NaN
  c.add("f32.bits", from_bits<uint32_t>({0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x7F800000,
                                         0x7FC00000, 0xFFA00001},
                                        {2, 4}, DType::f32));
  c.add("f16.bits",
        from_bits<uint16_t>({0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFC00, 0x7E00, 0x7C01}, {2, 4}, DType::f16));
  c.add("bf16.bits",
        from_bits<uint16_t>({0x0000, 0x8000, 0x0001, 0x807F, 0x7F7F, 0x7F80, 0xFFC0, 0x7F81}, {2, 2, 2}, DType::bf16));
  // f64 -> f32 (static_cast, round to nearest even): 2^24 + 1 ties to 2^24, 3.4028235e38 rounds
  // down to the largest float, 1e-40 to a subnormal, -1e-50 to -0.
  c.add("f32.values", from_vector(std::vector<double>{0.1, -3.25, 1e-40, 16777217.0, 3.4028235e38, -1e-50}, {3, 2}));
  // f32 -> f16 with Tensor::to: 65519 stays finite, 65520 ties to inf, 2^-25 ties to 0 and 3 * 2^-25
  // to 2^-23, -1e-8 underflows to -0, 1 + 2^-11 ties to 1.
  const std::vector<double> to_half = {0.1, 1.0 / 3, 65519, 65520, 0x1p-25, 0x3p-25, -1e-8, 1 + 0x1p-11};
  c.add("f16.from_f32", from_vector(to_half, {8}).to(DType::f16));
  // f64 -> f16 in one rounding (Note [Rounding f64 and i64 to 16 bits]): 1 + 2^-11 + 2^-40 is
  // above the tie and rounds up to 1 + 2^-10.
  c.add("f16.from_f64",
        from_vector(std::vector<double>{0.1, 1 + 0x1p-11 + 0x1p-40, 65519.99, -0x1p-24}, {4}, DType::f16));
  // f32 -> bf16 with Tensor::to: 1 + 2^-8 ties to 1, 1 + 3 * 2^-8 ties to 1 + 2^-6, the largest
  // float rounds to inf, -1e-40 to -2^-133 (the smallest subnormal), 2^-149 to 0.
  c.add("bf16.from_f32",
        from_vector(std::vector<double>{1.0 / 3, 1 + 0x1p-8, 1 + 0x3p-8, 3.4028234663852886e38, -1e-40, 0x1p-149}, {6})
            .to(DType::bf16));
  c.add("scalar", scalar_tensor(2.5));
  c.add("empty.f16", zeros({0, 3}, DType::f16));
  c.add("empty.i64", from_vector(std::vector<int64_t>{}, {0}));
  c.add("ünïcode name", scalar_tensor(-0.0, DType::f64));
  // 8-bit floats as codes: E4M3 +0, -0, smallest subnormal, 1.0, 448, NaN; E5M2 the same, with inf.
  c.add("e4m3.bits", from_bits<uint8_t>({0x00, 0x80, 0x01, 0x38, 0x7E, 0x7F}, {2, 3}, DType::e4m3));
  c.add("e5m2.bits", from_bits<uint8_t>({0x00, 0x80, 0x01, 0x3C, 0x7B, 0x7C, 0xFE}, {7}, DType::e5m2));
  c.set_meta("format", "mixtape");
  c.set_meta("step", "120");
  c.set_meta("note", "ünïcode \"quoted\" back\\slash\ttab\nnewline\x01 🎉");
  c.set_meta("empty", "");
  return c;
}

// The bits of element i of a contiguous tensor, in hex.
std::string element_bits(const Tensor& t, int64_t i) {
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const char*>(t.raw_data()) + size_t(i) * dtype_size(t.dtype()), dtype_size(t.dtype()));
  char text[24];
  std::snprintf(text, sizeof text, "0x%0*" PRIx64, int(2 * dtype_size(t.dtype())), bits);
  return text;
}

// Every way `got` differs from `want`, one line each (none when they hold the same bits).
std::vector<std::string> differences(const TensorDict& want, const TensorDict& got) {
  std::vector<std::string> out;
  for (const auto& [name, w] : want) {
    const Tensor* g = got.find(name);
    if (!g) {
      out.push_back(detail::cat("tensor '", name, "': missing"));
    } else if (g->dtype() != w.dtype() || g->shape() != w.shape()) {
      out.push_back(detail::cat("tensor '", name, "': ", g->meta(), ", expected ", w.meta()));
    } else {
      int64_t wrong = 0, first = -1;
      for (int64_t i = 0; i < w.numel(); ++i)
        if (element_bits(*g, i) != element_bits(w, i) && wrong++ == 0) first = i;
      if (wrong > 0)
        out.push_back(detail::cat("tensor '", name, "': ", wrong, " of ", w.numel(), " elements differ; element ",
                                  first, " is ", element_bits(*g, first), ", expected ", element_bits(w, first)));
    }
  }
  for (const auto& [name, g] : got)
    if (!want.contains(name)) out.push_back(detail::cat("tensor '", name, "': not expected"));
  if (got.metadata != want.metadata) {
    for (const auto& [key, value] : want.metadata)
      if (!got.has_meta(key)) out.push_back(detail::cat("metadata '", key, "': missing"));
      else if (got.meta(key) != value)
        out.push_back(detail::cat("metadata '", key, "' is \"", got.meta(key), "\", expected \"", value, "\""));
    for (const auto& [key, value] : got.metadata)
      if (!want.has_meta(key)) out.push_back(detail::cat("metadata '", key, "': not expected"));
  }
  return out;
}

int check(const std::string& path) {
  const std::vector<std::string> diffs = differences(checkpoint(), load_safetensors(path));
  for (const std::string& d : diffs) std::printf("%s: %s\n", path.c_str(), d.c_str());
  if (!diffs.empty()) return 1;
  std::printf("%s: every tensor and metadata entry as expected, bit for bit\n", path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[1] : "";
  if (mode != "write" && mode != "check") {
    std::fprintf(stderr, "usage: %s write|check FILE\n", argv[0]);
    return 2;
  }
  try {
    if (mode == "check") return check(argv[2]);
    save_safetensors(argv[2], checkpoint());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_interop: %s\n", e.what());
    return 2;
  }
}
