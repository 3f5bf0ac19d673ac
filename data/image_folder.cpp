#include "data/image_folder.h"

// Debian's libstb-dev ships the implementations compiled into libstb; only declarations here.
#include <stb/stb_image.h>
#include <stb/stb_image_resize.h>
#include <stb/stb_image_write.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>

namespace mixtape::data {

namespace fs = std::filesystem;

namespace {

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

std::vector<fs::path> list_images(const std::string& dir, bool recursive) {
  std::error_code ec;
  MT_CHECK(fs::is_directory(dir, ec), "load_image_folder: '", dir, "' is not a directory");
  std::vector<fs::path> files;
  auto take = [&](const fs::directory_entry& e) {
    if (e.is_regular_file(ec) && is_image_file(e.path())) files.push_back(e.path());
  };
  if (recursive) {
    for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied)) take(e);
  } else {
    for (const auto& e : fs::directory_iterator(dir)) take(e);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Note [Bytes that reach stb_image]
// stb_image chooses its decoder from the bytes, not from the name: a .png file holding GIF, BMP,
// PSD, TGA, HDR, PIC or PNM data would reach decoders this loader does not promise, and most of
// the memory errors reported against stb_image live in those. Only files that start with the PNG
// or the JPEG signature are handed to it.
// Debian 12's libstb (stb_image 2.27) also trusts a JPEG's Huffman table sizes: a DHT segment
// whose 16 code-length counts add up to more than 256 makes it write past the table's arrays
// (nothings/stb issue 1289, fixed upstream after 2.27; found here by fuzz/image.cpp). Nor does it
// check that a scan's Huffman tables were defined: a scan that names a table no DHT segment before
// it defined decodes with the uninitialized memory of that table, and indexed its symbols at
// -437,983,680 (also found by fuzz/image.cpp). So the segments of a JPEG are walked the way
// stb_image reads them, and both are refused first.
// The walk only reads: where stb_image would stop at a malformed segment, the walk goes on, so it
// can refuse a file stb_image would also have refused, never pass a table stb_image would build.

// A JPEG's bytes as stb_image reads them: past the end, every byte reads as 0.
class JpegBytes {
 public:
  explicit JpegBytes(const std::vector<unsigned char>& b) : b_(b) {}
  size_t at() const { return at_; }
  bool done() const { return at_ >= b_.size(); }
  int byte() { return at_ < b_.size() ? b_[at_++] : 0; }
  int be16() {
    const int hi = byte();
    return hi << 8 | byte();
  }
  void skip(int64_t n) { at_ += size_t(std::max<int64_t>(n, 0)); }
  // stbi__get_marker: 0xFF, any 0xFF fill bytes, then the marker. Bytes between segments that are
  // not 0xFF are skipped (stb_image skips them after a segment in the header).
  int marker() {
    while (!done() && b_[at_] != 0xFF) ++at_;
    int m = byte();
    while (m == 0xFF) m = byte();
    return m;
  }
  // After a scan header: the entropy-coded data runs to the first 0xFF that is neither a stuffed
  // zero (FF 00) nor a restart marker (FF D0..D7), where stb_image's decoder stops too.
  void skip_entropy_coded_data() {
    while (!done()) {
      if (b_[at_] != 0xFF) {
        ++at_;
        continue;
      }
      size_t next = at_ + 1;
      while (next < b_.size() && b_[next] == 0xFF) ++next;
      if (next < b_.size() && (b_[next] == 0x00 || (b_[next] >= 0xD0 && b_[next] <= 0xD7))) {
        at_ = next + 1;
        continue;
      }
      return;  // at the 0xFF of the next marker (or the end)
    }
  }

 private:
  const std::vector<unsigned char>& b_;
  size_t at_ = 0;
};

// Why the Huffman tables of a JPEG must not reach stb_image (Note [Bytes that reach stb_image]),
// or "" when they may.
std::string jpeg_huffman_error(const std::vector<unsigned char>& bytes) {
  JpegBytes in(bytes);
  if (in.marker() != 0xD8) return "";  // no SOI: stb_image refuses it
  bool defined[2][4] = {};             // [DC, AC][table id]: built by a DHT segment so far
  bool progressive = false;            // the frame is SOF2
  while (!in.done()) {
    const size_t start = in.at();
    const int m = in.marker();
    if (m == 0xD9 || m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) return "";  // EOI, or stb_image stops
    const int length = in.be16();
    if (m == 0xDA) {  // SOS, as stbi__process_scan_header reads it, then the entropy-coded data
      const int n = in.byte();
      if (n < 1 || n > 4 || length != 6 + 2 * n) return "";  // stb_image refuses the scan
      int tables[4][2];
      for (int i = 0; i < n; ++i) {
        in.byte();  // the component
        const int q = in.byte();
        tables[i][0] = q >> 4;
        tables[i][1] = q & 15;
        if (tables[i][0] > 3 || tables[i][1] > 3) return "";  // stb_image refuses the scan
      }
      const int spectral_start = in.byte();
      in.byte();  // the spectral end
      const int successive_high = in.byte() >> 4;
      // Which tables the scan decodes with (stbi__parse_entropy_coded_data): a baseline scan both;
      // a progressive scan its DC tables when it starts at coefficient 0 (the first DC pass only),
      // its AC tables otherwise.
      const bool dc = !progressive || (spectral_start == 0 && successive_high == 0);
      const bool ac = !progressive || spectral_start != 0;
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < 2; ++k)
          if ((k == 0 ? dc : ac) && !defined[k][tables[i][k]])
            return detail::cat("corrupt JPEG: the scan at byte ", start, " decodes with the ", k == 0 ? "DC" : "AC",
                               " Huffman table ", tables[i][k], ", which no DHT segment before it defines");
      in.skip_entropy_coded_data();
      continue;
    }
    if (m != 0xC4) {  // every other segment: its length
      if (m >= 0xC0 && m <= 0xC2) progressive = m == 0xC2;
      in.skip(length - 2);
      continue;
    }
    // DHT, as stbi__process_marker reads it: tables while the declared length lasts.
    for (int left = length - 2; left > 0;) {
      const int q = in.byte();
      if ((q >> 4) > 1 || (q & 15) > 3) return "";  // stb_image refuses the table
      int codes = 0;
      for (int i = 0; i < 16; ++i) codes += in.byte();
      if (codes > 256)
        return detail::cat("corrupt JPEG: the Huffman table in the DHT segment at byte ", start, " declares ", codes,
                           " codes, more than the 256 a table can hold");
      in.skip(codes);
      left -= 17 + codes;
      defined[q >> 4][q & 15] = true;
    }
  }
  return "";
}

// Note [PNG chunks]
// A PNG's chunks are walked before stb_image (2.27) reads them, the way stbi__get_chunk_header
// does (length, type, data, CRC), up to the IEND chunk, for two of its habits:
//   - It sizes the buffer for the IDAT data from each chunk's declared length before it checks
//     that the bytes are there: a 143-byte file declaring an IDAT of 1.1 GB made it allocate
//     2 GB (found by fuzz/image.cpp). A chunk that runs past the end of the file is refused here:
//     stb_image decodes only at IEND, which such a file cannot reach, so no image is lost.
//   - An IDAT chunk of length 0 (valid: the compressed stream is the concatenation of the IDAT
//     data) before the first one with data is a memcpy of 0 bytes to the null pointer, which
//     UBSan reports (also found by fuzz/image.cpp). Empty IDAT chunks are dropped from the bytes
//     stb_image sees, which changes no pixel.
// A file that ends before its IEND chunk is refused too (stb_image cannot decode it either).
std::string prepare_png(std::vector<unsigned char>& bytes) {
  auto be32 = [&](size_t at) {
    return uint32_t(bytes[at]) << 24 | uint32_t(bytes[at + 1]) << 16 | uint32_t(bytes[at + 2]) << 8 |
           uint32_t(bytes[at + 3]);
  };
  auto is_type = [&](size_t at, const char* type) { return std::equal(type, type + 4, bytes.begin() + int64_t(at)); };
  size_t read = 8, write = 8;  // past the signature
  for (;;) {
    if (read + 8 > bytes.size())
      return detail::cat("corrupt PNG: the file ends at byte ", bytes.size(), ", before its IEND chunk");
    if (is_type(read + 4, "IEND")) break;
    const uint64_t length = be32(read);
    if (read + 12 + length > bytes.size()) {
      const auto type = bytes.begin() + int64_t(read) + 4;
      std::string name = "a chunk of type 0x";
      if (std::all_of(type, type + 4, [](unsigned char c) { return std::isalpha(c) != 0; })) {
        name = "the " + std::string(type, type + 4) + " chunk";
      } else {
        char hex[9];
        std::snprintf(hex, sizeof hex, "%08X", unsigned(be32(read + 4)));
        name += hex;
      }
      return detail::cat("corrupt PNG: ", name, " at byte ", read, " declares ", length,
                         " bytes of data, past the end of the file (", bytes.size(), " bytes)");
    }
    if (length > 0 || !is_type(read + 4, "IDAT")) {
      std::copy(bytes.begin() + int64_t(read), bytes.begin() + int64_t(read + 12 + length),
                bytes.begin() + int64_t(write));
      write += 12 + length;
    }
    read += 12 + length;
  }
  bytes.erase(std::copy(bytes.begin() + int64_t(read), bytes.end(), bytes.begin() + int64_t(write)), bytes.end());
  return "";
}

// Why `bytes` must not reach stb_image (Note [Bytes that reach stb_image]), or "" when they may.
// A PNG's chunks are checked, and its empty IDAT chunks dropped, here (Note [PNG chunks]).
std::string prepare_for_stb_image(std::vector<unsigned char>& bytes) {
  static constexpr unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.size() >= 8 && std::equal(kPng, kPng + 8, bytes.begin())) return prepare_png(bytes);
  if (bytes.size() >= 2 && bytes[0] == 0xFF && bytes[1] == 0xD8) return jpeg_huffman_error(bytes);
  return "not a PNG or JPEG file (it starts with neither signature)";
}

// The bytes of a file, or why they cannot be read.
std::string read_file(const fs::path& path, std::vector<unsigned char>& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return detail::cat("cannot open it: ", std::strerror(errno));
  bytes.assign(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) return "error reading it";
  if (bytes.size() > size_t(std::numeric_limits<int>::max())) return "larger than the 2 GiB stb_image reads";
  return "";
}

// The largest ratio of an image's longer side to its shorter side that decode_one accepts.
constexpr int64_t kMaxAspect = 16;

struct StbiFree {
  void operator()(unsigned char* p) const { stbi_image_free(p); }
};

// Decodes one file into `out` (C x N x N floats in [-1, 1], appended). Returns "" on success,
// else the reason the file was rejected (an image of more than max_pixels is not decoded).
std::string decode_one(const fs::path& path, int channels, int n, int64_t max_pixels, std::vector<float>& out) {
  std::vector<unsigned char> bytes;
  if (std::string why = read_file(path, bytes); !why.empty()) return why;
  if (std::string why = prepare_for_stb_image(bytes); !why.empty()) return why;
  int w = 0, h = 0, file_channels = 0;
  // The header's size first (stbi_info reads no pixels): where it cannot be read, stbi_load
  // below gives the reason.
  if (stbi_info_from_memory(bytes.data(), int(bytes.size()), &w, &h, &file_channels) &&
      int64_t(w) * int64_t(h) > max_pixels)
    return detail::cat("a ", w, "x", h, " image: more than max_pixels (", max_pixels,
                       ") pixels (ImageFolderOptions::max_pixels)");
  std::unique_ptr<unsigned char, StbiFree> px(
      stbi_load_from_memory(bytes.data(), int(bytes.size()), &w, &h, &file_channels, channels));
  if (!px) {
    const char* why = stbi_failure_reason();
    return why ? why : "unknown stb_image failure";
  }
  if (w <= 0 || h <= 0) return "empty image";

  // Shorter side -> n, the longer side scaled to keep the aspect ratio (truncated, >= n).
  const bool wide = w >= h;
  const int64_t shorter = wide ? h : w, longer = wide ? w : h;
  // A centre crop of a longer strip keeps less than 1/kMaxAspect of it, and resizing such a
  // strip (a 17 x 55811 JPEG of 941 bytes) costs minutes in stb_image_resize's filter set-up.
  if (longer > kMaxAspect * shorter)
    return detail::cat("a ", w, "x", h, " image: the longer side is more than ", kMaxAspect,
                       " times the shorter (a centre crop would keep less than 1/", kMaxAspect, " of it)");
  const int64_t new_long = std::max<int64_t>(n, int64_t(double(n) * double(longer) / double(shorter)));
  const int rw = int(wide ? new_long : n), rh = int(wide ? n : new_long);

  // HWC floats in [0, 1].
  const size_t count = size_t(w) * size_t(h) * size_t(channels);
  std::vector<float> src(count);
  for (size_t i = 0; i < count; ++i) src[i] = float(px.get()[i]) * (1.0f / 255.0f);
  std::vector<float> resized;
  if (rw == w && rh == h) {
    resized = std::move(src);
  } else {
    resized.resize(size_t(rw) * size_t(rh) * size_t(channels));
    if (!stbir_resize_float(src.data(), w, h, 0, resized.data(), rw, rh, 0, channels))
      return detail::cat("stb_image_resize failed resizing ", w, "x", h, " to ", rw, "x", rh);
  }

  // Centre crop, HWC -> CHW, [0, 1] -> [-1, 1] (the cubic filters can overshoot: clamp first).
  const int top = int(std::lround((rh - n) / 2.0)), left = int(std::lround((rw - n) / 2.0));
  const size_t base = out.size();
  out.resize(base + size_t(channels) * size_t(n) * size_t(n));
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        const float v = resized[(size_t(top + y) * size_t(rw) + size_t(left + x)) * size_t(channels) + size_t(c)];
        out[base + (size_t(c) * size_t(n) + size_t(y)) * size_t(n) + size_t(x)] =
            2.0f * std::clamp(v, 0.0f, 1.0f) - 1.0f;
      }
  return "";
}

}  // namespace

ImageFolder load_image_folder(const std::string& dir, const ImageFolderOptions& options) {
  MT_CHECK(options.size > 0 && options.size <= 16384, "load_image_folder: size must be in [1, 16384], got ",
           options.size);
  MT_CHECK(options.max_pixels > 0, "load_image_folder: max_pixels must be positive, got ", options.max_pixels);
  const std::vector<fs::path> files = list_images(dir, options.recursive);
  MT_CHECK(!files.empty(), "load_image_folder: no .png/.jpg/.jpeg files in '", dir, "'",
           options.recursive ? "" : " (not searching sub-folders; set recursive)");

  const int channels = options.grayscale ? 1 : 3;
  const int n = int(options.size);
  ImageFolder result;
  std::vector<float> pixels;
  for (const fs::path& p : files) {
    if (options.limit >= 0 && int64_t(result.paths.size()) >= options.limit) break;
    const std::string why = decode_one(p, channels, n, options.max_pixels, pixels);
    if (why.empty()) {
      result.paths.push_back(p.string());
      continue;
    }
    MT_CHECK(options.skip_unreadable, "load_image_folder: cannot decode '", p.string(), "': ", why);
    ++result.skipped;
    result.skipped_reasons.push_back(p.string() + ": " + why);
  }
  MT_CHECK(!result.paths.empty(), "load_image_folder: none of the ", files.size(), " image files in '", dir,
           "' could be decoded (first: ", result.skipped_reasons.empty() ? "" : result.skipped_reasons[0], ")");

  const int64_t m = int64_t(result.paths.size());
  result.images = empty({m, channels, n, n}, DType::f32);
  std::copy(pixels.begin(), pixels.end(), result.images.data<float>());
  return result;
}

// ---- PNG grids -------------------------------------------------------------------------------

namespace {

void append_bytes(void* context, void* data, int size) {
  auto* buf = static_cast<std::vector<unsigned char>*>(context);
  const auto* p = static_cast<const unsigned char*>(data);
  buf->insert(buf->end(), p, p + size);
}

unsigned char to_byte(float v) {
  if (std::isnan(v)) v = -1.0f;
  v = std::clamp(v, -1.0f, 1.0f);
  return static_cast<unsigned char>(std::lround((v + 1.0f) * 127.5f));
}

// Writes bytes to `path` atomically: `<path>.tmp.<pid>`, fsync, rename (then fsync the folder).
void write_file_atomic(const std::string& path, const std::vector<unsigned char>& bytes, const char* op) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_CHECK(fd >= 0, op, ": cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(detail::cat(op, ": writing '", tmp, "' failed: ", std::strerror(err)));
    }
    done += size_t(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(detail::cat(op, ": flushing '", tmp, "' failed: ", std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(detail::cat(op, ": renaming '", tmp, "' to '", path, "' failed: ", std::strerror(err)));
  }
  const fs::path parent = fs::path(path).parent_path();
  const int dfd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: makes the rename durable
    ::close(dfd);
  }
}

}  // namespace

void write_png_grid(const std::string& path, const Tensor& images, int64_t rows, int64_t cols, int64_t padding,
                    double pad_value) {
  MT_CHECK(images.dim() == 4 && (images.size(1) == 1 || images.size(1) == 3),
           "write_png_grid: expected images [M, C, H, W] with C = 1 or 3, got ", images.meta());
  MT_CHECK(is_floating(images.dtype()), "write_png_grid: expected a floating dtype, got ", images.meta());
  MT_CHECK(rows > 0 && cols > 0 && padding >= 0, "write_png_grid: rows and cols must be positive and padding ",
           "non-negative, got rows ", rows, " cols ", cols, " padding ", padding);
  const int64_t m = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  MT_CHECK(m <= rows * cols, "write_png_grid: ", m, " images do not fit a ", rows, " x ", cols, " grid");
  const int64_t gw = cols * w + (cols + 1) * padding, gh = rows * h + (rows + 1) * padding;
  MT_CHECK(gw > 0 && gh > 0 && gw <= (1 << 16) && gh <= (1 << 16), "write_png_grid: grid of ", gw, " x ", gh,
           " pixels is out of range");

  const std::vector<float> v = images.to(Device::cpu()).values<float>();  // [M, C, H, W] row-major
  std::vector<unsigned char> grid(size_t(gw * gh * c), to_byte(float(pad_value)));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t y0 = padding + (i / cols) * (h + padding), x0 = padding + (i % cols) * (w + padding);
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          grid[size_t(((y0 + y) * gw + (x0 + x)) * c + ch)] = to_byte(v[size_t(((i * c + ch) * h + y) * w + x)]);
  }

  std::vector<unsigned char> png;
  const int ok = stbi_write_png_to_func(append_bytes, &png, int(gw), int(gh), int(c), grid.data(), int(gw * c));
  MT_CHECK(ok && !png.empty(), "write_png_grid: stb_image_write could not encode a ", gw, " x ", gh, " PNG for '", path,
           "'");
  write_file_atomic(path, png, "write_png_grid");
}

}  // namespace mixtape::data
