// IDX arrays (the MNIST file format) read through zlib, and the (Fashion-)MNIST loader.
//
// An IDX file is a 4-byte magic {0, 0, dtype, ndims}, ndims big-endian u32 sizes, then the
// elements in row-major order (big-endian for multi-byte types). gzread reads `.gz` files and
// passes plain files through unchanged, so one reader serves both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace mixtape::data {

// The element types of the IDX format (the third magic byte).
enum class IdxType : uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };

size_t idx_type_size(IdxType t);
const char* idx_type_name(IdxType t);

struct IdxArray {
  IdxType type = IdxType::u8;
  Shape shape;                // the sizes from the header
  std::vector<uint8_t> data;  // numel * idx_type_size(type) bytes, row-major, host byte order

  int64_t numel() const { return numel_of(shape); }
};

// Reads a whole IDX file (`.gz` or plain). Throws mixtape::Error naming the file on a missing
// file, a bad magic, an unknown dtype byte, a truncated header or payload (with the expected and
// actual byte counts), trailing bytes after the payload, or a corrupt gzip stream (including one
// cut short inside its CRC trailer).
IdxArray read_idx(const std::string& path);

// Writes `a` as an IDX file; gzip-compressed when `path` ends in ".gz". For tests and tools.
void write_idx(const std::string& path, const IdxArray& a);

// ---- (Fashion-)MNIST -----------------------------------------------------------------------

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Per-pixel statistics of the training images after scaling to [0, 1].
inline constexpr float kFashionMnistMean = 0.2860f, kFashionMnistStd = 0.3530f;
inline constexpr float kMnistMean = 0.1307f, kMnistStd = 0.3081f;

enum class MnistSplit { train, test };

struct MnistOptions {
  bool normalize = true;  // (x - mean) / std after scaling bytes to [0, 1]
  float mean = kFashionMnistMean;
  float std = kFashionMnistStd;
  int64_t limit = -1;  // keep the first `limit` examples (-1: all)
  // Labels must lie in [0, num_classes): checked when the files are read, so that a bad label
  // fails the load (naming the file and the example), not the first batch that holds it.
  // 0: no check (for consumers that ignore the labels).
  int64_t num_classes = 10;
};

struct LabeledImages {
  Tensor images;  // f32 [N, 1, H, W]
  Tensor labels;  // i64 [N]
};

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir`: any MNIST-format pair
// (MNIST, Fashion-MNIST, KMNIST, ...). Images must be u8 [N, H, W] with H, W > 0 and labels u8 [N]
// with the same N, each below options.num_classes. The default directory is provided by the
// Debian package dataset-fashion-mnist.
LabeledImages load_fashion_mnist(const std::string& dir = kFashionMnistDir, MnistSplit split = MnistSplit::train,
                                 const MnistOptions& options = {});

}  // namespace mixtape::data
