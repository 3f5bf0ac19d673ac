// Module: the base of every layer and model. A module owns named parameters (leaf Variables
// that require a gradient), named buffers (plain tensors such as batch-norm running statistics)
// and named child modules, all kept in registration order.
//
//   struct Net : nn::Module {
//     std::shared_ptr<nn::Conv2d> conv;
//     std::shared_ptr<nn::Linear> fc;
//     Net(Generator& gen) : Module("Net") {
//       conv = register_module("conv", std::make_shared<nn::Conv2d>(1, 8, 3, 1, 1, 1, true, gen));
//       fc = register_module("fc", std::make_shared<nn::Linear>(8 * 28 * 28, 10, true, gen));
//     }
//   };
//   net.named_parameters();   // {"conv.weight", ...}, {"conv.bias", ...}, {"fc.weight", ...}, ...
//
// Modules are not copyable and are held by std::shared_ptr. Parameters are the fp32 masters
// in mixed-precision training: layers cast them to their input's dtype in forward with the
// differentiable cast (docs/design.md section 5), so the casts sit on the tape and the gradients
// reach the masters.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace mixtape::nn {

class Module {
 public:
  // `type_name` is what str() prints ("Conv2d"); empty means the class name of the object.
  explicit Module(std::string type_name = {});
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration (names: non-empty, no '.', unique within this module) ----
  // A leaf Variable holding `init`, named after its dotted path once the module tree is built.
  Variable register_parameter(const std::string& name, Tensor init, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  // A random generator the module owns (a dropout layer's masks): a member of the module, so the
  // reference stays valid for the module's life. Listed by generator_state() so that a resumed
  // run draws the same numbers.
  void register_generator(const std::string& name, Generator& gen);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    register_child(name, module);
    return module;
  }

  // ---- lookup ----
  // Recursive, in registration order (own entries first, then each child's); a Variable
  // registered twice (shared weights) is listed once.
  std::vector<Variable> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Variable>> named_parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // This module's own entries by name; throw naming the module and the known names.
  Variable parameter(const std::string& name) const;
  Tensor buffer(const std::string& name) const;
  std::shared_ptr<Module> child(const std::string& name) const;
  bool has_parameter(const std::string& name) const;
  bool has_buffer(const std::string& name) const;
  // Replace an existing buffer (any shape or dtype); layers read buffers through buffer().
  void set_buffer(const std::string& name, Tensor t);
  int64_t num_parameters() const;  // elements over parameters()

  // Calls fn on every module of the tree, children before their parent (as torch's apply).
  void apply(const std::function<void(Module&)>& fn);

  // ---- modes ----
  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad();  // drops every parameter's gradient

  // ---- state ----
  // Parameters and buffers under their dotted names, in registration order (no metadata). The
  // tensors share storage with the module (clone them to keep a snapshot).
  TensorDict state_dict() const;
  // Copies values into the existing tensors (so optimizers holding the Variables see them).
  // Validates everything before copying anything: with `strict`, every name of the module
  // must be present and no other name may appear (both lists go into the message); shapes
  // and dtypes must match exactly (convert with Module::to or Tensor::to first).
  void load_state_dict(const TensorDict& state, bool strict = true);
  // The registered generators under their dotted names, recursively, as metadata only:
  // "<name>.seed" and "<name>.offset" in decimal ({"2.mask.seed": "..."}). Not part of
  // state_dict(): parameters and buffers are the model, generators are where its training run
  // stands. load_generator_state checks that the names are exactly the module's (both lists go
  // into the message) and every value is a decimal integer before it changes anything.
  TensorDict generator_state() const;
  void load_generator_state(const TensorDict& state);
  std::vector<std::pair<std::string, Generator*>> named_generators() const;
  // Converts every floating parameter to `dtype` in place: Variables keep their identity and
  // lose their gradient. Floating buffers follow to f32 and f64 but stay as they are for a
  // 16-bit `dtype`: buffers hold statistics (batch-norm running mean and variance), which run
  // in fp32 or wider (docs/design.md section 5). i64 buffers never change.
  void to(DType dtype);
  // Moves every parameter and buffer to `device` (same rules for Variables as above).
  void to(Device device);

  // ---- printing ----
  // "Conv2d(1, 32, kernel=3, stride=1, padding=1)"; a module with children prints the tree:
  //   Sequential(
  //     (0): Linear(4, 8)
  //     (1): ReLU()
  //   )
  std::string str() const;
  std::string type_name() const;
  // The part inside the parentheses for a module without children ("1, 32, kernel=3, ...").
  virtual std::string extra_repr() const { return {}; }

 protected:
  void register_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  void check_new_name(const std::string& name, const char* what) const;
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const;
  void collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;
  void rename_parameters(const std::string& prefix);
  void print(std::ostream& os, int indent) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, Generator*>> generators_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

// A module with one input and one output: what Sequential chains.
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual Variable forward(const Variable& x) = 0;
  Variable operator()(const Variable& x) { return forward(x); }
  Variable operator()(const Tensor& x) { return forward(Variable(x)); }
};

// "3" for a square size, "(3, 5)" otherwise: how modules print kernel sizes and strides.
std::string size2_repr(Size2 s);

}  // namespace mixtape::nn
