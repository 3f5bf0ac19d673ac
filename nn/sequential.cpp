#include "nn/sequential.h"

namespace mixtape::nn {

void Sequential::push_back(std::shared_ptr<UnaryModule> module) { append(std::to_string(modules_.size()), module); }

void Sequential::append(const std::string& name, std::shared_ptr<UnaryModule> module) {
  register_module(name, module);  // validates the name and the pointer
  modules_.push_back(std::move(module));
}

std::shared_ptr<UnaryModule> Sequential::operator[](size_t i) const {
  MT_CHECK(i < modules_.size(), "Sequential: index ", i, " is out of range for ", modules_.size(), " modules");
  return modules_[i];
}

Variable Sequential::forward(const Variable& x) {
  Variable y = x;
  for (const auto& m : modules_) y = m->forward(y);
  return y;
}

}  // namespace mixtape::nn
