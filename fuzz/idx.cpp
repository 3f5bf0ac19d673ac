// read_idx (data/idx.h) on arbitrary bytes, plain or gzip (gzread tells them apart by the gzip
// magic, not by the name): the magic, the dtype byte, the sizes, the payload, trailing bytes and
// corrupt or truncated gzip streams. An array it accepts must hold exactly its sizes' bytes.
#include <cstddef>
#include <cstdint>

#include "data/idx.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input("input-idx3-ubyte", data, size);
  fuzz::run_reader([&] {
    const mixtape::data::IdxArray a = mixtape::data::read_idx(path);
    const size_t elem = mixtape::data::idx_type_size(a.type);
    fuzz::check(elem > 0, "read_idx returned an unknown element type");
    fuzz::check(!a.shape.empty() && a.shape.size() <= 255, "read_idx returned a shape without 1 to 255 dims");
    fuzz::check(a.data.size() == size_t(a.numel()) * elem, "read_idx returned a payload that does not match its sizes");
  });
  return 0;
}
