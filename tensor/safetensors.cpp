#include "tensor/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <unordered_set>

namespace mixtape {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian bytes; mixtape writes its host bytes as they are");

// ---- dtypes ------------------------------------------------------------------------------

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i64: return "I64";
    case DType::e4m3: return "F8_E4M3";
    case DType::e5m2: return "F8_E5M2";
    default: break;  // the format has no fp6 / fp4 with one code per byte
  }
  return "?";
}

DType dtype_from_safetensors(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::e4m3, DType::e5m2})
    if (name == safetensors_dtype_name(t)) return t;
  throw Error(detail::cat("unsupported safetensors dtype '", name,
                          "' (mixtape reads F32, F64, F16, BF16, I64, F8_E4M3, F8_E5M2)"));
}

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// The reference writer's layout order: descending by its dtype enum (which orders by
// alignment, then I64 > F64 > F32 > BF16 > F16 > F8_E4M3 > F8_E5M2 among ours), then by name.
int layout_rank(DType t) {
  switch (t) {
    case DType::i64: return 4;
    case DType::f64: return 3;
    case DType::f32: return 2;
    case DType::bf16: return 1;
    case DType::f16: return 0;
    case DType::e4m3: return -1;  // the reference's enum: ..., U8, I8, F8_E5M2, F8_E4M3, I16, ...
    default: return -2;           // e5m2 (the other 8-bit dtypes are refused before the layout)
  }
  return 0;
}

// The reference implementation refuses headers above this size; so do we.
constexpr uint64_t kMaxHeader = 100'000'000;

// Note [Header nesting]
// A valid header nests 3 levels deep (the object, a tensor entry, its shape), but a crafted one
// can nest [ and { 100000 levels deep, and whatever walks such a value recursively (json::dump
// quoting it in a message, a recursive parser) overflows the stack. check_nesting counts the
// depth in one linear pass over the bytes before anything parses them; values quoted in messages
// are cut to kMaxQuoted characters (excerpt), so a message stays readable whatever the file holds.
constexpr int kMaxNesting = 64;
constexpr size_t kMaxQuoted = 80;

std::string errno_str() { return std::strerror(errno); }

// Closes on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

void write_all(int fd, const void* data, size_t n, const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    MT_CHECK(w > 0, "save_safetensors: writing ", tmp, " failed: ", w < 0 ? errno_str() : "wrote nothing");
    p += w;
    n -= size_t(w);
  }
}

void read_at(int fd, void* data, size_t n, uint64_t offset, const std::string& path, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    MT_CHECK(r > 0, "load_safetensors(", path, "): reading ", what, " at byte ", offset,
             " failed: ", r < 0 ? errno_str() : "unexpected end of file");
    p += r;
    n -= size_t(r);
    offset += uint64_t(r);
  }
}

// Note [Stale temporary files]
// A save killed between creating `path.tmp.<pid>` and renaming it (SIGKILL, out of memory, a
// power cut) leaves that file behind, as large as the checkpoint, and a run that saves every
// epoch would pile them up. Before it writes, a save to `path` removes each `path.tmp.<pid>`
// whose process no longer exists (kill(pid, 0) fails with ESRCH). A file whose process is alive
// may be a save in progress and stays; so does every other file. Removal is best effort: a
// file that cannot be removed does not fail the save.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const pid_t pid = pid_t(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to signal: EPERM)
    std::error_code file_ec;
    if (it->symlink_status(file_ec).type() == fs::file_type::regular) ::unlink(it->path().c_str());
  }
}

// Writes `header` and the tensors' bytes to a temporary file next to `path` and renames it over
// `path` (see save_safetensors). Throws with the temporary removed on any failure.
void write_atomically(const std::string& path, const std::string& header, const std::vector<Tensor>& host) {
  namespace fs = std::filesystem;
  remove_stale_temporaries(path);  // Note [Stale temporary files]
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd f;
  f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_CHECK(f.fd >= 0, "save_safetensors: cannot create ", tmp, ": ", errno_str());
  try {
    const uint64_t n = header.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    write_all(f.fd, len, 8, tmp);
    write_all(f.fd, header.data(), header.size(), tmp);
    for (const Tensor& t : host)
      if (t.numel() > 0) write_all(f.fd, t.raw_data(), size_t(t.numel()) * dtype_size(t.dtype()), tmp);
    MT_CHECK(::fsync(f.fd) == 0, "save_safetensors: fsync of ", tmp, " failed: ", errno_str());
    MT_CHECK(::close(f.release()) == 0, "save_safetensors: closing ", tmp, " failed: ", errno_str());
    MT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "save_safetensors: cannot rename ", tmp, " to ", path, ": ",
             errno_str());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable. Some file systems cannot sync a directory (EINVAL).
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MT_CHECK(d.fd >= 0, "save_safetensors: wrote ", path, " but cannot open its directory to sync it: ", errno_str());
  MT_CHECK(::fsync(d.fd) == 0 || errno == EINVAL, "save_safetensors: wrote ", path,
           " but syncing its directory failed: ", errno_str());
}

// Rejects a header whose [ and { nest deeper than kMaxNesting (Note [Header nesting]). Brackets
// inside strings are text; a backslash in a string escapes the next byte.
void check_nesting(const std::string& path, const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      MT_CHECK(++depth <= kMaxNesting, "load_safetensors(", path, "): the header is nested more than ", kMaxNesting,
               " levels deep (at byte ", 8 + i, " of the file; a safetensors header needs 3)");
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced brackets are the JSON parser's to report
    }
  }
}

// `text` cut to `limit` characters (at a UTF-8 character boundary), for quoting in messages.
std::string excerpt(const std::string& text, size_t limit = kMaxQuoted) {
  if (text.size() <= limit) return text;
  size_t cut = limit - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}
// A JSON value from the header as it would be written, cut short (nesting checked already).
std::string excerpt(const json& v) { return excerpt(v.dump()); }

// Checked a * b for sizes read from a file.
uint64_t mul_checked(uint64_t a, uint64_t b, const std::string& path, const std::string& name) {
  uint64_t r = 0;
  MT_CHECK(!__builtin_mul_overflow(a, b, &r), "load_safetensors(", path, "): tensor '", excerpt(name),
           "': shape times element size overflows 64 bits");
  return r;
}

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& path, const std::string& name, const json& v) {
  const std::string where = detail::cat("load_safetensors(", path, "): tensor '", excerpt(name), "'");
  MT_CHECK(v.is_object(), where, ": expected an object {dtype, shape, data_offsets}, got ", excerpt(v));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    MT_CHECK(v.contains(key), where, ": missing \"", key, "\"");
  Entry e;
  e.name = name;
  const json& dt = v.at("dtype");
  MT_CHECK(dt.is_string(), where, ": dtype must be a string, got ", excerpt(dt));
  try {
    e.dtype = dtype_from_safetensors(dt.get<std::string>());
  } catch (const Error&) {
    throw Error(detail::cat(where, ": unsupported safetensors dtype '", excerpt(dt.get<std::string>()),
                            "' (mixtape reads F32, F64, F16, BF16, I64)"));
  }
  const json& sh = v.at("shape");
  MT_CHECK(sh.is_array(), where, ": shape must be an array, got ", excerpt(sh));
  // The nonzero sizes must multiply without overflow even when a size is 0 (Note [Checked sizes]
  // in tensor/core/shape.cpp): the tensor's strides are their products.
  int64_t nonzero = 1;
  bool has_zero = false, overflow = false;
  for (const json& d : sh) {
    MT_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()), where,
             ": shape entries must be non-negative integers, got ", excerpt(sh));
    const int64_t size = int64_t(d.get<uint64_t>());
    e.shape.push_back(size);
    if (size == 0) has_zero = true;
    else overflow = overflow || __builtin_mul_overflow(nonzero, size, &nonzero);
  }
  MT_CHECK(!overflow, where, ": shape ", excerpt(shape_str(e.shape)),
           " overflows: its sizes multiply past the 64-bit element count");
  const uint64_t numel = has_zero ? 0 : uint64_t(nonzero);
  const json& off = v.at("data_offsets");
  MT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), where,
           ": data_offsets must be [begin, end] with non-negative integers, got ", excerpt(off));
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  MT_CHECK(e.begin <= e.end, where, ": data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  const uint64_t nbytes = mul_checked(numel, dtype_size(e.dtype), path, name);
  MT_CHECK(e.end - e.begin == nbytes, where, ": data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
           " bytes but ", safetensors_dtype_name(e.dtype), " ", excerpt(shape_str(e.shape)), " needs ", nbytes);
  return e;
}

// Parses the header, rejecting duplicate keys in any object (nlohmann keeps the last one).
json parse_header(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string duplicate;
  int duplicate_depth = 0;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    else if (event == json::parse_event_t::object_end) keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() && duplicate.empty() &&
             !keys.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
      duplicate_depth = depth;
    }
    return true;
  };
  json h;
  try {
    h = json::parse(text, cb);
  } catch (const json::exception& e) {
    // (the parser's message quotes the token it stopped at, which the file chose)
    throw Error(detail::cat("load_safetensors(", path, "): the header is not valid JSON: ", excerpt(e.what(), 240)));
  }
  MT_CHECK(duplicate.empty(), "load_safetensors(", path, "): duplicate ",
           duplicate_depth == 1 ? "tensor name '" : "key '", excerpt(duplicate), "' in the header");
  return h;
}

// Note [Checksums]
// Every file save_safetensors writes carries a CRC-32 of each tensor's bytes, as the metadata
// entry "crc32:<name>", and one of the rest of the metadata (the training state a checkpoint keeps
// there: its step, its run's identity), as "crc32:__metadata__": over the other entries sorted by
// key, each as its key, a NUL byte, its value and a NUL byte. Each is 8 lowercase hex digits.
// load_safetensors checks them all before it returns, refuses a mismatch naming the tensor, and
// removes them from the metadata it returns (a save computes them afresh). A file without them
// (another program's, or mixtape's before they existed) still loads, with TensorDict::verified
// false; a file with some must have all of them.
// CRC-32 is zlib's crc32, the checksum of gzip and PNG: mixtape links zlib already (data/idx.cpp),
// Python's standard library computes the same (zlib.crc32, so scripts/safetensors_np.py checks
// the files with nothing else installed), and it is what PyTorch's checkpoint container keeps
// per entry. It detects every flipped bit and every burst of up to 32 bits, and misses random
// damage with probability 2^-32; it guards against storage faults, bad copies and partial syncs,
// not against someone who edits a file on purpose. zlib's crc32 runs at more than a gigabyte a
// second, so it costs a checkpoint of a few megabytes milliseconds.
constexpr std::string_view kCrcPrefix = "crc32:";
const std::string kMetadataCrc = "crc32:__metadata__";

bool is_crc_key(const std::string& key) { return key.compare(0, kCrcPrefix.size(), kCrcPrefix) == 0; }

std::string crc_hex(uLong crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08lx", crc & 0xFFFFFFFFul);
  return buf;
}

std::string tensor_crc(const Tensor& contiguous_host) {
  const uLong start = crc32(0L, Z_NULL, 0);
  const size_t n = size_t(contiguous_host.numel()) * dtype_size(contiguous_host.dtype());
  const auto* p = static_cast<const Bytef*>(contiguous_host.raw_data());
  uLong crc = start;
  for (size_t done = 0; done < n;) {  // zlib takes at most a uInt per call
    const size_t chunk = std::min<size_t>(n - done, size_t(1) << 30);
    crc = crc32(crc, p + done, uInt(chunk));
    done += chunk;
  }
  return crc_hex(crc);
}

// The CRC-32 of every metadata entry that is not a checksum, sorted by key.
std::string metadata_crc(const StringMap& metadata) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const Bytef nul = 0;
  for (const auto& [k, v] : metadata) {  // std::map: sorted by key
    if (is_crc_key(k)) continue;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(k.data()), uInt(k.size()));
    crc = crc32(crc, &nul, 1);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(v.data()), uInt(v.size()));
    crc = crc32(crc, &nul, 1);
  }
  return crc_hex(crc);
}

// Checks the checksums of a loaded file (Note [Checksums]) and removes them from its metadata.
void verify_checksums(const std::string& path, TensorDict& d) {
  bool any = false;
  for (const auto& kv : d.metadata) any = any || is_crc_key(kv.first);
  if (!any) return;  // d.verified stays false
  const std::string where = detail::cat("load_safetensors(", path, "): ");
  const std::string corrupt =
      " (the file is damaged: a flipped bit, a bad copy or a partial write; nothing was loaded)";
  std::unordered_set<std::string> names;
  for (const auto& [name, t] : d.tensors) {
    names.insert(name);
    const auto it = d.metadata.find(std::string(kCrcPrefix) + name);
    MT_CHECK(it != d.metadata.end(), where, "tensor '", excerpt(name), "' has no checksum, while the file carries ",
             "checksums", corrupt);
    const std::string got = tensor_crc(t);
    MT_CHECK(it->second == got, where, "tensor '", excerpt(name), "' fails its checksum: CRC-32 ", got,
             ", the file says ", excerpt(it->second), corrupt);
  }
  const auto meta = d.metadata.find(kMetadataCrc);
  MT_CHECK(meta != d.metadata.end(), where, "the metadata has no checksum, while the tensors have", corrupt);
  const std::string got = metadata_crc(d.metadata);
  MT_CHECK(meta->second == got, where, "the metadata (the training state: step, run identity, ...) fails its ",
           "checksum: CRC-32 ", got, ", the file says ", excerpt(meta->second), corrupt);
  for (auto it = d.metadata.begin(); it != d.metadata.end();) {
    if (!is_crc_key(it->first)) {
      ++it;
      continue;
    }
    const std::string name = it->first.substr(kCrcPrefix.size());
    MT_CHECK(it->first == kMetadataCrc || names.count(name), where, "a checksum for tensor '", excerpt(name),
             "', which the file does not hold", corrupt);
    it = d.metadata.erase(it);
  }
  d.verified = true;
}

}  // namespace

// ---- save --------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const NamedTensors& tensors, const StringMap& metadata,
                      Checksums checksums) {
  // Validate and bring every tensor to contiguous host memory before touching the file system.
  std::unordered_set<std::string> seen;
  std::vector<size_t> order(tensors.size());
  std::vector<Tensor> host(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    MT_CHECK(name != "__metadata__", "save_safetensors(", path, "): '__metadata__' is reserved, not a tensor name");
    MT_CHECK(seen.insert(name).second, "save_safetensors(", path, "): duplicate tensor name '", name, "'");
    MT_CHECK(t.defined(), "save_safetensors(", path, "): tensor '", name, "' is undefined");
    MT_CHECK(std::string(safetensors_dtype_name(t.dtype())) != "?", "save_safetensors(", path, "): tensor '", name,
             "' is ", dtype_name(t.dtype()), ", which safetensors cannot hold with one code per byte");
    host[i] = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu());
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = layout_rank(host[a].dtype()), rb = layout_rank(host[b].dtype());
    return ra != rb ? ra > rb : tensors[a].first < tensors[b].first;
  });

  StringMap with_crcs = metadata;  // Note [Checksums]
  for (const auto& kv : metadata)
    MT_CHECK(!is_crc_key(kv.first), "save_safetensors(", path, "): metadata key '", excerpt(kv.first),
             "' is reserved: keys starting with \"crc32:\" hold the file's checksums");
  if (checksums == Checksums::crc32) {
    with_crcs[kMetadataCrc] = metadata_crc(metadata);
    for (size_t i = 0; i < tensors.size(); ++i)
      with_crcs[std::string(kCrcPrefix) + tensors[i].first] = tensor_crc(host[i]);
  }
  ordered_json header = ordered_json::object();
  if (!with_crcs.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : with_crcs) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::vector<Tensor> laid_out;
  uint64_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = host[i];
    const uint64_t nbytes = uint64_t(t.numel()) * dtype_size(t.dtype());
    ordered_json e = ordered_json::object();
    e["dtype"] = safetensors_dtype_name(t.dtype());
    e["shape"] = t.shape();
    e["data_offsets"] = {offset, offset + nbytes};
    header[tensors[i].first] = std::move(e);
    offset += nbytes;
    laid_out.push_back(t);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::exception& e) {
    throw Error(
        detail::cat("save_safetensors(", path, "): a tensor name or metadata entry is not valid UTF-8: ", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  write_atomically(path, text, laid_out);
}

// ---- load --------------------------------------------------------------------------------

TensorDict load_safetensors(const std::string& path, Checksums checksums) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_CHECK(f.fd >= 0, "load_safetensors: cannot open ", path, ": ", errno_str());
  struct stat st {};
  MT_CHECK(::fstat(f.fd, &st) == 0, "load_safetensors: cannot stat ", path, ": ", errno_str());
  MT_CHECK(S_ISREG(st.st_mode), "load_safetensors: ", path, " is not a regular file");
  const uint64_t file_size = uint64_t(st.st_size);
  MT_CHECK(file_size >= 8, "load_safetensors(", path, "): file is ", file_size,
           " bytes, too short for the 8-byte header length");

  unsigned char len[8];
  read_at(f.fd, len, 8, 0, path, "the header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  MT_CHECK(n <= kMaxHeader, "load_safetensors(", path, "): header length ", n, " exceeds the limit of ", kMaxHeader,
           " bytes (not a safetensors file?)");
  MT_CHECK(n <= file_size - 8, "load_safetensors(", path, "): header length ", n, " runs past the end of the ",
           file_size, "-byte file");
  std::string text(size_t(n), '\0');
  read_at(f.fd, text.data(), text.size(), 8, path, "the header");
  MT_CHECK(!text.empty() && text[0] == '{', "load_safetensors(", path, "): the header does not start with '{'");
  check_nesting(path, text);  // before anything recurses: Note [Header nesting]
  const json h = parse_header(path, text);
  MT_CHECK(h.is_object(), "load_safetensors(", path, "): the header is not a JSON object");

  TensorDict out;
  std::vector<Entry> entries;
  for (const auto& [key, v] : h.items()) {
    if (key == "__metadata__") {
      MT_CHECK(v.is_object(), "load_safetensors(", path, "): __metadata__ must be an object of strings, got ",
               excerpt(v));
      for (const auto& [mk, mv] : v.items()) {
        MT_CHECK(mv.is_string(), "load_safetensors(", path, "): __metadata__ entry '", excerpt(mk),
                 "' must be a string, got ", excerpt(mv));
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, v));
  }

  // Sorted by offset the tensors must tile the data buffer: no overlap, no hole, nothing after.
  const uint64_t data_start = 8 + n, data_size = file_size - data_start;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    const std::string where = detail::cat("load_safetensors(", path, "): tensor '", excerpt(e.name), "'");
    MT_CHECK(e.end <= data_size, where, ": data_offsets [", e.begin, ", ", e.end, "] run past the ", data_size,
             "-byte data buffer (file truncated?)");
    MT_CHECK(e.begin >= expected, where, ": data_offsets [", e.begin, ", ", e.end, "] overlap tensor '",
             prev ? excerpt(prev->name) : "", "' which ends at ", expected);
    MT_CHECK(e.begin == expected, where, ": data_offsets [", e.begin, ", ", e.end, "] leave a hole of ",
             e.begin - expected, " bytes after byte ", expected, " of the data buffer");
    expected = e.end;
    prev = &e;
  }
  MT_CHECK(expected == data_size, "load_safetensors(", path, "): the tensors cover ", expected,
           " bytes but the data buffer after the header has ", data_size, " (trailing bytes or a missing tensor)");

  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    if (e.end > e.begin)
      read_at(f.fd, t.raw_data(), size_t(e.end - e.begin), data_start + e.begin, path,
              detail::cat("tensor '", excerpt(e.name), "'"));
    out.tensors.emplace_back(e.name, std::move(t));
  }
  if (checksums == Checksums::crc32) verify_checksums(path, out);
  return out;
}

}  // namespace mixtape
