// read_text and TextCorpus (data/text.h) on arbitrary bytes: the file read (alone and as the one
// file of a folder), the byte vocabulary, the train/validation split and the batches drawn from
// it. Checks Note [Bytes, not code points]: decode(encode(text)) == text for any bytes, and every
// id lies in the vocabulary.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "data/text.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string folder = [] {
    const std::string dir = fuzz::scratch_dir() + "/folder";
    std::filesystem::create_directory(dir);
    return dir;
  }();
  const std::string path = fuzz::write_input("folder/input.txt", data, size);
  fuzz::run_reader([&] {
    using namespace mixtape::data;
    const std::string text = read_text(path);
    fuzz::check(text == std::string(reinterpret_cast<const char*>(data), size), "read_text changed the bytes");
    // A folder's files are concatenated, each ending in a newline.
    fuzz::check(read_text(folder) == (text.back() == '\n' ? text : text + '\n'), "read_text of the folder");
    const TextCorpus corpus = TextCorpus::from_path(path, 0.25);
    const CharVocab& vocab = corpus.vocab();
    fuzz::check(vocab.size() >= 1 && vocab.size() <= 256, "the vocabulary has no symbols or more than 256");
    fuzz::check(vocab.decode(vocab.encode(text)) == text, "decode(encode(text)) != text");
    const std::vector<int64_t>& train = corpus.ids(TextSplit::train);
    const std::vector<int64_t>& valid = corpus.ids(TextSplit::validation);
    fuzz::check(train.size() + valid.size() == text.size(), "the splits do not cover the text");
    fuzz::check(corpus.decode(train) + corpus.decode(valid) == text, "the splits do not decode to the text");
    for (int64_t id : train) fuzz::check(id >= 0 && id < vocab.size(), "an id outside the vocabulary");

    // Batches where the split is long enough (the calls throw otherwise, which is allowed).
    constexpr int64_t kBatch = 2, kSeq = 64;
    mixtape::Generator gen(1234);
    if (int64_t(train.size()) > kSeq) {
      const TextBatch b = corpus.random_batch(TextSplit::train, kBatch, kSeq, gen);
      fuzz::check(b.input.shape() == mixtape::Shape{kBatch, kSeq} && b.target.shape() == b.input.shape(),
                  "random_batch returned the wrong shapes");
    }
    for (TextSplit split : {TextSplit::train, TextSplit::validation}) {
      if (corpus.ids(split).size() <= size_t(kBatch)) continue;
      for (const TextBatch& b : corpus.eval_batches(split, kBatch, kSeq))
        fuzz::check(b.input.shape() == b.target.shape() && b.input.size(0) == kBatch, "eval_batches: wrong shapes");
    }
  });
  return 0;
}
