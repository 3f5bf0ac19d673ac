// Writes the seed corpus of the harnesses (fuzz/corpus/<harness>/) and the nesting regression
// (fuzz/regressions/safetensors/): small valid files, written by the library's own writers and
// stb_image_write where there is one, and near-valid ones (cut short, one field wrong) that start
// the fuzzer next to the checks. The files are committed; run this only to change them:
//
//   cmake --build build-asan --target fuzz_make_seeds && build-asan/fuzz/fuzz_make_seeds fuzz
#include <stb/stb_image_write.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "data/idx.h"
#include "fuzz/checkpoint_setup.h"
#include "tensor/safetensors.h"

namespace fs = std::filesystem;
using namespace mixtape;
using Bytes = std::string;

namespace {

fs::path root;  // the fuzz/ folder

void write(const fs::path& rel, const Bytes& bytes) {
  const fs::path p = root / rel;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  std::printf("%8zu  %s\n", bytes.size(), p.string().c_str());
}

Bytes read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// ---- safetensors ---------------------------------------------------------------------------

// The bytes save_safetensors writes for `tensors`.
Bytes saved(const NamedTensors& tensors, const StringMap& metadata = {}) {
  const fs::path tmp = fs::temp_directory_path() / "mixtape-seed.safetensors";
  save_safetensors(tmp.string(), tensors, metadata);
  Bytes b = read(tmp);
  fs::remove(tmp);
  return b;
}

// A file from a header written by hand: the 8-byte little-endian length, the header, the data.
Bytes safetensors_file(const std::string& header, const Bytes& data) {
  Bytes b(8, '\0');
  for (int i = 0; i < 8; ++i) b[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return b + header + data;
}

void safetensors_seeds() {
  const Bytes matrix =
      saved({{"w", from_vector(std::vector<float>{1, -2, 0.5f, 3, 0, -0.25f}, {2, 3})}}, {{"step", "3"}});
  write("corpus/safetensors/f32_matrix.safetensors", matrix);
  write("corpus/safetensors/every_dtype.safetensors",
        saved({{"a.f64", from_vector(std::vector<double>{1.5, -2}, {2}, DType::f64)},
               {"b.f16", from_vector(std::vector<float>{1, 65504, -0.0f}, {3}, DType::f16)},
               {"c.bf16", from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}, DType::bf16)},
               {"d.i64", from_vector(std::vector<int64_t>{-7}, {1})},
               {"e.empty", empty({0, 4})},
               {"f.scalar", scalar_tensor(2.0)}},
              {{"format", "pt"}, {"epoch", "1"}}));
  write("corpus/safetensors/no_tensors.safetensors", saved({}));
  // Near-valid: each breaks one rule of the format.
  write("corpus/safetensors/truncated.safetensors", matrix.substr(0, matrix.size() - 3));
  write("corpus/safetensors/trailing_byte.safetensors", matrix + "x");
  Bytes long_header = matrix;
  long_header[0] = char(long_header[0] + 64);
  write("corpus/safetensors/header_past_end.safetensors", long_header);
  const Bytes eight(8, '\1');
  write("corpus/safetensors/hole.safetensors",
        safetensors_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight));
  write("corpus/safetensors/overlap.safetensors",
        safetensors_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         eight));
  write("corpus/safetensors/duplicate_name.safetensors",
        safetensors_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         eight));
  write("corpus/safetensors/unknown_dtype.safetensors",
        safetensors_file(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", eight));
  write("corpus/safetensors/huge_shape.safetensors",
        safetensors_file(R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  write("corpus/safetensors/metadata_not_string.safetensors",
        safetensors_file(R"({"__metadata__":{"k":[1,{"x":null}]},"a":{"dtype":"I64","shape":[1],)"
                         R"("data_offsets":[0,8]}})",
                         eight));
  write("corpus/safetensors/escaped_name.safetensors",
        safetensors_file(R"({"\u00e9\"[{":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", eight));

  // Note [Header nesting] in tensor/safetensors.cpp: parsing this header, or quoting it in a
  // message, recursed once per level and overflowed the stack before the nesting check.
  write("regressions/safetensors/nested_100000.safetensors",
        safetensors_file("{\"w\":" + std::string(100000, '['), ""));
}

// ---- IDX -----------------------------------------------------------------------------------

Bytes idx_bytes(const data::IdxArray& a, bool gz) {
  const fs::path tmp = fs::temp_directory_path() / (gz ? "mixtape-seed.idx.gz" : "mixtape-seed.idx");
  data::write_idx(tmp.string(), a);
  Bytes b = read(tmp);
  fs::remove(tmp);
  return b;
}

data::IdxArray idx_array(data::IdxType type, Shape shape) {
  data::IdxArray a{type, shape, {}};
  a.data.resize(size_t(a.numel()) * data::idx_type_size(type));
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = uint8_t(i * 37 + 11);
  return a;
}

void idx_seeds() {
  using data::IdxType;
  const data::IdxArray images = idx_array(IdxType::u8, {2, 3, 4});
  const Bytes plain = idx_bytes(images, false), gz = idx_bytes(images, true);
  write("corpus/idx/u8_images", plain);
  write("corpus/idx/u8_images.gz", gz);
  write("corpus/idx/u8_labels", idx_bytes(idx_array(IdxType::u8, {5}), false));
  write("corpus/idx/i8_4d", idx_bytes(idx_array(IdxType::i8, {1, 2, 1, 2}), false));
  write("corpus/idx/i16", idx_bytes(idx_array(IdxType::i16, {3}), false));
  write("corpus/idx/i32.gz", idx_bytes(idx_array(IdxType::i32, {2, 2}), true));
  write("corpus/idx/f32", idx_bytes(idx_array(IdxType::f32, {3}), false));
  write("corpus/idx/f64.gz", idx_bytes(idx_array(IdxType::f64, {2}), true));
  write("corpus/idx/zero_size", idx_bytes(idx_array(IdxType::u8, {0, 28, 28}), false));
  // Near-valid.
  write("corpus/idx/truncated_payload", plain.substr(0, plain.size() - 5));
  write("corpus/idx/trailing_byte", plain + "\x2a");
  write("corpus/idx/gz_cut_in_trailer.gz", gz.substr(0, gz.size() - 4));
  Bytes bad_crc = gz;
  bad_crc[bad_crc.size() - 6] = char(bad_crc[bad_crc.size() - 6] ^ 0x10);
  write("corpus/idx/gz_bad_crc.gz", bad_crc);
  write("corpus/idx/huge_sizes", Bytes("\0\0\x0d\x03\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x02", 16));
}

// ---- images ----------------------------------------------------------------------------------

void append(void* context, void* data, int size) {
  static_cast<Bytes*>(context)->append(static_cast<const char*>(data), size_t(size));
}

// w x h pixels of `comp` channels, a gradient with some texture.
std::vector<uint8_t> pixels(int w, int h, int comp) {
  std::vector<uint8_t> px(size_t(w * h * comp));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < comp; ++c)
        px[size_t((y * w + x) * comp + c)] = uint8_t(x * 40 + y * 25 + c * 70 + (x ^ y) * 9);
  return px;
}

Bytes stb_png(int w, int h, int comp) {
  Bytes out;
  const std::vector<uint8_t> px = pixels(w, h, comp);
  stbi_write_png_to_func(append, &out, w, h, comp, px.data(), w * comp);
  return out;
}

Bytes stb_jpg(int w, int h, int comp, int quality) {
  Bytes out;
  const std::vector<uint8_t> px = pixels(w, h, comp);
  stbi_write_jpg_to_func(append, &out, w, h, comp, px.data(), quality);
  return out;
}

Bytes be32(uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }

Bytes png_chunk(const std::string& type, const Bytes& body) {
  const Bytes tb = type + body;
  const uint32_t crc = uint32_t(crc32(0, reinterpret_cast<const Bytef*>(tb.data()), uInt(tb.size())));
  return be32(uint32_t(body.size())) + tb + be32(crc);
}

// A PNG written by hand for what stb_image_write cannot write: 16-bit samples, a palette,
// Adam7 interlacing. `scanlines` are the filtered rows (each with its filter byte), in pass
// order when interlaced.
Bytes png_file(int w, int h, int depth, int color_type, bool interlaced, const Bytes& scanlines,
               const Bytes& palette = "") {
  Bytes ihdr = be32(uint32_t(w)) + be32(uint32_t(h));
  ihdr += {char(depth), char(color_type), 0, 0, char(interlaced ? 1 : 0)};
  uLongf n = compressBound(uLong(scanlines.size()));
  Bytes z(n, '\0');
  compress2(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(scanlines.data()),
            uLong(scanlines.size()), 9);
  z.resize(n);
  Bytes png("\x89PNG\r\n\x1a\n", 8);
  png += png_chunk("IHDR", ihdr);
  if (!palette.empty()) png += png_chunk("PLTE", palette);
  return png + png_chunk("IDAT", z) + png_chunk("IEND", "");
}

void image_seeds() {
  const Bytes rgb = stb_png(5, 3, 3), jpg = stb_jpg(9, 6, 3, 90);
  write("corpus/image/rgb_5x3.png", rgb);
  write("corpus/image/gray_alpha_4x4.png", stb_png(4, 4, 2));
  write("corpus/image/rgba_2x7.png", stb_png(2, 7, 4));
  // 16-bit gray 3x2, filters none and sub.
  write("corpus/image/gray16_3x2.png",
        png_file(3, 2, 16, 0, false, Bytes("\0\x12\x34\xff\xff\0\0\x01\x01\0\x10\0\x20\0", 14)));
  // 4-bit palette of three colours, 4x2.
  write("corpus/image/palette4_4x2.png",
        png_file(4, 2, 4, 3, false, Bytes("\0\x01\x20\0\x12\x10", 6), Bytes("\xff\0\0\0\xff\0\0\0\xff", 9)));
  // Adam7 RGB 2x2: pass 1 holds (0,0), pass 6 (1,0), pass 7 row 1.
  write("corpus/image/interlaced_2x2.png",
        png_file(2, 2, 8, 2, true, Bytes("\0\x10\x20\x30\0\x40\x50\x60\0\x70\x80\x90\xa0\xb0\xc0", 15)));
  write("corpus/image/rgb_9x6.jpg", jpg);
  write("corpus/image/gray_8x8.jpg", stb_jpg(8, 8, 1, 75));
  write("corpus/image/rgb_17x3_q100.jpg", stb_jpg(17, 3, 3, 100));  // quality 100: no chroma subsampling
  // Near-valid.
  write("corpus/image/png_cut_in_idat.png", rgb.substr(0, rgb.size() - 20));
  write("corpus/image/jpg_cut_in_scan.jpg", jpg.substr(0, jpg.size() - 40));
  Bytes wide = rgb;  // IHDR width 5 -> 65541: the IDAT holds far too few rows
  wide[16 + 1] = 1;
  write("corpus/image/png_wrong_width.png", wide);
}

// ---- text ------------------------------------------------------------------------------------

void text_seeds() {
  write("corpus/text/one_line.txt", "hello, world\n");
  write("corpus/text/fortunes.txt",
        "A day without sunshine is like night.\n%\nThe trouble with the rat race is that\neven if you win, "
        "you're still a rat.\n\t\t-- Lily Tomlin\n%\n");
  write("corpus/text/utf8_no_newline.txt", "na\xc3\xafve caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x99\x82 end");
  write("corpus/text/one_byte.txt", "a");
  write("corpus/text/binary.txt", Bytes("\0\x01\xff\xfe\r\n\x7f\x80\0\0", 10));
}

// ---- checkpoints ---------------------------------------------------------------------------

// A checkpoint of each setup of checkpoint_setup.h after two steps, as the examples save it; one
// of them without checksums, and one with a flipped bit.
void checkpoint_seeds() {
  const fs::path tmp = fs::temp_directory_path() / "mixtape-seed-ckpt.safetensors";
  for (const fuzz::CheckpointSetup& s : fuzz::checkpoint_setups()) {
    fuzz::CheckpointRun run = fuzz::make_checkpoint_run(s);
    fuzz::checkpoint_train_step(run);
    fuzz::checkpoint_train_step(run);
    mixtape::train::Checkpointer(tmp.string(), 0, false).save(fuzz::checkpoint_of(run, 2), run.identity);
    const Bytes bytes = read(tmp);
    write(fs::path("corpus/checkpoint") / (std::string(s.name) + ".safetensors"), bytes);
    if (std::string(s.name) == "fp16-adam-backoff") {
      TensorDict d = load_safetensors(tmp.string());
      save_safetensors(tmp.string(), d, Checksums::none);
      write("corpus/checkpoint/unverified.safetensors", read(tmp));
      Bytes flipped = bytes;
      flipped[flipped.size() - 3] = char(flipped[flipped.size() - 3] ^ 0x10);
      write("corpus/checkpoint/flipped_bit.safetensors", flipped);
    }
  }
  fs::remove(tmp);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FUZZ_DIR   (writes FUZZ_DIR/corpus/... and FUZZ_DIR/regressions/...)\n", argv[0]);
    return 2;
  }
  root = argv[1];
  safetensors_seeds();
  idx_seeds();
  image_seeds();
  text_seeds();
  checkpoint_seeds();
  return 0;
}
