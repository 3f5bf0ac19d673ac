// safetensors: round trips, byte-exact agreement with the reference implementation's files,
// validation of corrupt files, and atomic saves.
#include "support/catch.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tensor/ops.h"
#include "tensor/safetensors.h"
#include "support/test_util.h"

using namespace mixtape;
namespace fs = std::filesystem;

using mixtape::test::error_of;
using mixtape::test::TempDir;

namespace {

// A fresh directory per test case, removed at the end.
std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string u64le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A file: the header length, the header, the data.
std::string file_bytes(const std::string& header, const std::string& data) {
  return u64le(header.size()) + header + data;
}

template <class T>
std::string le_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());  // the host is little-endian (checked in safetensors.cpp)
  return s;
}

std::string f32_bytes(const std::vector<float>& v) { return le_bytes(v); }

// Bytes of a tensor in row-major order, for bit-exact comparisons.
std::string tensor_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), size_t(c.numel()) * dtype_size(c.dtype()));
}

// The message load_safetensors throws for `bytes`, or "" when it loads.
std::string load_error(const TempDir& d, const std::string& bytes) {
  const std::string path = d / "bad.safetensors";
  write_bytes(path, bytes);
  try {
    load_safetensors(path);
  } catch (const Error& e) { return e.what(); }
  return "";
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype, non-contiguous input and metadata", "[safetensors]") {
  TempDir d;
  Generator gen(7);
  const Tensor base = normal({3, 4}, 0.0, 3.0, gen);
  NamedTensors in = {
      {"w.f32.transposed", base.t()},  // non-contiguous
      {"w.f64", normal({2, 3}, 0.0, 1.0, gen, DType::f64)},
      {"w.f16.strided", normal({4, 6}, 0.0, 1.0, gen, DType::f16).slice(1, 0, 6, 2)},
      {"w.bf16", normal({5}, 0.0, 100.0, gen, DType::bf16)},
      {"labels", from_vector(std::vector<int64_t>{-3, 0, 1LL << 40, 7}, {2, 2})},
      {"scalar", scalar_tensor(2.5)},
      {"empty", zeros({0, 3}, DType::f16)},
  };
  const StringMap meta = {{"step", "120"}, {"precision", "bf16"}, {"note", "ünïcode \"quoted\""}};
  const std::string path = d / "ckpt.safetensors";
  save_safetensors(path, in, meta);

  const TensorDict out = load_safetensors(path);
  CHECK(out.metadata == meta);
  REQUIRE(out.tensors.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    const Tensor& got = out.at(name);
    CHECK(got.dtype() == t.dtype());
    CHECK(got.shape() == t.shape());
    CHECK(got.is_contiguous());
    CHECK(tensor_bytes(got) == tensor_bytes(t));
  }
  // File order: by descending alignment (I64, F64, F32, BF16, F16), then by name.
  std::vector<std::string> order;
  for (const auto& [n, t] : out.tensors) order.push_back(n);
  CHECK(order ==
        std::vector<std::string>{"labels", "w.f64", "scalar", "w.f32.transposed", "w.bf16", "empty", "w.f16.strided"});
  CHECK(d.entries() == std::vector<std::string>{"ckpt.safetensors"});  // no temporary left behind
}

TEST_CASE("safetensors files match the reference implementation byte for byte", "[safetensors]") {
  TempDir d;
  const std::string data = f32_bytes({0, 1, 2, 3, 4, 5});
  // From huggingface/safetensors' own tests (tensor.rs, test_serialization and
  // test_serialization_forced_alignement): a 64-byte header needs no padding, a 65-byte one
  // is padded with 7 spaces so that the data starts 8-byte aligned.
  const std::string ref_64 = file_bytes(R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})", data);
  const std::string ref_72 =
      file_bytes(R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       )", data);
  const Tensor t = arange(0, 6);

  save_safetensors(d / "a.safetensors", {{"attn.0", t.reshape({1, 2, 3})}}, {}, Checksums::none);
  CHECK(read_bytes(d / "a.safetensors") == ref_64);
  save_safetensors(d / "b.safetensors", {{"attn0", t.reshape({1, 1, 2, 3})}}, {}, Checksums::none);
  CHECK(read_bytes(d / "b.safetensors") == ref_72);

  // test_empty: no tensors, with and without metadata.
  save_safetensors(d / "c.safetensors", NamedTensors{}, {}, Checksums::none);
  CHECK(read_bytes(d / "c.safetensors") == file_bytes("{}      ", ""));
  save_safetensors(d / "e.safetensors", NamedTensors{}, {{"framework", "pt"}}, Checksums::none);
  CHECK(read_bytes(d / "e.safetensors") == file_bytes(R"({"__metadata__":{"framework":"pt"}}     )", ""));

  // And the reference bytes load.
  write_bytes(d / "ref.safetensors", ref_72);
  const TensorDict r = load_safetensors(d / "ref.safetensors");
  REQUIRE(r.tensors.size() == 1);
  CHECK(r.at("attn0").shape() == Shape{1, 1, 2, 3});
  CHECK(r.at("attn0").to_vector() == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(load_safetensors(d / "e.safetensors").metadata == StringMap{{"framework", "pt"}});
}

TEST_CASE("a hand-written safetensors file with known bytes loads", "[safetensors]") {
  // As Python writes it, but with keys in another order than the data, a pretty-printed header
  // and trailing spaces: F64 first at [0, 16), then I64, F32, BF16, F16.
  TempDir d;
  const std::string header = R"({
    "half": {"dtype": "F16", "shape": [3], "data_offsets": [44, 50]},
    "__metadata__": {"format": "pt", "epoch": "3"},
    "bf": {"dtype": "BF16", "shape": [2], "data_offsets": [40, 44]},
    "d": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]},
    "idx": {"dtype": "I64", "shape": [1, 2], "data_offsets": [16, 32]},
    "f": {"dtype": "F32", "shape": [2], "data_offsets": [32, 40]}
  }   )";
  std::string data;
  data += le_bytes(std::vector<double>{0.1, -1e300});
  data += le_bytes(std::vector<int64_t>{-2, 1LL << 50});
  data += le_bytes(std::vector<float>{1.5f, -0.0f});
  data += le_bytes(std::vector<uint16_t>{0x3F80, 0xC040});          // bf16 1.0, -3.0
  data += le_bytes(std::vector<uint16_t>{0x3C00, 0x7BFF, 0x0001});  // f16 1.0, 65504, 2^-24
  write_bytes(d / "hand.safetensors", file_bytes(header, data));

  const TensorDict r = load_safetensors(d / "hand.safetensors");
  CHECK(r.metadata == StringMap{{"format", "pt"}, {"epoch", "3"}});
  std::vector<std::string> order;
  for (const auto& [n, t] : r.tensors) order.push_back(n);
  CHECK(order == std::vector<std::string>{"d", "idx", "f", "bf", "half"});
  CHECK(r.at("d").to_vector() == std::vector<double>{0.1, -1e300});
  CHECK(r.at("idx").dtype() == DType::i64);
  CHECK(r.at("idx").shape() == Shape{1, 2});
  CHECK(r.at("idx").values<int64_t>() == std::vector<int64_t>{-2, 1LL << 50});
  CHECK(r.at("f").to_vector() == std::vector<double>{1.5, 0.0});
  CHECK(std::signbit(r.at("f").flat_get(1)));
  CHECK(r.at("bf").dtype() == DType::bf16);
  CHECK(r.at("bf").to_vector() == std::vector<double>{1.0, -3.0});
  CHECK(r.at("half").to_vector() == std::vector<double>{1.0, 65504.0, std::ldexp(1.0, -24)});
}

TEST_CASE("corrupt and truncated safetensors files raise clear errors", "[safetensors]") {
  TempDir d;
  const std::string data = f32_bytes({1, 2, 3, 4});
  auto one = [&](const std::string& entry) { return file_bytes("{" + entry + "}", data); };
  const std::string good = one(R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})");
  CHECK(load_error(d, good).empty());
  // Every message names the file.
  CHECK_THAT(load_error(d, "abc"), Catch::Contains("bad.safetensors") && Catch::Contains("too short"));
  CHECK_THAT(load_error(d, ""), Catch::Contains("too short"));
  CHECK_THAT(load_error(d, u64le(1000) + "{}"), Catch::Contains("header length 1000 runs past the end"));
  CHECK_THAT(load_error(d, u64le(1ULL << 40) + "{}"), Catch::Contains("exceeds the limit"));
  CHECK_THAT(load_error(d, file_bytes("{\"w\": [", "")), Catch::Contains("not valid JSON"));
  CHECK_THAT(load_error(d, file_bytes("[1, 2]  ", "")), Catch::Contains("does not start with '{'"));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]})")),
             Catch::Contains("tensor 'w'") && Catch::Contains("unsupported safetensors dtype 'I32'"));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"F32","shape":[2,2]})")),
             Catch::Contains("tensor 'w'") && Catch::Contains("missing \"data_offsets\""));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"F32","shape":[2,-2],"data_offsets":[0,16]})")),
             Catch::Contains("non-negative integers"));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0]})")),
             Catch::Contains("[begin, end]"));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]})")),
             Catch::Contains("tensor 'w'") && Catch::Contains("hold 16 bytes but F32 [2, 3] needs 24"));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]})")),
             Catch::Contains("tensor 'w'") && Catch::Contains("run past the 16-byte data buffer"));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]})")),
             Catch::Contains("overflows"));
  // No element, but sizes whose product (the strides) overflows: named like any other bad shape.
  CHECK_THAT(
      load_error(d, file_bytes(R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", "")),
      Catch::Contains("bad.safetensors") && Catch::Contains("tensor 'w'") && Catch::Contains("overflows"));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]})")),
             Catch::Contains("tensor 'w'") && Catch::Contains("hole of 8 bytes"));
  CHECK_THAT(load_error(d, one(R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]})")),
             Catch::Contains("tensor 'b'") && Catch::Contains("overlap tensor 'a'"));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})")),
             Catch::Contains("cover 8 bytes but the data buffer after the header has 16"));
  CHECK_THAT(load_error(d, one(R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]})")),
             Catch::Contains("duplicate tensor name 'w'"));
  CHECK_THAT(load_error(d, one(R"("__metadata__":{"step":3},"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})")),
             Catch::Contains("__metadata__ entry 'step' must be a string"));
  // A valid file cut short anywhere fails, and names the tensor once the header is intact.
  for (size_t cut : {size_t(4), size_t(20), good.size() - 1}) {
    INFO("cut at " << cut);
    CHECK_FALSE(load_error(d, good.substr(0, cut)).empty());
  }
  CHECK_THAT(load_error(d, good.substr(0, good.size() - 1)), Catch::Contains("tensor 'w'"));
  CHECK_THAT(load_error(d, good + "x"), Catch::Contains("trailing bytes"));
  CHECK_THROWS_WITH(load_safetensors(d / "missing.safetensors"),
                    Catch::Contains("cannot open") && Catch::Contains("missing.safetensors"));
  CHECK_THROWS_WITH(load_safetensors(d.path.string()), Catch::Contains("not a regular file"));
}

TEST_CASE("a deeply nested safetensors header is rejected before anything recurses", "[safetensors]") {
  // Parsing such a header, or quoting it in a message, would recurse once per level.
  TempDir d;
  const size_t depth = 100000;
  const std::string open(depth, '['), close(depth, ']');
  for (const std::string& header : {"{\"w\":" + open + close + "}", "{\"__metadata__\":{\"k\":" + open + close + "}}",
                                    R"({"w":{"dtype":"F32","shape":)" + open + close + R"(,"data_offsets":[0,0]}})",
                                    "{\"w\":" + std::string(depth, '{'), "{\"w\":" + open}) {
    const std::string msg = load_error(d, file_bytes(header, ""));
    CHECK_THAT(msg, Catch::Contains("bad.safetensors") && Catch::Contains("nested more than 64 levels deep"));
    CHECK(msg.size() < 400);
  }
  // Brackets inside strings are text, not nesting.
  const std::string data = f32_bytes({1});
  CHECK(load_error(d, file_bytes(R"({"__metadata__":{"k":")" + open +
                                     R"("},)"
                                     R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                 data))
            .empty());
  // 64 levels load; the value quoted in a message is cut short.
  std::string nested64 = "{\"__metadata__\":{\"k\":" + std::string(62, '[') + std::string(62, ']') + "}}";
  CHECK_THAT(load_error(d, file_bytes(nested64, "")), Catch::Contains("__metadata__ entry 'k' must be a string"));
  std::string long_array = "[";
  for (int i = 0; i < 1000; ++i) long_array += (i ? ",1" : "1");
  long_array += "]";
  const std::string msg = load_error(d, file_bytes("{\"w\":" + long_array + "}", ""));
  CHECK_THAT(msg, Catch::Contains("tensor 'w'") && Catch::Contains("expected an object") && Catch::Contains("..."));
  CHECK(msg.size() < 400);
  // The parser's own message quotes the token it stopped at: an unterminated 10000-byte string.
  const std::string unterminated = load_error(d, file_bytes("{\"w\":\"" + std::string(10000, 'a'), ""));
  CHECK_THAT(unterminated, Catch::Contains("not valid JSON"));
  CHECK(unterminated.size() < 400);
}

TEST_CASE("save_safetensors rejects bad input before touching the file system", "[safetensors]") {
  TempDir d;
  const std::string path = d / "x.safetensors";
  CHECK_THROWS_WITH(save_safetensors(path, {{"a", zeros({1})}, {"a", zeros({2})}}),
                    Catch::Contains("duplicate tensor name 'a'"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", zeros({1})}}), Catch::Contains("reserved"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"u", Tensor()}}), Catch::Contains("'u' is undefined"));
  CHECK(d.entries().empty());
}

TEST_CASE("a failed save leaves the old file intact", "[safetensors]") {
  TempDir d;
  const std::string path = d / "ckpt.safetensors";
  save_safetensors(path, {{"w", full({4}, 1.0)}}, {{"version", "old"}});
  const std::string old_bytes = read_bytes(path);
  const NamedTensors bigger = {{"w", full({4096}, 2.0)}};

  SECTION("the target directory does not exist") {
    CHECK_THROWS_WITH(save_safetensors(d / "missing/ckpt.safetensors", bigger),
                      Catch::Contains("cannot create") && Catch::Contains("missing/ckpt.safetensors.tmp."));
  }
  SECTION("the disk fills up in the middle of the write") {
    // A file-size limit makes write() fail with EFBIG after 1000 bytes (root is not exempt).
    struct rlimit old_limit {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old_limit;
    small.rlim_cur = 1000;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string message;
    try {
      save_safetensors(path, bigger, {{"version", "new"}});
    } catch (const Error& e) { message = e.what(); }
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    std::signal(SIGXFSZ, old_handler);
    CHECK_THAT(message, Catch::Contains("writing") && Catch::Contains(".tmp."));
  }
  SECTION("the rename fails (the target name is taken by a directory)") {
    const std::string taken = d / "taken";
    fs::create_directories(fs::path(taken) / "child");
    CHECK_THROWS_WITH(save_safetensors(taken, bigger), Catch::Contains("cannot rename"));
    CHECK(fs::is_directory(taken));
  }
  SECTION("the directory is read-only") {
    if (::geteuid() == 0) {
      WARN("running as root: permissions do not stop writes, the read-only case is skipped");
    } else {
      fs::permissions(d.path, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                      fs::perm_options::remove);
      CHECK_THROWS_WITH(save_safetensors(path, bigger), Catch::Contains("cannot create"));
      fs::permissions(d.path, fs::perms::owner_write, fs::perm_options::add);
    }
  }
  CHECK(read_bytes(path) == old_bytes);
  CHECK(load_safetensors(path).metadata.at("version") == "old");
  for (const std::string& e : d.entries()) CHECK(e.find(".tmp.") == std::string::npos);
  // And a successful save replaces it.
  save_safetensors(path, bigger);
  CHECK(load_safetensors(path).at("w").numel() == 4096);
}

TEST_CASE("a save removes the temporary files that killed saves to the same path left behind", "[safetensors]") {
  TempDir d;
  const std::string path = d / "ckpt.safetensors";
  // A pid that no process has: a child that has exited and been reaped.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const std::string dead = path + ".tmp." + std::to_string(child);
  const std::string live = path + ".tmp." + std::to_string(::getppid());  // a save in progress, maybe
  const std::string other_path = d / ("other.safetensors.tmp." + std::to_string(child));
  const std::string not_a_pid = path + ".tmp.1x";
  for (const std::string& f : {dead, live, other_path, not_a_pid}) write_bytes(f, std::string(4096, 'x'));

  save_safetensors(path, {{"w", ones({2})}});
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));        // its process is alive
  CHECK(fs::exists(other_path));  // another checkpoint's
  CHECK(fs::exists(not_a_pid));
  CHECK(load_safetensors(path).at("w").numel() == 2);
}

TEST_CASE("TensorDict prefixes put several state dicts in one checkpoint", "[safetensors]") {
  TensorDict model, optim;
  model.add("fc.weight", ones({2, 2}));
  model.set_meta("arch", "mlp");
  optim.add("state.0.exp_avg", zeros({2, 2}));
  optim.set_meta("optimizer", "Adam");
  TensorDict ckpt;
  ckpt.merge("model.", model);
  ckpt.merge("optim.", optim);
  CHECK(ckpt.contains("model.fc.weight"));
  CHECK(ckpt.meta("optim.optimizer") == "Adam");
  CHECK_THROWS_WITH(ckpt.merge("model.", model), Catch::Contains("duplicate tensor name 'model.fc.weight'"));

  TempDir d;
  save_safetensors(d / "ckpt.safetensors", ckpt);
  const TensorDict back = load_safetensors(d / "ckpt.safetensors");
  const TensorDict m = back.sub("model."), o = back.sub("optim.");
  CHECK(m.tensors.size() == 1);
  CHECK(m.at("fc.weight").to_vector() == std::vector<double>{1, 1, 1, 1});
  CHECK(m.metadata == StringMap{{"arch", "mlp"}});
  CHECK(o.contains("state.0.exp_avg"));
  CHECK(o.meta("optimizer") == "Adam");
  CHECK_THROWS_WITH(o.at("fc.weight"), Catch::Contains("no tensor named 'fc.weight'"));
}

TEST_CASE("damaged safetensors files throw mixtape::Error and nothing else", "[safetensors]") {
  TempDir d;
  const std::string path = d / "good.safetensors";
  save_safetensors(path,
                   {{"a", arange(0, 6).reshape({2, 3})},
                    {"b", ones({3}, DType::bf16)},
                    {"c", from_vector(std::vector<int64_t>{1, 2}, {2})}},
                   {{"k", "v"}});
  const std::string good = read_bytes(path);
  const TensorDict original = load_safetensors(path);
  auto same_as_original = [&](const TensorDict& t) {
    if (t.metadata != original.metadata || t.size() != original.size()) return false;
    for (const auto& [name, x] : original)
      if (!t.contains(name) || tensor_bytes(t.at(name)) != tensor_bytes(x)) return false;
    return true;
  };
  auto outcome = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    try {
      // a file that loads must hold what was saved: the checksums (Note [Checksums]) see the rest
      return same_as_original(load_safetensors(path)) ? 0 : 3;
    } catch (const Error&) { return 1; } catch (...) {
      return 2;  // anything but mixtape::Error is a bug
    }
  };
  int loaded = 0;
  for (size_t cut = 0; cut < good.size(); ++cut) {
    INFO("truncated to " << cut << " bytes");
    CHECK(outcome(good.substr(0, cut)) == 1);
  }
  for (int trial = 0; trial < 400; ++trial) {
    std::string bytes = good;
    const auto w = philox_words(11, uint64_t(trial));  // four random 32-bit words
    bytes[w[0] % bytes.size()] = char(w[1] & 0xff);
    if (trial % 2) bytes[w[2] % bytes.size()] = char(w[3] & 0xff);
    const int r = outcome(bytes);
    INFO("trial " << trial);
    CHECK(r != 2);
    CHECK(r != 3);
    loaded += r == 0;
  }
  CHECK(loaded > 0);  // some trials set a byte to the value it had
}
