// TensorDict: an ordered name -> Tensor map with string metadata.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace mixtape {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using StringMap = std::map<std::string, std::string>;

// Named tensors plus string metadata: the contents of one safetensors file, and the form of every
// state dict (a module's parameters and buffers, an optimizer's or a scheduler's state). Names
// are unique; tensors keep their insertion order, and iterating a TensorDict visits them:
//   for (const auto& [name, t] : model.state_dict()) ...
// A checkpoint puts several state dicts in one file under prefixes:
//   TensorDict ckpt;
//   ckpt.merge("model.", model.state_dict());  ckpt.merge("optim.", optimizer.state_dict());
//   save_safetensors(path, ckpt);
//   ... optimizer.load_state_dict(load_safetensors(path).sub("optim."));
struct TensorDict {
  NamedTensors tensors;
  StringMap metadata;
  // Set by load_safetensors when the file carried checksums and every one matched (Note
  // [Checksums] in tensor/safetensors.cpp); false for a file without them and for a dict built here.
  bool verified = false;

  bool contains(const std::string& name) const;
  const Tensor* find(const std::string& name) const;  // nullptr when absent
  const Tensor& at(const std::string& name) const;    // throws naming the missing tensor
  size_t size() const { return tensors.size(); }
  bool empty() const { return tensors.empty(); }
  std::vector<std::string> names() const;  // in insertion order
  NamedTensors::const_iterator begin() const { return tensors.begin(); }
  NamedTensors::const_iterator end() const { return tensors.end(); }
  bool has_meta(const std::string& key) const { return metadata.count(key) != 0; }
  const std::string& meta(const std::string& key) const;  // throws naming the missing key
  void add(std::string name, Tensor t);                   // throws on a duplicate name
  void set_meta(std::string key, std::string value) { metadata[std::move(key)] = std::move(value); }

  // Adds every tensor and metadata entry of `other`, each name prefixed with `prefix`.
  void merge(const std::string& prefix, const TensorDict& other);
  // The tensors and metadata entries whose names start with `prefix`, with the prefix removed.
  TensorDict sub(const std::string& prefix) const;
};

}  // namespace mixtape
