// Sequential: a chain of UnaryModules applied in order; itself a UnaryModule, so chains nest.
//
//   auto net = std::make_shared<nn::Sequential>(
//       std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 1));
//   net->push_back(std::make_shared<nn::Sigmoid>());  // child "3"
//   net->add("head", std::make_shared<nn::Tanh>());    // child "head"
//   Variable y = (*net)(x);
//
// Children pushed without a name are named by their position ("0", "1", ...), so parameter
// names read "0.weight", "2.bias" as in torch.
#pragma once

#include <concepts>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace mixtape::nn {

class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  template <class... Ms>
  requires(sizeof...(Ms) > 0 &&
           (std::derived_from<Ms, UnaryModule> && ...)) explicit Sequential(std::shared_ptr<Ms>... modules)
      : Sequential() {
    (push_back(std::move(modules)), ...);
  }

  // Appends under the name of its position.
  void push_back(std::shared_ptr<UnaryModule> module);
  // Appends under `name`; returns the module typed.
  template <class M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::derived_from<M, UnaryModule>, "Sequential::add takes UnaryModules");
    append(name, module);
    return module;
  }

  Variable forward(const Variable& x) override;
  using UnaryModule::operator();

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // Position i (throws when out of range).
  std::shared_ptr<UnaryModule> operator[](size_t i) const;
  // Position i as M (throws when it is another kind of module).
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    MT_CHECK(m != nullptr, "Sequential::at: module ", i, " is a ", (*this)[i]->type_name(), ", not the requested type");
    return m;
  }
  std::vector<std::shared_ptr<UnaryModule>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<UnaryModule>>::const_iterator end() const { return modules_.end(); }

 private:
  void append(const std::string& name, std::shared_ptr<UnaryModule> module);

  std::vector<std::shared_ptr<UnaryModule>> modules_;
};

}  // namespace mixtape::nn
