#include "tensor/state_io.h"

#include <charconv>
#include <system_error>

namespace mixtape::state_io {

namespace {
const std::string& lookup(const TensorDict& d, const std::string& key, const char* owner) {
  MT_CHECK(d.has_meta(key), owner, " state dict: missing metadata entry '", key, "'");
  return d.meta(key);
}

template <class T>
T parse(const TensorDict& d, const std::string& key, const char* owner, const char* kind) {
  const std::string& s = lookup(d, key, owner);
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  MT_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), owner, " state dict: metadata '", key,
           "' = '", s, "' is not ", kind);
  return v;
}
}  // namespace

std::string format(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  MT_ASSERT(ec == std::errc());
  return std::string(buf, end);
}

std::string format(int64_t v) { return std::to_string(v); }

double get_double(const TensorDict& d, const std::string& key, const char* owner) {
  return parse<double>(d, key, owner, "a number");
}

int64_t get_int(const TensorDict& d, const std::string& key, const char* owner) {
  return parse<int64_t>(d, key, owner, "an integer");
}

uint64_t get_uint(const TensorDict& d, const std::string& key, const char* owner) {
  return parse<uint64_t>(d, key, owner, "a non-negative integer");
}

bool get_bool(const TensorDict& d, const std::string& key, const char* owner) {
  const std::string& s = lookup(d, key, owner);
  MT_CHECK(s == "true" || s == "false", owner, " state dict: metadata '", key, "' = '", s, "' is not true or false");
  return s == "true";
}

}  // namespace mixtape::state_io
