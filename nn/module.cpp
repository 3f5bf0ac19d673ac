#include "nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <typeinfo>
#include <unordered_set>

#include "tensor/state_io.h"

namespace mixtape::nn {

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + "]";
}

// "mixtape::nn::Conv2d" -> "Conv2d", "(anonymous namespace)::Net" -> "Net"; template
// arguments keep their qualifiers.
std::string unqualified(const std::string& name) {
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    else if (name[i] == '>') --depth;
    else if (depth == 0 && name[i] == ':' && name[i + 1] == ':') start = i + 2;
  }
  return name.substr(start);
}

std::string demangle(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : mangled;
  std::free(d);
  return out;
}

}  // namespace

// ---- Module: registration ----------------------------------------------------------------

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

std::string Module::type_name() const {
  return type_name_.empty() ? unqualified(demangle(typeid(*this).name())) : type_name_;
}

void Module::check_new_name(const std::string& name, const char* what) const {
  MT_CHECK(!name.empty(), type_name(), "::", what, ": the name is empty");
  MT_CHECK(name.find('.') == std::string::npos, type_name(), "::", what, ": name '", name,
           "' contains '.', which separates the levels of dotted names");
  const bool taken =
      has_parameter(name) || has_buffer(name) ||
      std::any_of(generators_.begin(), generators_.end(), [&](const auto& g) { return g.first == name; }) ||
      std::any_of(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  MT_CHECK(!taken, type_name(), "::", what, ": the name '", name, "' is already taken in this module");
}

Variable Module::register_parameter(const std::string& name, Tensor init, bool requires_grad) {
  check_new_name(name, "register_parameter");
  MT_CHECK(init.defined(), type_name(), "::register_parameter: the tensor for '", name, "' is undefined");
  Variable v(std::move(init), requires_grad, name);
  params_.emplace_back(name, v);
  return v;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name, "register_buffer");
  MT_CHECK(t.defined(), type_name(), "::register_buffer: the tensor for '", name, "' is undefined");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::register_generator(const std::string& name, Generator& gen) {
  check_new_name(name, "register_generator");
  generators_.emplace_back(name, &gen);
}

void Module::register_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "register_module");
  MT_CHECK(module != nullptr, type_name(), "::register_module: module '", name, "' is null");
  MT_CHECK(module.get() != this, type_name(), "::register_module: a module cannot contain itself");
  module->rename_parameters(name);
  children_.emplace_back(name, std::move(module));
}

// Parameters carry their dotted path as their Variable name (telemetry and error messages).
void Module::rename_parameters(const std::string& prefix) {
  for (auto& [n, p] : params_) p.set_name(prefix + "." + n);
  for (auto& [n, c] : children_) c->rename_parameters(prefix + "." + n);
}

// ---- Module: lookup ----------------------------------------------------------------------

void Module::collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const {
  for (const auto& [n, p] : params_) out.emplace_back(prefix + n, p);
  for (const auto& [n, c] : children_) c->collect_parameters(prefix + n + ".", out);
}

void Module::collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, b] : buffers_) out.emplace_back(prefix + n, b);
  for (const auto& [n, c] : children_) c->collect_buffers(prefix + n + ".", out);
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Variable>> all;
  if (recurse) collect_parameters("", all);
  else all = params_;
  std::vector<std::pair<std::string, Variable>> out;
  std::unordered_set<const VarImpl*> seen;
  for (auto& np : all)
    if (seen.insert(np.second.ptr().get()).second) out.push_back(std::move(np));
  return out;
}

std::vector<Variable> Module::parameters(bool recurse) const {
  std::vector<Variable> out;
  for (auto& np : named_parameters(recurse)) out.push_back(std::move(np.second));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  if (!recurse) return buffers_;
  std::vector<std::pair<std::string, Tensor>> out;
  collect_buffers("", out);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

bool Module::has_parameter(const std::string& name) const {
  return std::any_of(params_.begin(), params_.end(), [&](const auto& p) { return p.first == name; });
}

bool Module::has_buffer(const std::string& name) const {
  return std::any_of(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.first == name; });
}

Variable Module::parameter(const std::string& name) const {
  std::vector<std::string> names;
  for (const auto& [n, p] : params_) {
    if (n == name) return p;
    names.push_back(n);
  }
  MT_CHECK(false, type_name(), ": no parameter named '", name, "' (parameters: ", join(names), ")");
  return {};
}

Tensor Module::buffer(const std::string& name) const {
  std::vector<std::string> names;
  for (const auto& [n, b] : buffers_) {
    if (n == name) return b;
    names.push_back(n);
  }
  MT_CHECK(false, type_name(), ": no buffer named '", name, "' (buffers: ", join(names), ")");
  return {};
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  std::vector<std::string> names;
  for (const auto& [n, c] : children_) {
    if (n == name) return c;
    names.push_back(n);
  }
  MT_CHECK(false, type_name(), ": no child module named '", name, "' (children: ", join(names), ")");
  return {};
}

void Module::set_buffer(const std::string& name, Tensor t) {
  MT_CHECK(t.defined(), type_name(), "::set_buffer: the tensor for '", name, "' is undefined");
  for (auto& [n, b] : buffers_)
    if (n == name) {
      b = std::move(t);
      return;
    }
  buffer(name);  // throws, listing the buffers
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Variable& p : parameters()) n += p.numel();
  return n;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, c] : children_) c->apply(fn);
  fn(*this);
}

// ---- Module: modes and state -------------------------------------------------------------

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (Variable& p : parameters()) p.zero_grad();
}

TensorDict Module::state_dict() const {
  // Own parameters, own buffers, then each child's: torch's order.
  TensorDict out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& [n, p] : m.params_) out.add(prefix + n, p.data());
    for (const auto& [n, b] : m.buffers_) out.add(prefix + n, b);
    for (const auto& [n, c] : m.children_) walk(*c, prefix + n + ".");
  };
  walk(*this, "");
  return out;
}

std::vector<std::pair<std::string, Generator*>> Module::named_generators() const {
  std::vector<std::pair<std::string, Generator*>> out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& [n, g] : m.generators_) out.emplace_back(prefix + n, g);
    for (const auto& [n, c] : m.children_) walk(*c, prefix + n + ".");
  };
  walk(*this, "");
  return out;
}

TensorDict Module::generator_state() const {
  TensorDict out;
  for (const auto& [name, g] : named_generators()) {
    out.set_meta(name + ".seed", std::to_string(g->seed()));
    out.set_meta(name + ".offset", std::to_string(g->offset()));
  }
  return out;
}

void Module::load_generator_state(const TensorDict& state) {
  const auto gens = named_generators();
  std::vector<std::string> expected;
  for (const auto& [name, g] : gens) {
    expected.push_back(name + ".offset");
    expected.push_back(name + ".seed");
  }
  std::vector<std::string> given;
  for (const auto& [key, v] : state.metadata) given.push_back(key);
  std::sort(expected.begin(), expected.end());
  MT_CHECK(given == expected, type_name(), "::load_generator_state: the state holds ", join(given),
           ", the module's generators are ", join(expected));
  const std::string owner = type_name() + "::load_generator_state";
  const auto read = [&](const std::string& key) { return state_io::get_uint(state, key, owner.c_str()); };
  std::vector<std::pair<uint64_t, uint64_t>> values;
  for (const auto& [name, g] : gens) values.emplace_back(read(name + ".seed"), read(name + ".offset"));
  for (size_t i = 0; i < gens.size(); ++i) gens[i].second->set_state(values[i].first, values[i].second);
}

void Module::load_state_dict(const TensorDict& state, bool strict) {
  const TensorDict own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : own) {
    const Tensor* src = state.find(name);
    if (!src) {
      missing.push_back(name);
      continue;
    }
    if (src->shape() != t.shape())
      mismatched.push_back("size mismatch for '" + name + "': the state has " + src->meta() + ", the module has " +
                           t.meta());
    else if (src->dtype() != t.dtype())
      mismatched.push_back("dtype mismatch for '" + name + "': the state has " + src->meta() + ", the module has " +
                           t.meta());
  }
  for (const auto& [name, t] : state)
    if (!own.contains(name)) unexpected.push_back(name);

  std::string problems;
  if (strict && !missing.empty()) problems += "\n  missing keys: " + join(missing);
  if (strict && !unexpected.empty()) problems += "\n  unexpected keys: " + join(unexpected);
  for (const std::string& m : mismatched) problems += "\n  " + m;
  MT_CHECK(problems.empty(), "load_state_dict into ", type_name(), " failed (nothing was copied):", problems);

  for (const auto& [name, t] : own)
    if (const Tensor* src = state.find(name)) {
      Tensor dst = t;
      dst.copy_(src->to(t.device()));
    }
}

void Module::to(DType dtype) {
  apply([dtype](Module& m) {
    for (auto& [n, p] : m.params_) {
      if (!is_floating(p.dtype()) || p.dtype() == dtype) continue;
      p.impl().data = p.data().to(dtype);
      p.zero_grad();
    }
    if (is_16bit(dtype)) return;
    for (auto& [n, b] : m.buffers_)
      if (is_floating(b.dtype())) b = b.to(dtype);
  });
}

void Module::to(Device device) {
  apply([device](Module& m) {
    for (auto& [n, p] : m.params_) {
      if (p.device() == device) continue;
      p.impl().data = p.data().to(device);
      p.zero_grad();
    }
    for (auto& [n, b] : m.buffers_) b = b.to(device);
  });
}

// ---- printing ----------------------------------------------------------------------------

void Module::print(std::ostream& os, int indent) const {
  const std::string extra = extra_repr();
  if (children_.empty()) {
    os << type_name() << "(" << extra << ")";
    return;
  }
  const std::string pad(size_t(indent + 2), ' ');
  os << type_name() << "(\n";
  if (!extra.empty()) os << pad << extra << "\n";
  for (const auto& [n, c] : children_) {
    os << pad << "(" << n << "): ";
    c->print(os, indent + 2);
    os << "\n";
  }
  os << std::string(size_t(indent), ' ') << ")";
}

std::string Module::str() const {
  std::ostringstream os;
  print(os, 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

std::string size2_repr(Size2 s) {
  std::ostringstream os;
  if (s.h == s.w) os << s.h;
  else os << "(" << s.h << ", " << s.w << ")";
  return os.str();
}

}  // namespace mixtape::nn
