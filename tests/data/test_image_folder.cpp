// Image folders (data/image_folder.h): decoding, resize + centre crop, value range, errors, and
// PNG grids. Fixtures are written with stb_image_write, independently of the code under test.
#include "support/catch.h"

#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/image_folder.h"
#include "support/test_util.h"

using namespace mixtape;
using namespace mixtape::data;
using Catch::Contains;
namespace fs = std::filesystem;

using mixtape::test::error_of;
using mixtape::test::TempDir;

namespace {

// The fixture folder:
//   a.png   16 x 8 RGB: left half black, right half white
//   b.PNG    4 x 4 grayscale, every byte 51
//   c.jpeg  12 x 10 RGB, every pixel (200, 100, 50)
//   notes.txt (ignored), sub/d.png 8 x 8 RGB white (recursive only)
void write_fixtures(const fs::path& dir) {
  std::vector<unsigned char> a(16 * 8 * 3);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) a[size_t((y * 16 + x) * 3 + c)] = x < 8 ? 0 : 255;
  REQUIRE(stbi_write_png((dir / "a.png").c_str(), 16, 8, 3, a.data(), 16 * 3));
  std::vector<unsigned char> b(4 * 4, 51);
  REQUIRE(stbi_write_png((dir / "b.PNG").c_str(), 4, 4, 1, b.data(), 4));
  std::vector<unsigned char> c(12 * 10 * 3);
  for (size_t i = 0; i < c.size(); i += 3) {
    c[i] = 200;
    c[i + 1] = 100;
    c[i + 2] = 50;
  }
  REQUIRE(stbi_write_jpg((dir / "c.jpeg").c_str(), 12, 10, 3, c.data(), 95));
  std::ofstream(dir / "notes.txt") << "not an image\n";
  fs::create_directory(dir / "sub");
  std::vector<unsigned char> d(8 * 8 * 3, 255);
  REQUIRE(stbi_write_png((dir / "sub" / "d.png").c_str(), 8, 8, 3, d.data(), 8 * 3));
}

// Value of image i, channel c, pixel (y, x) of a [M, C, N, N] tensor.
float at(const Tensor& t, int64_t i, int64_t c, int64_t y, int64_t x) {
  const int64_t C = t.size(1), N = t.size(2);
  return t.data<float>()[((i * C + c) * N + y) * N + x];
}

}  // namespace

TEST_CASE("load_image_folder: shapes, order, crop and values", "[data]") {
  TempDir dir;
  write_fixtures(dir.path);
  ImageFolderOptions opt;
  opt.size = 8;
  const ImageFolder f = load_image_folder(dir.path.string(), opt);
  REQUIRE(f.images.shape() == Shape{3, 3, 8, 8});
  REQUIRE(f.paths.size() == 3);
  CHECK(fs::path(f.paths[0]).filename() == "a.png");
  CHECK(fs::path(f.paths[1]).filename() == "b.PNG");
  CHECK(fs::path(f.paths[2]).filename() == "c.jpeg");
  CHECK(f.skipped == 0);
  for (float v : f.images.values<float>()) {
    REQUIRE(v >= -1.0f);
    REQUIRE(v <= 1.0f);
  }
  // a.png: height 8 is already N, so no resize; the centre crop keeps columns 4..11: four black
  // columns then four white ones.
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x) REQUIRE(at(f.images, 0, c, y, x) == (x < 4 ? -1.0f : 1.0f));
  // b.PNG: a constant 51 upsampled stays 51 -> 2 * 51/255 - 1 = -0.6, copied to all three channels.
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x) REQUIRE(at(f.images, 1, c, y, x) == Approx(-0.6).margin(1e-5));
  // c.jpeg: (200, 100, 50) through a lossy codec: within 3 levels.
  const double expect[3] = {200.0 / 127.5 - 1.0, 100.0 / 127.5 - 1.0, 50.0 / 127.5 - 1.0};
  for (int64_t c = 0; c < 3; ++c) CHECK(at(f.images, 2, c, 4, 4) == Approx(expect[c]).margin(3.0 / 127.5));

  opt.recursive = true;
  const ImageFolder r = load_image_folder(dir.path.string(), opt);
  CHECK(r.images.size(0) == 4);
  CHECK(fs::path(r.paths[3]).filename() == "d.png");
  CHECK(at(r.images, 3, 1, 0, 0) == 1.0f);

  opt.recursive = false;
  opt.grayscale = true;
  opt.limit = 2;
  const ImageFolder g = load_image_folder(dir.path.string(), opt);
  REQUIRE(g.images.shape() == Shape{2, 1, 8, 8});
  CHECK(at(g.images, 0, 0, 3, 3) == -1.0f);
  CHECK(at(g.images, 0, 0, 3, 4) == 1.0f);  // stb luma of white is 255
  CHECK(at(g.images, 1, 0, 0, 0) == Approx(-0.6).margin(1e-5));
}

TEST_CASE("load_image_folder resizes the shorter side, then crops the centre", "[data]") {
  TempDir dir;
  // 8 x 4 (w x h), left half 0, right half 255. Shorter side 4 -> 2 halves both sides: 4 x 2,
  // and the 2 x 2 centre crop keeps output columns 1 and 2. The image is antisymmetric under a
  // left-right flip (v(x) = 255 - v(7 - x)) and the filter is symmetric, so the two kept columns
  // are mirror values: left = -right in [-1, 1], with left < 0.
  std::vector<unsigned char> px(8 * 4);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 8; ++x) px[size_t(y * 8 + x)] = x < 4 ? 0 : 255;
  REQUIRE(stbi_write_png((dir.path / "s.png").c_str(), 8, 4, 1, px.data(), 8));
  ImageFolderOptions opt;
  opt.size = 2;
  opt.grayscale = true;
  const ImageFolder f = load_image_folder(dir.path.string(), opt);
  REQUIRE(f.images.shape() == Shape{1, 1, 2, 2});
  const float left = at(f.images, 0, 0, 0, 0), right = at(f.images, 0, 0, 0, 1);
  CHECK(left < -0.5f);
  CHECK(left + right == Approx(0.0).margin(1e-5));
  CHECK(at(f.images, 0, 0, 1, 0) == Approx(left).margin(1e-6));  // rows identical
  CHECK(at(f.images, 0, 0, 1, 1) == Approx(right).margin(1e-6));
}

TEST_CASE("load_image_folder reports corrupt files by name, or skips them", "[data]") {
  TempDir dir;
  write_fixtures(dir.path);
  std::ofstream(dir.path / "bad.png", std::ios::binary) << "this is not a png file at all";
  ImageFolderOptions opt;
  opt.size = 8;
  const std::string msg = error_of([&] { load_image_folder(dir.path.string(), opt); });
  CHECK_THAT(msg, Contains((dir.path / "bad.png").string()) && Contains("cannot decode"));
  INFO(msg);

  opt.skip_unreadable = true;
  const ImageFolder f = load_image_folder(dir.path.string(), opt);
  CHECK(f.images.size(0) == 3);
  CHECK(f.skipped == 1);
  REQUIRE(f.skipped_reasons.size() == 1);
  CHECK_THAT(f.skipped_reasons[0], Contains("bad.png"));

  fs::create_directory(dir.path / "empty");
  CHECK_THAT(error_of([&] { load_image_folder((dir.path / "empty").string(), opt); }), Contains("no .png"));
  CHECK_THAT(error_of([&] { load_image_folder((dir.path / "missing").string(), opt); }), Contains("not a directory"));
}

TEST_CASE("load_image_folder hands only PNG and JPEG bytes to stb_image", "[data]") {
  // Note [Bytes that reach stb_image]: stb_image would decode a BMP named .png, and a JPEG whose
  // Huffman table declares more than 256 codes made Debian's stb_image write past the table, one
  // whose scan names an undefined table made it read uninitialized memory (fuzz/regressions/image/).
  TempDir dir;
  const std::vector<unsigned char> px(8 * 8 * 3, 128);
  ImageFolderOptions opt;
  opt.size = 8;
  REQUIRE(stbi_write_bmp((dir.path / "bitmap.png").c_str(), 8, 8, 3, px.data()));
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }),
             Contains("bitmap.png") && Contains("not a PNG or JPEG file"));
  fs::remove(dir.path / "bitmap.png");

  REQUIRE(stbi_write_jpg((dir.path / "photo.jpg").c_str(), 8, 8, 3, px.data(), 90));
  CHECK(load_image_folder(dir.path.string(), opt).images.size(0) == 1);
  std::ifstream in(dir.path / "photo.jpg", std::ios::binary);
  std::string jpg(std::istreambuf_iterator<char>(in), {});
  in.close();
  // The first DHT segment: FF C4, its 2-byte length, the table class and id, then 16 counts of
  // codes per length; two of them raised to 200 make more than 256 codes.
  const size_t dht = jpg.find("\xff\xc4");
  REQUIRE(dht != std::string::npos);
  jpg[dht + 5 + 14] = char(200);
  jpg[dht + 5 + 15] = char(200);
  std::ofstream(dir.path / "photo.jpg", std::ios::binary | std::ios::trunc) << jpg;
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }),
             Contains("photo.jpg") && Contains("Huffman table") && Contains("more than the 256"));

  // A scan that decodes with a Huffman table no DHT segment defined made Debian's stb_image read
  // the table's uninitialized memory (fuzz/regressions/image/). The SOS segment: FF DA, its
  // 2-byte length, the component count, then per component its id and its DC and AC table ids.
  REQUIRE(stbi_write_jpg((dir.path / "photo.jpg").c_str(), 8, 8, 3, px.data(), 90));
  in.open(dir.path / "photo.jpg", std::ios::binary);
  jpg.assign(std::istreambuf_iterator<char>(in), {});
  in.close();
  const size_t sos = jpg.find("\xff\xda");
  REQUIRE(sos != std::string::npos);
  REQUIRE(jpg[sos + 4] == 3);
  jpg[sos + 8] = char(0x32);  // the second component: DC table 3, AC table 2
  std::ofstream(dir.path / "photo.jpg", std::ios::binary | std::ios::trunc) << jpg;
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }),
             Contains("photo.jpg") && Contains("DC Huffman table 3") && Contains("which no DHT segment"));
  jpg[sos + 8] = char(0x12);  // DC table 1 (defined), AC table 2 (not)
  std::ofstream(dir.path / "photo.jpg", std::ios::binary | std::ios::trunc) << jpg;
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }), Contains("AC Huffman table 2"));
  jpg[sos + 8] = char(0x11);  // as written
  std::ofstream(dir.path / "photo.jpg", std::ios::binary | std::ios::trunc) << jpg;
  CHECK(load_image_folder(dir.path.string(), opt).images.size(0) == 1);
}

TEST_CASE("load_image_folder refuses images of more than max_pixels before decoding them", "[data]") {
  // A JPEG of 1,050 bytes declaring 55811 x 8209 pixels (fuzz/regressions/image/) would have
  // taken 1.4 GB to decode and 5.5 GB as floats.
  TempDir dir;
  ImageFolderOptions opt;
  opt.size = 8;
  const std::vector<unsigned char> px(40 * 30 * 3, 90);
  REQUIRE(stbi_write_png((dir.path / "big.png").c_str(), 40, 30, 3, px.data(), 40 * 3));
  opt.max_pixels = 40 * 30 - 1;
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }),
             Contains("big.png") && Contains("40x30") && Contains("max_pixels (1199)"));
  opt.max_pixels = 40 * 30;
  CHECK(load_image_folder(dir.path.string(), opt).images.size(0) == 1);
  opt.max_pixels = 0;
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }), Contains("max_pixels must be positive"));

  // The default refuses the fuzzer's JPEG from its header.
  std::ifstream in(fs::path(MIXTAPE_SOURCE_DIR) / "fuzz/regressions/image/jpeg-55811x8209-from-1050-bytes.jpg",
                   std::ios::binary);
  const std::string jpg(std::istreambuf_iterator<char>(in), {});
  REQUIRE(jpg.size() == 1050);
  fs::remove(dir.path / "big.png");
  std::ofstream(dir.path / "huge.jpg", std::ios::binary) << jpg;
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), ImageFolderOptions{}); }),
             Contains("huge.jpg") && Contains("8209x55811") && Contains("max_pixels"));
}

TEST_CASE("load_image_folder decodes PNGs with empty IDAT chunks and refuses truncated chunks", "[data]") {
  // Note [PNG chunks]: an empty IDAT before the first one with data made stb_image copy 0 bytes
  // to a null pointer, and an IDAT declaring more bytes than the file has made it allocate them
  // (fuzz/regressions/image/).
  TempDir dir;
  ImageFolderOptions opt;
  opt.size = 8;
  std::vector<unsigned char> px(8 * 8 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<unsigned char>(i * 37 % 251);
  REQUIRE(stbi_write_png((dir.path / "p.png").c_str(), 8, 8, 3, px.data(), 8 * 3));
  const Tensor plain = load_image_folder(dir.path.string(), opt).images;
  auto write = [&](const std::string& bytes) { std::ofstream(dir.path / "p.png", std::ios::binary) << bytes; };

  std::ifstream in(dir.path / "p.png", std::ios::binary);
  std::string png(std::istreambuf_iterator<char>(in), {});
  in.close();
  const std::string empty_idat("\0\0\0\0IDAT\x35\xaf\x06\x1e", 12);  // length 0, type, CRC
  const size_t first_idat = png.find("IDAT") - 4, iend = png.find("IEND") - 4;
  REQUIRE(png.find("IDAT", first_idat + 8) == std::string::npos);  // stb_image_write: one IDAT
  std::string gapped = png;
  gapped.insert(iend, empty_idat);
  gapped.insert(first_idat, empty_idat + empty_idat);  // before the data, twice
  write(gapped + "trailing bytes after IEND are left alone");
  const Tensor from_gapped = load_image_folder(dir.path.string(), opt).images;
  REQUIRE(from_gapped.shape() == plain.shape());
  for (int64_t i = 0; i < plain.numel(); ++i) CHECK(from_gapped.data<float>()[i] == plain.data<float>()[i]);
  write(gapped.substr(0, gapped.size() - 4));  // IEND without its CRC: stb_image decodes it, so do we
  CHECK(load_image_folder(dir.path.string(), opt).images.size(0) == 1);

  // Only empty IDAT chunks: no image data, refused with stb_image's reason.
  write(png.substr(0, first_idat) + empty_idat + png.substr(iend));
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }),
             Contains("cannot decode") && Contains("p.png"));
  // The IDAT with the data cut short (after the two empty ones), and a chunk declaring 1.1 GB.
  write(gapped.substr(0, first_idat + 24 + 8 + 5));
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }),
             Contains("p.png") && Contains("corrupt PNG: the IDAT chunk at byte ") && Contains("past the end"));
  std::string huge = png;
  huge.replace(first_idat, 4, "\x41\x64\x6f\x62");
  write(huge);
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }),
             Contains("declares 1097101154 bytes of data, past the end of the file"));
  huge.replace(first_idat + 4, 4, std::string("\x01\x02\x03\x04", 4));
  write(huge);
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }), Contains("a chunk of type 0x01020304"));
  write(png.substr(0, iend));  // no IEND
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }), Contains("before its IEND chunk"));
}

TEST_CASE("load_image_folder refuses strips longer than 16 times their width", "[data]") {
  // A 17 x 55811 JPEG of 941 bytes (fuzz/regressions/image/) kept stb_image_resize busy for
  // minutes; a centre crop would keep 1/3283 of it.
  TempDir dir;
  ImageFolderOptions opt;
  opt.size = 4;
  const std::vector<unsigned char> px(2 * 40, 100);
  REQUIRE(stbi_write_png((dir.path / "strip.png").c_str(), 2, 40, 1, px.data(), 2));
  CHECK_THAT(error_of([&] { load_image_folder(dir.path.string(), opt); }),
             Contains("strip.png") && Contains("2x40") && Contains("more than 16 times"));
  REQUIRE(stbi_write_png((dir.path / "strip.png").c_str(), 2, 32, 1, px.data(), 2));  // 16:1 is accepted
  CHECK(load_image_folder(dir.path.string(), opt).images.size(0) == 1);
}

TEST_CASE("write_png_grid tiles, pads, clamps and writes atomically", "[data]") {
  TempDir dir;
  // 3 RGB images of 2 x 2 on a 2 x 2 grid with 1 pixel of padding: 7 x 7 pixels.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v(3 * 3 * 2 * 2, 0.0f);
  v[0] = -1.0f;          // image 0, R, (0, 0) -> 0
  v[1] = 1.0f;           // image 0, R, (0, 1) -> 255
  v[2] = 0.5f;           // image 0, R, (1, 0) -> 191
  v[3] = 3.0f;           // image 0, R, (1, 1) clamps -> 255
  v[4 + 0] = nan;        // image 0, G, (0, 0) -> 0
  v[12 + 8 + 3] = -7.f;  // image 1, B, (1, 1) clamps -> 0
  const Tensor images = from_vector(v, {3, 3, 2, 2});
  const std::string path = (dir.path / "grid.png").string();
  write_png_grid(path, images, 2, 2, 1);

  int w = 0, h = 0, c = 0;
  unsigned char* px = stbi_load(path.c_str(), &w, &h, &c, 3);
  REQUIRE(px != nullptr);
  CHECK(w == 7);
  CHECK(h == 7);
  auto pix = [&](int x, int y, int ch) { return int(px[(y * 7 + x) * 3 + ch]); };
  CHECK(pix(0, 0, 0) == 0);  // padding (pad_value -1)
  CHECK(pix(1, 1, 0) == 0);
  CHECK(pix(2, 1, 0) == 255);
  CHECK(pix(1, 2, 0) == 191);
  CHECK(pix(2, 2, 0) == 255);
  CHECK(pix(1, 1, 1) == 0);    // NaN
  CHECK(pix(1, 1, 2) == 128);  // 0 -> round(127.5)
  CHECK(pix(4, 1, 0) == 128);  // image 1 at column 1: x0 = 1 + 2 + 1 = 4
  CHECK(pix(5, 2, 2) == 0);
  CHECK(pix(1, 4, 1) == 128);  // image 2 at row 1
  CHECK(pix(4, 4, 0) == 0);    // the empty fourth cell is padding
  CHECK(pix(3, 3, 1) == 0);
  stbi_image_free(px);

  // Nothing but the grid is left in the folder (the temporary file was renamed).
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);

  // A grid written from a loaded image loads back to the same values (8-bit quantization).
  fs::create_directory(dir.path / "one");
  const Tensor gray = from_vector(std::vector<float>{-1.0f, -0.5f, 0.25f, 1.0f}, {1, 1, 2, 2}).to(DType::bf16);
  write_png_grid((dir.path / "one" / "g.png").string(), gray, 1, 1, 0);
  ImageFolderOptions opt;
  opt.size = 2;
  opt.grayscale = true;
  const std::vector<float> back = load_image_folder((dir.path / "one").string(), opt).images.values<float>();
  const std::vector<float> want = {-1.0f, -0.5f, 0.25f, 1.0f};
  for (size_t i = 0; i < 4; ++i) CHECK(back[i] == Approx(want[i]).margin(1.0 / 127.5));

  CHECK_THAT(error_of([&] { write_png_grid(path, zeros({3, 2, 2, 2}), 2, 2); }), Contains("C = 1 or 3"));
  CHECK_THAT(error_of([&] { write_png_grid(path, zeros({5, 3, 2, 2}), 2, 2); }), Contains("do not fit"));
  CHECK_THAT(error_of([&] {
               write_png_grid((dir.path / "no" / "x.png").string(), zeros({1, 3, 2, 2}), 1, 1);
             }),
             Contains("cannot create"));
}
