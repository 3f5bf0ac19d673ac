// Numbers in state-dict metadata. Safetensors metadata holds strings only, so hyper-parameters
// and counters are written as text that reads back to the same value: doubles in their
// shortest round-trip form (std::to_chars), integers in decimal.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/tensor_dict.h"

namespace mixtape::state_io {

std::string format(double v);
std::string format(int64_t v);
inline std::string format(bool v) { return v ? "true" : "false"; }

// Read metadata[key] as a number or flag; `owner` names the state dict in errors ("Adam").
double get_double(const TensorDict& d, const std::string& key, const char* owner);
int64_t get_int(const TensorDict& d, const std::string& key, const char* owner);
uint64_t get_uint(const TensorDict& d, const std::string& key, const char* owner);  // seeds and counters
bool get_bool(const TensorDict& d, const std::string& key, const char* owner);

}  // namespace mixtape::state_io
