// Checkpoints in the safetensors format (Hugging Face), readable and writable by Python's
// `safetensors` package:
//
//   [8 bytes]  N, the header length, unsigned little-endian
//   [N bytes]  UTF-8 JSON object, padded with spaces to a multiple of 8:
//              {"__metadata__": {"key": "value", ...},                      (optional, str -> str)
//               "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   [rest]     the tensors' bytes, little-endian, row-major, back to back
//
// data_offsets are byte offsets into the buffer after the header; sorted by offset the tensors
// must tile that buffer exactly (the first begins at 0, each begins where the previous ends, the
// last ends at the end of the file) and end - begin must equal numel * element size.
// Dtypes: F32, F64, F16, BF16, I64.
//
// The writer lays the tensors out as the reference implementation does (by descending
// alignment, then by name; the header holds __metadata__ first), so every tensor is aligned to
// its element size and a file written here is byte-identical to the one Python's
// `safetensors.torch.save_file` writes for the same tensors and metadata (the checksum entries
// below included).
//
// Checksums (Note [Checksums] in safetensors.cpp): the writer adds a CRC-32 of each tensor's
// bytes ("crc32:<name>") and of the other metadata entries ("crc32:__metadata__") to the
// metadata; the reader verifies every one and removes them, so the metadata a program reads is
// the metadata it wrote. Files without them load unverified (TensorDict::verified false).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace mixtape {

// Writes atomically: the bytes go to `path.tmp.<pid>` in the same directory, which is fsynced
// and renamed over `path`, and then the directory is fsynced. On any error the temporary file is
// removed, an existing file at `path` is left as it was, and mixtape::Error says what failed.
// A process killed while saving leaves its `path.tmp.<pid>` behind; the next save to `path`
// removes those whose process no longer exists. Metadata keys starting with "crc32:" are
// reserved for the checksums the writer adds.
// Tensors may be non-contiguous (written row-major) or on a CUDA device (copied to the host).
// Checksums::none writes the bare format, byte for byte what the reference writer gives for the
// same tensors and metadata (an export for a program that keeps its own checks).
enum class Checksums : uint8_t { crc32, none };
void save_safetensors(const std::string& path, const NamedTensors& tensors, const StringMap& metadata = {},
                      Checksums checksums = Checksums::crc32);
inline void save_safetensors(const std::string& path, const TensorDict& dict, Checksums checksums = Checksums::crc32) {
  save_safetensors(path, dict.tensors, dict.metadata, checksums);
}

// Reads and validates a whole file into CPU tensors, in the order of their data in the file.
// Every inconsistency throws mixtape::Error naming the file and, where there is one, the tensor:
// a file shorter than its header, a header length beyond the file, a header that is not a JSON
// object, JSON nested more than 64 levels deep (rejected before it is parsed), an unknown dtype, a
// malformed shape or offsets, offsets outside the data, overlapping or leaving holes, a size that
// is not numel * element size, duplicate names, non-string metadata, and a checksum that does not
// match or is missing where the file carries checksums. Values quoted in a message are cut to 80
// characters.
// Checksums::none skips the checksums: they are neither verified nor removed, and stay in the
// metadata as "crc32:*" entries (a tool that repairs or inspects a damaged file; the fuzzing
// harness of the checkpoint path, which recomputes them after each mutation).
TensorDict load_safetensors(const std::string& path, Checksums checksums = Checksums::crc32);

// The safetensors dtype string of a dtype ("F32", ...) and back (throws on an unknown string).
const char* safetensors_dtype_name(DType t);
DType dtype_from_safetensors(const std::string& name);

}  // namespace mixtape
