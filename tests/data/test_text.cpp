// Character corpora (data/text.h): vocabulary, encode/decode, entropy, splits and batches.
#include "support/catch.h"

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/text.h"
#include "support/test_util.h"

using namespace mixtape;
using namespace mixtape::data;
using Catch::Contains;
namespace fs = std::filesystem;

using mixtape::test::error_of;
using mixtape::test::TempDir;

namespace {

void write_file(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
  REQUIRE(out.good());
}

std::vector<int64_t> row(const Tensor& t, int64_t r) { return t.select(0, r).values<int64_t>(); }

}  // namespace

TEST_CASE("CharVocab: sorted bytes, encode/decode round trip, errors", "[data]") {
  const CharVocab v("hello world");
  CHECK(v.bytes() == " dehlorw");
  CHECK(v.size() == 8);
  CHECK(v.id(' ') == 0);
  CHECK(v.id('h') == 3);
  CHECK(v.id('w') == 7);
  CHECK(v.byte(4) == 'l');
  const std::vector<int64_t> ids = v.encode("hello");
  CHECK(ids == std::vector<int64_t>{3, 2, 4, 4, 5});
  CHECK(v.decode(ids) == "hello");
  CHECK(v.decode(from_vector(std::vector<int64_t>{7, 5, 6, 4, 1}, {5})) == "world");
  CHECK_THAT(error_of([&] { v.encode("hex"); }), Contains("byte 120") && Contains("offset 2"));
  CHECK_THAT(error_of([&] { v.byte(8); }), Contains("id 8"));

  // Bytes, not code points: "é" is two tokens and survives the round trip.
  const std::string utf8 = "caf\xc3\xa9";
  const CharVocab u(utf8);
  CHECK(u.size() == 5);
  CHECK(u.encode(utf8).size() == 5);
  CHECK(u.decode(u.encode(utf8)) == utf8);
  CHECK(u.byte(u.size() - 1) == 0xc3);  // highest byte value sorts last
}

TEST_CASE("unigram entropy in bits per character", "[data]") {
  // "aab": p = {2/3, 1/3}: H = log2(3) - 2/3 = 0.918295834...
  CHECK(unigram_entropy_bits("aab") == Approx(0.9182958340544896).epsilon(1e-12));
  CHECK(unigram_entropy_bits("abcd") == Approx(2.0).epsilon(1e-12));
  CHECK(unigram_entropy_bits("aaaa") == 0.0);
  CHECK(unigram_entropy_bits("") == 0.0);
  const std::vector<int64_t> ids = {0, 0, 1};
  CHECK(unigram_entropy_bits(std::span<const int64_t>(ids)) == Approx(0.9182958340544896).epsilon(1e-12));
  const TextCorpus c("aabaab", 0.0);
  CHECK(c.unigram_entropy_bits() == Approx(0.9182958340544896).epsilon(1e-12));
}

TEST_CASE("TextCorpus split and random batches", "[data]") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += char('a' + (i * 7) % 26);
  const TextCorpus c(text, 0.1);
  CHECK(c.vocab_size() == 26);
  REQUIRE(c.ids(TextSplit::train).size() == 90);
  REQUIRE(c.ids(TextSplit::validation).size() == 10);
  std::vector<int64_t> all = c.ids(TextSplit::train);
  all.insert(all.end(), c.ids(TextSplit::validation).begin(), c.ids(TextSplit::validation).end());
  CHECK(c.decode(all) == text);

  Generator gen(42);
  const TextBatch b = c.random_batch(TextSplit::train, 5, 8, gen);
  CHECK(b.input.shape() == Shape{5, 8});
  CHECK(b.target.shape() == Shape{5, 8});
  CHECK(b.input.dtype() == DType::i64);
  CHECK(gen.offset() == 5);  // one counter per row
  const std::vector<int64_t>& train = c.ids(TextSplit::train);
  for (int64_t r = 0; r < 5; ++r) {
    const std::vector<int64_t> x = row(b.input, r), y = row(b.target, r);
    // target is input shifted by one
    for (int t = 0; t + 1 < 8; ++t) CHECK(y[size_t(t)] == x[size_t(t) + 1]);
    // the row is a window of the train ids (the step-7 sequence makes each window unique)
    bool found = false;
    for (size_t off = 0; off + 9 <= train.size() && !found; ++off)
      found = std::equal(x.begin(), x.end(), train.begin() + long(off)) && train[off + 8] == y[7];
    CHECK(found);
  }
  // Same generator state, same batch; the next draw differs.
  Generator again(42);
  const TextBatch b2 = c.random_batch(TextSplit::train, 5, 8, again);
  CHECK(b2.input.values<int64_t>() == b.input.values<int64_t>());
  const TextBatch b3 = c.random_batch(TextSplit::train, 5, 8, again);
  CHECK(b3.input.values<int64_t>() != b.input.values<int64_t>());

  // With T = 89 over 90 ids there is exactly one start position: offset 0.
  Generator g2(1);
  const TextBatch full = c.random_batch(TextSplit::train, 3, 89, g2);
  for (int64_t r = 0; r < 3; ++r) CHECK(row(full.input, r)[0] == train[0]);
  CHECK_THAT(error_of([&] { c.random_batch(TextSplit::validation, 1, 10, g2); }),
             Contains("validation split has 10 ids"));
}

TEST_CASE("TextCorpus contiguous evaluation batches", "[data]") {
  const TextCorpus c("abcdefghijklmnopqrstuvwxyz", 0.0);  // ids 0..25
  // B = 2: streams of (26 - 1) / 2 = 12 inputs starting at 0 and 12.
  const std::vector<TextBatch> e = c.eval_batches(TextSplit::train, 2, 5);
  REQUIRE(e.size() == 3);  // lengths 5, 5, 2
  CHECK(e[0].input.shape() == Shape{2, 5});
  CHECK(e[2].input.shape() == Shape{2, 2});
  CHECK(row(e[0].input, 0) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(row(e[0].target, 0) == std::vector<int64_t>{1, 2, 3, 4, 5});
  CHECK(row(e[0].input, 1) == std::vector<int64_t>{12, 13, 14, 15, 16});
  CHECK(row(e[1].input, 1) == std::vector<int64_t>{17, 18, 19, 20, 21});
  CHECK(row(e[2].input, 0) == std::vector<int64_t>{10, 11});
  CHECK(row(e[2].target, 0) == std::vector<int64_t>{11, 12});
  CHECK(row(e[2].input, 1) == std::vector<int64_t>{22, 23});
  CHECK(row(e[2].target, 1) == std::vector<int64_t>{23, 24});
  CHECK(c.decode(e[1].target) ==
        "gh"
        "ijk"
        "stuvw");

  CHECK_THAT(error_of([&] { c.eval_batches(TextSplit::train, 26, 4); }), Contains("too few"));
  CHECK_THAT(error_of([&] { TextCorpus("abc", 1.0); }), Contains("validation_fraction"));
}

TEST_CASE("read_text reads a file or a directory, skipping indices and duplicates", "[data]") {
  TempDir dir;
  write_file(dir.path / "b", "world");  // no final newline: one is added
  write_file(dir.path / "a", "hello\n");
  write_file(dir.path / "a.dat", std::string("\x00\x01\x02", 3));
  write_file(dir.path / ".hidden", "secret\n");
  fs::create_symlink("a", dir.path / "a.u8");
  fs::create_directory(dir.path / "sub");
  write_file(dir.path / "sub" / "c", "nested\n");

  CHECK(read_text(dir.path.string()) == "hello\nworld\n");
  CHECK(read_text((dir.path / "b").string()) == "world");
  const std::string missing = (dir.path / "none").string();
  CHECK_THAT(error_of([&] { read_text(missing); }), Contains(missing) && Contains("does not exist"));
  CHECK_THAT(error_of([&] { read_text("/usr/share/games/fortunes/absent"); }), Contains("Debian package fortunes"));
  fs::create_directory(dir.path / "empty");
  CHECK_THAT(error_of([&] { read_text((dir.path / "empty").string()); }), Contains("no non-empty text"));

  const TextCorpus c = TextCorpus::from_path(dir.path.string(), 0.25);
  CHECK(c.text() == "hello\nworld\n");
  CHECK(c.ids(TextSplit::validation).size() == 3);
}

TEST_CASE("the fortunes corpus from the Debian package", "[data]") {
  if (!fs::is_directory(kFortunesDir)) {
    WARN("skipped: " << kFortunesDir << " is absent (Debian package fortunes)");
    return;
  }
  // Independently: the regular, non-symlink, non-.dat files, each ending in '\n'.
  size_t expected = 0;
  for (const auto& e : fs::directory_iterator(kFortunesDir)) {
    const std::string name = e.path().filename().string();
    if (e.is_symlink() || !e.is_regular_file() || name.ends_with(".dat") || name[0] == '.') continue;
    const size_t n = fs::file_size(e.path());
    if (n == 0) continue;
    std::ifstream in(e.path(), std::ios::binary);
    in.seekg(-1, std::ios::end);
    expected += n + (in.get() == '\n' ? 0 : 1);
  }
  const TextCorpus c = TextCorpus::from_path(kFortunesDir, 0.1);
  CHECK(c.text().size() == expected);
  CHECK(c.text().find("%\n") != std::string::npos);
  CHECK(c.vocab_size() > 60);
  CHECK(c.vocab_size() < 200);
  // English text: about 4.4 bits per character for single characters.
  CHECK(c.unigram_entropy_bits() > 4.0);
  CHECK(c.unigram_entropy_bits() < 5.0);
}
