// IDX files (data/idx.h): round trips through zlib and plain files, every corruption the reader
// must reject with a useful message, and the (Fashion-)MNIST loader.
#include "support/catch.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/idx.h"
#include "support/test_util.h"

using namespace mixtape;
using namespace mixtape::data;
using Catch::Contains;
namespace fs = std::filesystem;

using mixtape::test::error_of;
using mixtape::test::TempDir;

namespace {

using Bytes = std::vector<uint8_t>;

// Writes raw bytes, through gzopen/gzwrite when `gz`.
void write_raw(const std::string& path, const Bytes& bytes, bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
    REQUIRE(gzclose(f) == Z_OK);
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    REQUIRE(out.good());
  }
}

// An IDX header: {0, 0, type, ndims} and big-endian u32 sizes.
Bytes header(uint8_t type, const std::vector<uint32_t>& dims) {
  Bytes b = {0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  return b;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("read_idx reads hand-written u8 files, gzip and plain", "[data]") {
  TempDir dir;
  Bytes payload;
  for (int i = 0; i < 24; ++i) payload.push_back(uint8_t(i * 10));
  const Bytes file = cat(header(0x08, {2, 3, 4}), payload);
  for (bool gz : {true, false}) {
    const std::string path = dir / (gz ? "a-idx3-ubyte.gz" : "a-idx3-ubyte");
    write_raw(path, file, gz);
    const IdxArray a = read_idx(path);
    CHECK(a.type == IdxType::u8);
    CHECK(a.shape == Shape{2, 3, 4});
    CHECK(a.numel() == 24);
    CHECK(a.data == payload);
  }
}

TEST_CASE("read_idx converts big-endian multi-byte elements to host order", "[data]") {
  TempDir dir;
  // i16 [2] = {0x0102, 0xFFFE} = {258, -2}; i32 [1] = 0x01020304; f32 [1] = 0x3FC00000 = 1.5.
  write_raw(dir / "i16", cat(header(0x0B, {2}), {0x01, 0x02, 0xFF, 0xFE}), true);
  write_raw(dir / "i32", cat(header(0x0C, {1}), {0x01, 0x02, 0x03, 0x04}), false);
  write_raw(dir / "f32", cat(header(0x0D, {1, 1}), {0x3F, 0xC0, 0x00, 0x00}), false);

  const IdxArray a = read_idx(dir / "i16");
  REQUIRE(a.data.size() == 4);
  int16_t v[2];
  std::memcpy(v, a.data.data(), 4);
  CHECK(v[0] == 258);
  CHECK(v[1] == -2);

  const IdxArray b = read_idx(dir / "i32");
  int32_t w;
  std::memcpy(&w, b.data.data(), 4);
  CHECK(w == 0x01020304);

  const IdxArray c = read_idx(dir / "f32");
  CHECK(c.type == IdxType::f32);
  CHECK(c.shape == Shape{1, 1});
  float f;
  std::memcpy(&f, c.data.data(), 4);
  CHECK(f == 1.5f);
}

TEST_CASE("write_idx and read_idx round trip", "[data]") {
  TempDir dir;
  IdxArray a;
  a.type = IdxType::i16;
  a.shape = {3, 2};
  const int16_t vals[6] = {0, 1, -1, 300, -32768, 32767};
  a.data.resize(12);
  std::memcpy(a.data.data(), vals, 12);
  for (const char* name : {"r.gz", "r.idx"}) {
    write_idx(dir / name, a);
    const IdxArray b = read_idx(dir / name);
    CHECK(b.type == a.type);
    CHECK(b.shape == a.shape);
    CHECK(b.data == a.data);
  }
  // The ".gz" file really is compressed: it starts with the gzip magic 1f 8b; the plain one with 0 0.
  std::ifstream gz(dir / "r.gz", std::ios::binary), plain(dir / "r.idx", std::ios::binary);
  CHECK(gz.get() == 0x1f);
  CHECK(gz.get() == 0x8b);
  CHECK(plain.get() == 0);
  CHECK(fs::file_size(dir / "r.idx") == 4 + 8 + 12);
}

TEST_CASE("read_idx rejects corrupt files with messages that name the file", "[data]") {
  TempDir dir;
  const Bytes ten = Bytes(10, 7);

  SECTION("bad magic") {
    const std::string p = dir / "magic.gz";
    write_raw(p, cat({0x12, 0x34, 0x08, 0x01, 0, 0, 0, 10}, ten), true);
    const std::string msg = error_of([&] { read_idx(p); });
    CHECK_THAT(msg, Contains(p) && Contains("bad magic 0x12340801"));
  }
  SECTION("wrong dtype byte") {
    const std::string p = dir / "dtype";
    write_raw(p, cat(header(0x07, {10}), ten), false);
    const std::string msg = error_of([&] { read_idx(p); });
    CHECK_THAT(msg, Contains(p) && Contains("unknown dtype byte 0x7") && Contains("0x00000701"));
  }
  SECTION("zero dims") {
    const std::string p = dir / "nodims";
    write_raw(p, {0, 0, 0x08, 0}, false);
    CHECK_THAT(error_of([&] { read_idx(p); }), Contains(p) && Contains("0 dims"));
  }
  SECTION("truncated payload, gzip and plain") {
    for (bool gz : {true, false}) {
      const std::string p = dir / (gz ? "short.gz" : "short");
      write_raw(p, cat(header(0x08, {2, 5}), Bytes(7, 1)), gz);
      const std::string msg = error_of([&] { read_idx(p); });
      CHECK_THAT(msg, Contains(p) && Contains("truncated payload") && Contains("need 10 bytes") && Contains("got 7"));
    }
  }
  SECTION("truncated header") {
    const std::string p = dir / "hdr.gz";
    write_raw(p, {0, 0, 0x08, 0x03, 0, 0, 0, 1}, true);  // 3 dims declared, 1 present
    CHECK_THAT(error_of([&] { read_idx(p); }), Contains(p) && Contains("truncated header") &&
                                                   Contains("expected 16 header bytes") && Contains("got 8"));
    const std::string q = dir / "tiny";
    write_raw(q, {0, 0}, false);
    CHECK_THAT(error_of([&] { read_idx(q); }), Contains("expected 4 magic bytes, got 2"));
  }
  SECTION("trailing bytes") {
    const std::string p = dir / "trail.gz";
    write_raw(p, cat(cat(header(0x08, {10}), ten), {1, 2, 3}), true);
    CHECK_THAT(error_of([&] { read_idx(p); }), Contains(p) && Contains("3 trailing bytes"));
  }
  SECTION("truncated gzip stream") {
    const std::string full = dir / "full.gz", cut = dir / "cut.gz";
    Bytes payload(5000);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t((i * 2654435761u) >> 13);  // incompressible-ish
    write_raw(full, cat(header(0x08, {5000}), payload), true);
    std::ifstream in(full, std::ios::binary);
    Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    gz.resize(gz.size() / 2);
    write_raw(cut, gz, false);
    const std::string msg = error_of([&] { read_idx(cut); });
    CHECK_THAT(msg, Contains(cut));
    CHECK_THAT(msg, Contains("truncated payload") || Contains("corrupt"));
  }
  SECTION("gzip stream cut inside its 8-byte trailer") {
    // Level 0 stores the bytes as they are, so a flipped byte is caught only by the trailer's CRC.
    Bytes payload(300);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 7 + 3);
    const std::string full = dir / "stored.gz";
    gzFile out = gzopen(full.c_str(), "wb0");
    REQUIRE(out != nullptr);
    const Bytes file = cat(header(0x08, {300}), payload);
    REQUIRE(gzwrite(out, file.data(), unsigned(file.size())) == int(file.size()));
    REQUIRE(gzclose(out) == Z_OK);
    std::ifstream in(full, std::ios::binary);
    const Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(read_idx(full).data == payload);
    const Bytes marker(payload.begin() + 100, payload.begin() + 116);
    const auto at = std::search(gz.begin(), gz.end(), marker.begin(), marker.end());
    REQUIRE(at != gz.end());
    Bytes flipped = gz;
    flipped[size_t(at - gz.begin())] ^= 0x40;
    const std::string p = dir / "cut.gz";
    auto cut_error = [&](const Bytes& src, size_t cut) {
      write_raw(p, Bytes(src.begin(), src.end() - std::ptrdiff_t(cut)), false);
      return error_of([&] { read_idx(p); });
    };
    for (size_t cut : {size_t(1), size_t(3), size_t(8)}) {
      INFO("trailer cut by " << cut << " bytes");
      CHECK_THAT(cut_error(gz, cut), Contains(p) && Contains("gzip stream ends early"));
    }
    // Without its CRC the flipped byte would load; with the CRC (cut into the length) it is caught.
    CHECK_THAT(cut_error(flipped, 8), Contains(p) && Contains("gzip stream ends early"));
    CHECK_THAT(cut_error(flipped, 3), Contains(p) && Contains("corrupt"));
  }
  SECTION("missing file and directory") {
    const std::string p = dir / "nope.gz";
    CHECK_THAT(error_of([&] { read_idx(p); }), Contains(p) && Contains("does not exist"));
    CHECK_THAT(error_of([&] { read_idx(dir.path.string()); }), Contains("is a directory"));
  }
}

TEST_CASE("load_fashion_mnist on fixture files: scaling, normalization, limits", "[data]") {
  TempDir dir;
  // 3 images of 2 x 2: bytes 0, 51, 255, 102 in image 0; labels 4, 0, 9.
  Bytes pixels = {0, 51, 255, 102, 1, 2, 3, 4, 255, 255, 0, 0};
  write_raw(dir / "t10k-images-idx3-ubyte.gz", cat(header(0x08, {3, 2, 2}), pixels), true);
  write_raw(dir / "t10k-labels-idx1-ubyte", cat(header(0x08, {3}), {4, 0, 9}), false);  // plain fallback

  MnistOptions raw;
  raw.normalize = false;
  const LabeledImages a = load_fashion_mnist(dir.path.string(), MnistSplit::test, raw);
  CHECK(a.images.shape() == Shape{3, 1, 2, 2});
  CHECK(a.images.dtype() == DType::f32);
  CHECK(a.labels.shape() == Shape{3});
  CHECK(a.labels.dtype() == DType::i64);
  CHECK(a.labels.values<int64_t>() == std::vector<int64_t>{4, 0, 9});
  const std::vector<float> x = a.images.values<float>();
  CHECK(x[0] == 0.0f);
  CHECK(x[1] == Approx(0.2).epsilon(1e-6));
  CHECK(x[2] == 1.0f);
  CHECK(x[3] == Approx(0.4).epsilon(1e-6));

  const LabeledImages b = load_fashion_mnist(dir.path.string(), MnistSplit::test);  // Fashion-MNIST stats
  const std::vector<float> y = b.images.values<float>();
  CHECK(y[0] == Approx((0.0 - 0.2860) / 0.3530).epsilon(1e-6));  // -0.81020
  CHECK(y[2] == Approx((1.0 - 0.2860) / 0.3530).epsilon(1e-6));  // 2.02266

  MnistOptions mnist;
  mnist.mean = kMnistMean;
  mnist.std = kMnistStd;
  mnist.limit = 2;
  const LabeledImages c = load_fashion_mnist(dir.path.string(), MnistSplit::test, mnist);
  CHECK(c.images.shape() == Shape{2, 1, 2, 2});
  CHECK(c.labels.values<int64_t>() == std::vector<int64_t>{4, 0});
  CHECK(c.images.values<float>()[2] == Approx((1.0 - 0.1307) / 0.3081).epsilon(1e-6));

  // The train split is missing: the error names the path and the Debian package.
  const std::string msg = error_of([&] { load_fashion_mnist(dir.path.string(), MnistSplit::train); });
  CHECK_THAT(msg, Contains((dir.path / "train-images-idx3-ubyte.gz").string()) && Contains("dataset-fashion-mnist"));
  CHECK_THAT(error_of([&] { load_fashion_mnist((dir.path / "absent").string()); }),
             Contains("does not exist") && Contains("dataset-fashion-mnist"));

  MnistOptions bad;
  bad.std = 0.0f;
  CHECK_THAT(error_of([&] { load_fashion_mnist(dir.path.string(), MnistSplit::test, bad); }), Contains("positive std"));
}

TEST_CASE("load_fashion_mnist rejects mismatched counts and wrong shapes", "[data]") {
  TempDir dir;
  write_raw(dir / "train-images-idx3-ubyte.gz", cat(header(0x08, {3, 1, 1}), {1, 2, 3}), true);
  write_raw(dir / "train-labels-idx1-ubyte.gz", cat(header(0x08, {2}), {0, 1}), true);
  CHECK_THAT(error_of([&] { load_fashion_mnist(dir.path.string(), MnistSplit::train); }),
             Contains("has 3 images") && Contains("has 2 labels") && Contains("train-labels-idx1-ubyte.gz"));

  write_raw(dir / "t10k-images-idx3-ubyte.gz", cat(header(0x08, {3}), {1, 2, 3}), true);  // 1-D "images"
  write_raw(dir / "t10k-labels-idx1-ubyte.gz", cat(header(0x08, {3}), {0, 1, 2}), true);
  CHECK_THAT(error_of([&] { load_fashion_mnist(dir.path.string(), MnistSplit::test); }),
             Contains("t10k-images-idx3-ubyte.gz") && Contains("expected u8 images [N, H, W]"));
}

TEST_CASE("load_fashion_mnist rejects zero-sized images", "[data]") {
  TempDir dir;
  for (const std::vector<uint32_t>& dims : {std::vector<uint32_t>{3, 0, 28}, std::vector<uint32_t>{3, 28, 0}}) {
    write_raw(dir / "train-images-idx3-ubyte.gz", header(0x08, dims), true);
    write_raw(dir / "train-labels-idx1-ubyte.gz", cat(header(0x08, {3}), {0, 1, 2}), true);
    CHECK_THAT(error_of([&] { load_fashion_mnist(dir.path.string(), MnistSplit::train); }),
               Contains("train-images-idx3-ubyte.gz") && Contains("zero-sized images"));
  }
}

TEST_CASE("load_fashion_mnist checks the labels against the number of classes when it loads", "[data]") {
  TempDir dir;
  write_raw(dir / "train-images-idx3-ubyte.gz", cat(header(0x08, {3, 1, 1}), {1, 2, 3}), true);
  write_raw(dir / "train-labels-idx1-ubyte.gz", cat(header(0x08, {3}), {4, 0, 12}), true);
  const std::string d = dir.path.string();
  CHECK_THAT(error_of([&] { load_fashion_mnist(d, MnistSplit::train); }),
             Contains("train-labels-idx1-ubyte.gz") && Contains("label 12 of example 2") && Contains("10 classes"));
  MnistOptions o;
  o.num_classes = 12;
  CHECK_THAT(error_of([&] { load_fashion_mnist(d, MnistSplit::train, o); }), Contains("12 classes (0..11)"));
  o.num_classes = 13;
  CHECK(load_fashion_mnist(d, MnistSplit::train, o).labels.values<int64_t>() == std::vector<int64_t>{4, 0, 12});
  o.num_classes = 0;  // no check
  CHECK(load_fashion_mnist(d, MnistSplit::train, o).labels.size(0) == 3);
  o.num_classes = 10;
  o.limit = 2;  // the examples kept are checked
  CHECK(load_fashion_mnist(d, MnistSplit::train, o).labels.values<int64_t>() == std::vector<int64_t>{4, 0});
  o.num_classes = -1;
  CHECK_THAT(error_of([&] { load_fashion_mnist(d, MnistSplit::train, o); }), Contains("num_classes"));
}

TEST_CASE("Fashion-MNIST test split from the Debian package", "[data]") {
  if (!fs::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) {
    WARN("skipped: " << kFashionMnistDir << " is absent (Debian package dataset-fashion-mnist)");
    return;
  }
  MnistOptions raw;
  raw.normalize = false;
  const LabeledImages d = load_fashion_mnist(kFashionMnistDir, MnistSplit::test, raw);
  REQUIRE(d.images.shape() == Shape{10000, 1, 28, 28});
  REQUIRE(d.labels.shape() == Shape{10000});
  std::vector<int64_t> counts(10, 0);
  for (int64_t y : d.labels.values<int64_t>()) {
    REQUIRE(y >= 0);
    REQUIRE(y <= 9);
    ++counts[size_t(y)];
  }
  CHECK(counts == std::vector<int64_t>(10, 1000));
  // Pixels in [0, 1] with a mean near the published training mean 0.2860.
  const float* p = d.images.data<float>();
  double sum = 0.0;
  float lo = 1.0f, hi = 0.0f;
  for (int64_t i = 0; i < d.images.numel(); ++i) {
    sum += p[i];
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  CHECK(lo == 0.0f);
  CHECK(hi == 1.0f);
  CHECK(sum / double(d.images.numel()) == Approx(0.2860).margin(0.005));
}
