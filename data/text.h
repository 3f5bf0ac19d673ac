// Character-level text corpora for language models (the char-LSTM example).
//
// Note [Bytes, not code points]: the vocabulary is the set of distinct *bytes* in the corpus,
// sorted by value. UTF-8 text is therefore modelled byte by byte (a multi-byte character is
// several tokens), so decode(encode(s)) == s for any input and the model may sample byte
// sequences that are not valid UTF-8. The fortunes corpus is almost all ASCII.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace mixtape::data {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// The contents of a file, or of every regular file in a directory (sorted by name, not
// recursive), concatenated. In a directory, strfile indices (`*.dat`), hidden files and files
// that resolve to one already read (the fortunes package's `*.u8` symlinks) are skipped; a file
// that does not end in '\n' gets one. Throws naming the path when it is missing or yields no text.
std::string read_text(const std::string& path);

// Sorted distinct bytes of a text; ids are 0..size()-1 in byte order.
class CharVocab {
 public:
  CharVocab() = default;
  explicit CharVocab(std::string_view text);

  int64_t size() const { return int64_t(bytes_.size()); }
  bool contains(unsigned char c) const { return id_of_[c] >= 0; }
  int64_t id(unsigned char c) const;     // throws for a byte outside the vocabulary
  unsigned char byte(int64_t id) const;  // throws for an id outside [0, size())
  const std::string& bytes() const { return bytes_; }

  std::vector<int64_t> encode(std::string_view text) const;  // throws naming the first unknown byte
  std::string decode(std::span<const int64_t> ids) const;
  std::string decode(const Tensor& ids) const;  // any shape of i64 ids, row-major

 private:
  std::string bytes_;
  std::array<int64_t, 256> id_of_ = filled_minus_one();
  static std::array<int64_t, 256> filled_minus_one() {
    std::array<int64_t, 256> a{};
    a.fill(-1);
    return a;
  }
};

// Entropy of the byte distribution of `text` in bits per character: -sum p log2 p. A model that
// ignores context can reach this cross-entropy at best; 0 for empty or one-symbol text.
double unigram_entropy_bits(std::string_view text);
double unigram_entropy_bits(std::span<const int64_t> ids);

enum class TextSplit { train, validation };

struct TextBatch {
  Tensor input;   // i64 [B, T]
  Tensor target;  // i64 [B, T]: target[b, t] = the id after input[b, t]
};

class TextCorpus {
 public:
  // The first (1 - validation_fraction) of the ids train, the rest validate (a tail split keeps
  // the two sets apart; fortunes are not shuffled first). validation_fraction in [0, 1).
  explicit TextCorpus(std::string text, double validation_fraction = 0.1);
  static TextCorpus from_path(const std::string& path, double validation_fraction = 0.1);

  const CharVocab& vocab() const { return vocab_; }
  int64_t vocab_size() const { return vocab_.size(); }
  const std::string& text() const { return text_; }
  const std::vector<int64_t>& ids(TextSplit split) const;
  // Unigram entropy of the whole corpus (bits per character).
  double unigram_entropy_bits() const { return entropy_bits_; }

  std::string decode(std::span<const int64_t> ids) const { return vocab_.decode(ids); }
  std::string decode(const Tensor& ids) const { return vocab_.decode(ids); }

  // B windows of T+1 ids at uniform random offsets, drawn from `gen` (one Philox counter per
  // row, so the batch depends only on the generator's state). Needs at least T+1 ids.
  TextBatch random_batch(TextSplit split, int64_t batch, int64_t seq_len, Generator& gen) const;

  // Contiguous evaluation batches: the split is cut into `batch` streams of equal length L, row
  // b reads stream b, and batch k covers positions [k T, k T + T) of every stream, so a
  // recurrent state can be carried from batch k to k+1. The last batch may be shorter than T;
  // the (len - 1) mod B leftover ids at the end are not used.
  std::vector<TextBatch> eval_batches(TextSplit split, int64_t batch, int64_t seq_len) const;

 private:
  std::string text_;
  CharVocab vocab_;
  std::vector<int64_t> train_, valid_;
  double entropy_bits_ = 0.0;
};

}  // namespace mixtape::data
