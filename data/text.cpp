#include "data/text.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace mixtape::data {

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  MT_CHECK(in, "read_text: cannot open '", p.string(), "': ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  MT_CHECK(!in.bad(), "read_text: error reading '", p.string(), "'");
  return os.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string fortunes_hint(const std::string& path) {
  return path.rfind(kFortunesDir, 0) == 0
             ? std::string(" (the fortunes corpus comes from the Debian package fortunes: apt-get install fortunes)")
             : std::string();
}

}  // namespace

std::string read_text(const std::string& path) {
  std::error_code ec;
  MT_CHECK(fs::exists(path, ec), "read_text: '", path, "' does not exist", fortunes_hint(path));
  if (!fs::is_directory(path, ec)) {
    std::string text = read_file(path);
    MT_CHECK(!text.empty(), "read_text: '", path, "' is empty");
    return text;
  }

  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(path)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || ends_with(name, ".dat")) continue;  // strfile indices
    if (!e.is_regular_file(ec)) continue;  // follows symlinks; skips folders and devices
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());

  // `*.u8` in the fortunes package are symlinks to the plain files: read each target once, at the
  // first name (in sorted order) that resolves to it.
  std::set<fs::path> seen;
  std::string text;
  for (const fs::path& p : files) {
    const fs::path real = fs::canonical(p, ec);
    if (!seen.insert(ec ? p : real).second) continue;
    std::string part = read_file(p);
    if (part.empty()) continue;
    text += part;
    if (text.back() != '\n') text += '\n';
  }
  MT_CHECK(!text.empty(), "read_text: directory '", path, "' holds no non-empty text files", fortunes_hint(path));
  return text;
}

// ---- CharVocab -------------------------------------------------------------------------------

CharVocab::CharVocab(std::string_view text) {
  std::array<bool, 256> present{};
  for (char c : text) present[static_cast<unsigned char>(c)] = true;
  for (int b = 0; b < 256; ++b) {
    if (!present[size_t(b)]) continue;
    id_of_[size_t(b)] = int64_t(bytes_.size());
    bytes_.push_back(char(b));
  }
}

int64_t CharVocab::id(unsigned char c) const {
  MT_CHECK(id_of_[c] >= 0, "CharVocab: byte ", int(c), " is not in the ", size(), "-symbol vocabulary");
  return id_of_[c];
}

unsigned char CharVocab::byte(int64_t id) const {
  MT_CHECK(id >= 0 && id < size(), "CharVocab: id ", id, " is outside [0, ", size(), ")");
  return static_cast<unsigned char>(bytes_[size_t(id)]);
}

std::vector<int64_t> CharVocab::encode(std::string_view text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int64_t id = id_of_[static_cast<unsigned char>(text[i])];
    MT_CHECK(id >= 0, "CharVocab::encode: byte ", int(static_cast<unsigned char>(text[i])), " at offset ", i,
             " is not in the ", size(), "-symbol vocabulary");
    ids[i] = id;
  }
  return ids;
}

std::string CharVocab::decode(std::span<const int64_t> ids) const {
  std::string s(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) s[i] = char(byte(ids[i]));
  return s;
}

std::string CharVocab::decode(const Tensor& ids) const {
  MT_CHECK(ids.dtype() == DType::i64, "CharVocab::decode: expected i64 ids, got ", ids.meta());
  const std::vector<int64_t> v = ids.to(Device::cpu()).values<int64_t>();
  return decode(std::span<const int64_t>(v));
}

// ---- entropy ---------------------------------------------------------------------------------

namespace {
double entropy_from_counts(const std::vector<int64_t>& counts, int64_t total) {
  if (total == 0) return 0.0;
  double h = 0.0;
  for (int64_t c : counts) {
    if (c == 0) continue;
    const double p = double(c) / double(total);
    h -= p * std::log2(p);
  }
  return h;
}
}  // namespace

double unigram_entropy_bits(std::string_view text) {
  std::vector<int64_t> counts(256, 0);
  for (char c : text) ++counts[static_cast<unsigned char>(c)];
  return entropy_from_counts(counts, int64_t(text.size()));
}

double unigram_entropy_bits(std::span<const int64_t> ids) {
  std::vector<int64_t> counts;
  for (int64_t id : ids) {
    MT_CHECK(id >= 0, "unigram_entropy_bits: negative id ", id);
    if (size_t(id) >= counts.size()) counts.resize(size_t(id) + 1, 0);
    ++counts[size_t(id)];
  }
  return entropy_from_counts(counts, int64_t(ids.size()));
}

// ---- TextCorpus ------------------------------------------------------------------------------

TextCorpus::TextCorpus(std::string text, double validation_fraction) : text_(std::move(text)), vocab_(text_) {
  MT_CHECK(validation_fraction >= 0.0 && validation_fraction < 1.0,
           "TextCorpus: validation_fraction must be in [0, 1), got ", validation_fraction);
  MT_CHECK(!text_.empty(), "TextCorpus: empty text");
  std::vector<int64_t> all = vocab_.encode(text_);
  const auto n_train = int64_t(std::llround(double(all.size()) * (1.0 - validation_fraction)));
  train_.assign(all.begin(), all.begin() + n_train);
  valid_.assign(all.begin() + n_train, all.end());
  entropy_bits_ = data::unigram_entropy_bits(std::span<const int64_t>(all));
}

TextCorpus TextCorpus::from_path(const std::string& path, double validation_fraction) {
  return TextCorpus(read_text(path), validation_fraction);
}

const std::vector<int64_t>& TextCorpus::ids(TextSplit split) const {
  return split == TextSplit::train ? train_ : valid_;
}

namespace {
const char* split_name(TextSplit s) { return s == TextSplit::train ? "train" : "validation"; }
}  // namespace

TextBatch TextCorpus::random_batch(TextSplit split, int64_t batch, int64_t seq_len, Generator& gen) const {
  const std::vector<int64_t>& src = ids(split);
  const int64_t n = int64_t(src.size());
  MT_CHECK(batch > 0 && seq_len > 0, "TextCorpus::random_batch: batch and seq_len must be positive, got ", batch,
           " and ", seq_len);
  MT_CHECK(n >= seq_len + 1, "TextCorpus::random_batch: the ", split_name(split), " split has ", n,
           " ids, fewer than seq_len + 1 = ", seq_len + 1);
  TextBatch out{empty({batch, seq_len}, DType::i64), empty({batch, seq_len}, DType::i64)};
  int64_t* x = out.input.data<int64_t>();
  int64_t* y = out.target.data<int64_t>();
  const uint64_t starts = uint64_t(n - seq_len);  // offsets 0 .. n - T - 1
  const uint64_t base = gen.advance(uint64_t(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const PhiloxBlock w = philox_words(gen.seed(), base + uint64_t(b));
    const uint64_t r = uint64_t(w[0]) << 32 | w[1];
    // Multiply-shift maps 64 random bits onto [0, starts); bias < starts / 2^64.
    const auto off = int64_t((unsigned __int128)r * starts >> 64);
    std::copy_n(src.begin() + off, seq_len, x + b * seq_len);
    std::copy_n(src.begin() + off + 1, seq_len, y + b * seq_len);
  }
  return out;
}

std::vector<TextBatch> TextCorpus::eval_batches(TextSplit split, int64_t batch, int64_t seq_len) const {
  const std::vector<int64_t>& src = ids(split);
  const int64_t n = int64_t(src.size());
  MT_CHECK(batch > 0 && seq_len > 0, "TextCorpus::eval_batches: batch and seq_len must be positive, got ", batch,
           " and ", seq_len);
  const int64_t stream = n > 0 ? (n - 1) / batch : 0;  // inputs per stream; targets reach one further
  MT_CHECK(stream >= 1, "TextCorpus::eval_batches: the ", split_name(split), " split has ", n, " ids, too few for ",
           batch, " streams");
  std::vector<TextBatch> out;
  for (int64_t t0 = 0; t0 < stream; t0 += seq_len) {
    const int64_t len = std::min(seq_len, stream - t0);
    TextBatch tb{empty({batch, len}, DType::i64), empty({batch, len}, DType::i64)};
    int64_t* x = tb.input.data<int64_t>();
    int64_t* y = tb.target.data<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t at = b * stream + t0;
      std::copy_n(src.begin() + at, len, x + b * len);
      std::copy_n(src.begin() + at + 1, len, y + b * len);
    }
    out.push_back(std::move(tb));
  }
  return out;
}

}  // namespace mixtape::data
