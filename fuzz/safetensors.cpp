// load_safetensors (tensor/safetensors.h) on arbitrary bytes: the 8-byte header length, the JSON
// header (nesting, duplicate keys, dtypes, shapes, offsets, metadata) and the data buffer.
// A file it accepts must be described exactly: the header and the tensors' bytes, in file order,
// account for every byte, and each tensor holds the bytes of its slice of the file.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz/harness.h"
#include "tensor/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input("input.safetensors", data, size);
  fuzz::run_reader([&] {
    const mixtape::TensorDict dict = mixtape::load_safetensors(path);
    uint64_t header = 0;  // a file that loads has its 8 bytes
    for (int i = 0; i < 8; ++i) header |= uint64_t(data[i]) << (8 * i);
    uint64_t offset = 8 + header;
    for (const auto& [name, t] : dict.tensors) {
      fuzz::check(t.device().is_cpu() && t.is_contiguous(), "tensor '" + name + "' is not a contiguous CPU tensor");
      const uint64_t nbytes = uint64_t(t.numel()) * mixtape::dtype_size(t.dtype());
      fuzz::check(offset + nbytes <= size, "tensor '" + name + "' reaches past the end of the file");
      fuzz::check(nbytes == 0 || std::memcmp(t.raw_data(), data + offset, nbytes) == 0,
                  "tensor '" + name + "' does not hold the bytes of its slice of the file");
      offset += nbytes;
    }
    fuzz::check(offset == size, "the header and the tensors do not cover the whole file");
  });
  return 0;
}
