#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

namespace mixtape::data {

namespace fs = std::filesystem;

size_t idx_type_size(IdxType t) {
  switch (t) {
    case IdxType::u8:
    case IdxType::i8: return 1;
    case IdxType::i16: return 2;
    case IdxType::i32:
    case IdxType::f32: return 4;
    case IdxType::f64: return 8;
  }
  return 0;
}

const char* idx_type_name(IdxType t) {
  switch (t) {
    case IdxType::u8: return "u8";
    case IdxType::i8: return "i8";
    case IdxType::i16: return "i16";
    case IdxType::i32: return "i32";
    case IdxType::f32: return "f32";
    case IdxType::f64: return "f64";
  }
  return "?";
}

namespace {

bool valid_idx_type(uint8_t code) {
  return code == 0x08 || code == 0x09 || code == 0x0B || code == 0x0C || code == 0x0D || code == 0x0E;
}

// Owns a gzFile; gzclose on scope exit.
class GzFile {
 public:
  GzFile(const std::string& path, const char* mode) : f_(gzopen(path.c_str(), mode)) {}
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return f_; }
  // Closes explicitly so that a failed final flush (writes) is reported; returns zlib's code.
  int close() {
    const int rc = gzclose(f_);
    f_ = nullptr;
    return rc;
  }
  // zlib's last error code (Z_OK when none).
  int error_code() const {
    int code = Z_OK;
    gzerror(f_, &code);
    return code;
  }
  // zlib's last error message, "" when none.
  std::string error() const {
    int code = Z_OK;
    const char* msg = gzerror(f_, &code);
    if (code == Z_OK || !msg) return "";
    return code == Z_ERRNO ? std::strerror(errno) : msg;
  }

 private:
  gzFile f_;
};

// Reads up to n bytes into dst (gzread takes an unsigned count, so large reads go in chunks).
// Returns the bytes read; fewer than n means the stream ended. Throws on a zlib error.
int64_t read_some(GzFile& f, uint8_t* dst, int64_t n, const std::string& path, int64_t at) {
  constexpr int64_t kChunk = int64_t(1) << 24;
  int64_t got = 0;
  while (got < n) {
    const unsigned want = unsigned(std::min(n - got, kChunk));
    const int r = gzread(f.get(), dst + got, want);
    MT_CHECK(r >= 0, "read_idx: '", path, "': corrupt or unreadable data near uncompressed byte ", at + got,
             " (zlib: ", f.error(), ")");
    got += r;
    if (unsigned(r) < want) break;
  }
  return got;
}

// Big-endian element bytes -> host order, in place.
void to_host_order(std::vector<uint8_t>& bytes, size_t elem) {
  if (elem == 1 || std::endian::native == std::endian::big) return;
  for (size_t i = 0; i + elem <= bytes.size(); i += elem) std::reverse(bytes.begin() + i, bytes.begin() + i + elem);
}

uint32_t load_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  std::error_code ec;
  MT_CHECK(fs::exists(path, ec), "read_idx: file '", path, "' does not exist");
  MT_CHECK(!fs::is_directory(path, ec), "read_idx: '", path, "' is a directory, not an IDX file");
  errno = 0;
  GzFile f(path, "rb");
  MT_CHECK(f.get(), "read_idx: cannot open '", path, "': ", errno ? std::strerror(errno) : "zlib could not open it");

  // Header: {0, 0, dtype, ndims} then ndims big-endian u32 sizes.
  std::array<uint8_t, 4> magic{};
  const int64_t nmagic = read_some(f, magic.data(), 4, path, 0);
  MT_CHECK(nmagic == 4, "read_idx: '", path, "': truncated header: expected 4 magic bytes, got ", nmagic);
  const uint32_t magic_word = load_be32(magic.data());
  char hex[11];
  std::snprintf(hex, sizeof hex, "0x%08x", unsigned(magic_word));
  MT_CHECK(magic[0] == 0 && magic[1] == 0, "read_idx: '", path, "': bad magic ", hex,
           " (an IDX file starts with two zero bytes, a dtype byte and the number of dims, e.g. "
           "0x00000803 for u8 images)");
  MT_CHECK(valid_idx_type(magic[2]), "read_idx: '", path, "': unknown dtype byte 0x", std::hex, int(magic[2]), std::dec,
           " in magic ", hex, " (expected 0x08 u8, 0x09 i8, 0x0b i16, 0x0c i32, 0x0d f32 or 0x0e f64)");
  MT_CHECK(magic[3] >= 1, "read_idx: '", path, "': magic ", hex, " declares 0 dims");

  IdxArray a;
  a.type = IdxType(magic[2]);
  const int ndims = magic[3];
  std::vector<uint8_t> dims(size_t(ndims) * 4);
  const int64_t ndim_bytes = read_some(f, dims.data(), int64_t(dims.size()), path, 4);
  MT_CHECK(ndim_bytes == int64_t(dims.size()), "read_idx: '", path, "': truncated header: expected ", 4 + dims.size(),
           " header bytes for ", ndims, " dims, got ", 4 + ndim_bytes);
  const int64_t header_bytes = 4 + int64_t(dims.size());

  const size_t elem = idx_type_size(a.type);
  int64_t expected = int64_t(elem);
  bool overflow = false;
  for (int d = 0; d < ndims; ++d) {
    const int64_t n = load_be32(dims.data() + 4 * d);
    a.shape.push_back(n);
    overflow = overflow || __builtin_mul_overflow(expected, n, &expected);
  }
  MT_CHECK(!overflow && expected <= (int64_t(1) << 40), "read_idx: '", path, "': sizes ", shape_str(a.shape), " of ",
           idx_type_name(a.type), " are too large to be real (corrupt header?)");

  // Grow the buffer as bytes arrive, so that a corrupt size field cannot force a huge allocation
  // before the truncation is noticed.
  constexpr int64_t kStep = int64_t(1) << 24;
  a.data.reserve(size_t(std::min<int64_t>(expected, int64_t(1) << 26)));
  int64_t got = 0;
  while (got < expected) {
    const int64_t step = std::min(expected - got, kStep);
    a.data.resize(size_t(got + step));
    const int64_t r = read_some(f, a.data.data() + got, step, path, header_bytes + got);
    got += r;
    if (r < step) break;
  }
  if (got < expected) {
    const std::string why = f.error();
    throw Error(detail::cat("read_idx: '", path, "': truncated payload: sizes ", shape_str(a.shape), " of ",
                            idx_type_name(a.type), " need ", expected, " bytes after the ", header_bytes,
                            "-byte header, got ", got, why.empty() ? "" : " (zlib: " + why + ")"));
  }

  // Nothing may follow the payload.
  std::vector<uint8_t> rest(4096);
  int64_t trailing = 0;
  for (;;) {
    const int64_t r = read_some(f, rest.data(), int64_t(rest.size()), path, header_bytes + expected + trailing);
    trailing += r;
    if (r < int64_t(rest.size())) break;
  }
  MT_CHECK(trailing == 0, "read_idx: '", path, "': ", trailing, " trailing bytes after the ", expected,
           "-byte payload of sizes ", shape_str(a.shape), " (expected end of file at byte ", header_bytes + expected,
           ")");
  // gzread hands out what it could decode when the file ends inside a gzip stream and only records
  // Z_BUF_ERROR (zlib.h, gzread): the 8-byte trailer with the CRC-32 and the length never arrived,
  // so nothing the file held was checked.
  MT_CHECK(f.error_code() != Z_BUF_ERROR, "read_idx: '", path,
           "': the gzip stream ends early (the file is cut short inside its compressed data or its 8-byte CRC "
           "trailer), so its contents cannot be checked");

  to_host_order(a.data, elem);
  return a;
}

void write_idx(const std::string& path, const IdxArray& a) {
  MT_CHECK(!a.shape.empty() && a.shape.size() <= 255, "write_idx: '", path, "': IDX needs 1 to 255 dims, got ",
           shape_str(a.shape));
  const size_t elem = idx_type_size(a.type);
  MT_CHECK(elem > 0, "write_idx: '", path, "': unknown IDX type ", int(a.type));
  for (int64_t d : a.shape)
    MT_CHECK(d >= 0 && d <= int64_t(std::numeric_limits<uint32_t>::max()), "write_idx: '", path,
             "': size out of the u32 range in ", shape_str(a.shape));
  MT_CHECK(a.data.size() == size_t(a.numel()) * elem, "write_idx: '", path, "': ", a.data.size(),
           " data bytes do not match sizes ", shape_str(a.shape), " of ", idx_type_name(a.type));

  std::vector<uint8_t> bytes = {0, 0, uint8_t(a.type), uint8_t(a.shape.size())};
  for (int64_t d : a.shape)
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(uint8_t(uint64_t(d) >> s));
  std::vector<uint8_t> payload = a.data;
  to_host_order(payload, elem);  // the swap is its own inverse: host -> big-endian
  bytes.insert(bytes.end(), payload.begin(), payload.end());

  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  errno = 0;
  GzFile f(path, gz ? "wb" : "wbT");  // T: write without compression
  MT_CHECK(f.get(), "write_idx: cannot create '", path, "': ", errno ? std::strerror(errno) : "zlib error");
  size_t done = 0;
  while (done < bytes.size()) {
    const unsigned n = unsigned(std::min<size_t>(bytes.size() - done, size_t(1) << 24));
    const int w = gzwrite(f.get(), bytes.data() + done, n);
    MT_CHECK(w > 0, "write_idx: writing '", path, "' failed: ", f.error());
    done += size_t(w);
  }
  MT_CHECK(f.close() == Z_OK, "write_idx: closing '", path, "' failed");
}

// ---- (Fashion-)MNIST -----------------------------------------------------------------------

namespace {

// `<dir>/<stem>.gz`, else `<dir>/<stem>`; throws naming both when neither exists.
std::string find_mnist_file(const std::string& dir, const std::string& stem) {
  const fs::path gz = fs::path(dir) / (stem + ".gz"), plain = fs::path(dir) / stem;
  std::error_code ec;
  if (fs::is_regular_file(gz, ec)) return gz.string();
  if (fs::is_regular_file(plain, ec)) return plain.string();
  throw Error(detail::cat("load_fashion_mnist: missing file '", gz.string(), "' (nor an uncompressed '", plain.string(),
                          "')", fs::is_directory(dir, ec) ? "" : detail::cat("; directory '", dir, "' does not exist"),
                          ". The default data in ", kFashionMnistDir,
                          " comes from the Debian package dataset-fashion-mnist "
                          "(apt-get install dataset-fashion-mnist); pass another directory for other "
                          "MNIST-format files"));
}

}  // namespace

LabeledImages load_fashion_mnist(const std::string& dir, MnistSplit split, const MnistOptions& options) {
  MT_CHECK(!options.normalize || (options.std > 0 && std::isfinite(options.std) && std::isfinite(options.mean)),
           "load_fashion_mnist: normalization needs a finite mean and a positive std, got mean ", options.mean, " std ",
           options.std);
  const std::string prefix = split == MnistSplit::train ? "train" : "t10k";
  const std::string image_path = find_mnist_file(dir, prefix + "-images-idx3-ubyte");
  const std::string label_path = find_mnist_file(dir, prefix + "-labels-idx1-ubyte");

  const IdxArray images = read_idx(image_path);
  MT_CHECK(images.type == IdxType::u8 && images.shape.size() == 3, "load_fashion_mnist: '", image_path, "' holds ",
           idx_type_name(images.type), shape_str(images.shape), ", expected u8 images [N, H, W]");
  const IdxArray labels = read_idx(label_path);
  MT_CHECK(labels.type == IdxType::u8 && labels.shape.size() == 1, "load_fashion_mnist: '", label_path, "' holds ",
           idx_type_name(labels.type), shape_str(labels.shape), ", expected u8 labels [N]");
  MT_CHECK(images.shape[1] > 0 && images.shape[2] > 0, "load_fashion_mnist: '", image_path,
           "' holds zero-sized images: sizes ", shape_str(images.shape), " (N, H, W), H and W must be positive");
  MT_CHECK(images.shape[0] == labels.shape[0], "load_fashion_mnist: '", image_path, "' has ", images.shape[0],
           " images but '", label_path, "' has ", labels.shape[0], " labels");

  const int64_t n = options.limit >= 0 ? std::min(options.limit, images.shape[0]) : images.shape[0];
  const int64_t h = images.shape[1], w = images.shape[2];
  MT_CHECK(options.num_classes >= 0, "load_fashion_mnist: num_classes must be >= 0 (0: no check), got ",
           options.num_classes);
  for (int64_t i = 0; i < n && options.num_classes > 0; ++i)  // the labels kept, as they arrive in batches
    MT_CHECK(labels.data[size_t(i)] < options.num_classes, "load_fashion_mnist: '", label_path, "': label ",
             int(labels.data[size_t(i)]), " of example ", i, " is out of range for ", options.num_classes,
             " classes (0..", options.num_classes - 1, ")");

  // x = b / 255, then (x - mean) / std: one table for the 256 byte values, computed in f32.
  std::array<float, 256> lut{};
  for (int b = 0; b < 256; ++b) {
    const float x = float(b) / 255.0f;
    lut[size_t(b)] = options.normalize ? (x - options.mean) / options.std : x;
  }
  LabeledImages out{empty({n, 1, h, w}, DType::f32), empty({n}, DType::i64)};
  float* px = out.images.data<float>();
  for (int64_t i = 0; i < n * h * w; ++i) px[i] = lut[images.data[size_t(i)]];
  int64_t* py = out.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) py[i] = labels.data[size_t(i)];
  return out;
}

}  // namespace mixtape::data
