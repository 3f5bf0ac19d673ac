#include "tensor/tensor_dict.h"

namespace mixtape {

bool TensorDict::contains(const std::string& name) const { return find(name) != nullptr; }

const Tensor* TensorDict::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& TensorDict::at(const std::string& name) const {
  const Tensor* t = find(name);
  MT_CHECK(t, "TensorDict: no tensor named '", name, "' (", tensors.size(), " tensors)");
  return *t;
}

std::vector<std::string> TensorDict::names() const {
  std::vector<std::string> out;
  out.reserve(tensors.size());
  for (const auto& [n, t] : tensors) out.push_back(n);
  return out;
}

const std::string& TensorDict::meta(const std::string& key) const {
  auto it = metadata.find(key);
  MT_CHECK(it != metadata.end(), "TensorDict: no metadata entry '", key, "'");
  return it->second;
}

void TensorDict::add(std::string name, Tensor t) {
  MT_CHECK(t.defined(), "TensorDict::add: tensor '", name, "' is undefined");
  MT_CHECK(!contains(name), "TensorDict::add: duplicate tensor name '", name, "'");
  tensors.emplace_back(std::move(name), std::move(t));
}

void TensorDict::merge(const std::string& prefix, const TensorDict& other) {
  for (const auto& [n, t] : other.tensors) add(prefix + n, t);
  for (const auto& [k, v] : other.metadata) {
    MT_CHECK(!metadata.count(prefix + k), "TensorDict::merge: duplicate metadata key '", prefix + k, "'");
    metadata[prefix + k] = v;
  }
}

TensorDict TensorDict::sub(const std::string& prefix) const {
  TensorDict out;
  for (const auto& [n, t] : tensors)
    if (n.starts_with(prefix)) out.tensors.emplace_back(n.substr(prefix.size()), t);
  for (const auto& [k, v] : metadata)
    if (k.starts_with(prefix)) out.metadata[k.substr(prefix.size())] = v;
  return out;
}

}  // namespace mixtape
