#include "tensor/tensor.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "cuda/backend.h"
#include "cuda/runtime.h"
#include "tensor/cpu/copy.h"

namespace mixtape {

// ---- basics ------------------------------------------------------------------------------

int64_t Tensor::size(int64_t d) const { return shape()[size_t(wrap_dim(d, dim(), "Tensor::size"))]; }

bool Tensor::is_contiguous() const { return is_contiguous_layout(shape(), strides()); }

Tensor::operator Strided() const {
  if (!defined()) return Strided();
  return Strided(raw_data(), dtype(), shape(), strides(), device());
}

std::string Tensor::meta() const {
  return detail::cat(dtype_name(dtype()), shape_str(shape()), device().is_cpu() ? "" : " " + device().str());
}

void* Tensor::raw_data() const {
  return static_cast<char*>(storage()->data()) + offset() * int64_t(dtype_size(dtype()));
}

namespace {

std::shared_ptr<TensorImpl> make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return impl;
}

// Resolve one -1 in a requested shape against the element count.
Shape infer_shape(Shape shape, int64_t numel, const Tensor& t, const char* op) {
  int64_t known = 1, infer = -1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MT_CHECK(infer < 0, op, ": only one dimension may be -1, got ", shape_str(shape));
      infer = int64_t(i);
    } else {
      MT_CHECK(shape[i] >= 0, op, ": negative size in ", shape_str(shape));
      overflow = overflow || __builtin_mul_overflow(known, shape[i], &known);
    }
  }
  MT_CHECK(!overflow, op, ": shape ", shape_str(shape), " overflows: its element count does not fit in 64 bits");
  if (infer >= 0) {
    MT_CHECK(known > 0 && numel % known == 0, op, ": cannot reshape ", t.meta(), " to ", shape_str(shape));
    shape[size_t(infer)] = numel / known;
  }
  MT_CHECK(numel_of(shape, op) == numel, op, ": cannot reshape ", t.meta(), " (", numel, " elements) to ",
           shape_str(shape));
  return shape;
}

// Strides for viewing `t` as `shape` without copying, or empty when impossible.
// Walks groups of old dims that multiply to groups of new dims; each old group must be
// contiguous within itself.
std::optional<Shape> view_strides(const Tensor& t, const Shape& shape) {
  const Shape& os = t.shape();
  const Shape& ost = t.strides();
  Shape st(shape.size(), 1);
  if (t.numel() == 0) return contiguous_strides(shape);
  size_t i = 0, j = 0;
  // Skip size-1 dims on both sides: they take any stride.
  while (i < os.size() || j < shape.size()) {
    while (i < os.size() && os[i] == 1) ++i;
    while (j < shape.size() && shape[j] == 1) {
      st[j] = 1;
      ++j;
    }
    if (i >= os.size() && j >= shape.size()) break;
    if (i >= os.size() || j >= shape.size()) return std::nullopt;
    // Collect a group: old dims [i, i2) and new dims [j, j2) with equal products.
    size_t i2 = i, j2 = j;
    int64_t po = os[i2++], pn = shape[j2++];
    while (po != pn) {
      if (po < pn) {
        if (i2 >= os.size()) return std::nullopt;
        po *= os[i2++];
      } else {
        if (j2 >= shape.size()) return std::nullopt;
        pn *= shape[j2++];
      }
    }
    // The old group must be contiguous: stride[k] = stride[k+1] * size[k+1] (size-1 dims skipped).
    int64_t last = -1;
    for (size_t k = i2; k-- > i;) {
      if (os[k] == 1) continue;
      if (last >= 0 && ost[k] != last) return std::nullopt;
      last = ost[k] * os[k];
    }
    int64_t inner = 0;
    for (size_t k = i2; k-- > i;)
      if (os[k] != 1) {
        inner = ost[k];
        break;
      }
    for (size_t k = j2; k-- > j;) {
      st[k] = inner;
      inner *= shape[k];
    }
    i = i2;
    j = j2;
  }
  return st;
}

}  // namespace

Tensor Tensor::view(Shape shape) const {
  shape = infer_shape(std::move(shape), numel(), *this, "view");
  auto st = view_strides(*this, shape);
  MT_CHECK(st.has_value(), "view: cannot view ", meta(), " with strides ", shape_str(strides()), " as ",
           shape_str(shape), " without a copy (use reshape or contiguous)");
  return Tensor(make_view(*this, std::move(shape), std::move(*st), offset()));
}

Tensor Tensor::reshape(Shape shape) const {
  shape = infer_shape(std::move(shape), numel(), *this, "reshape");
  if (auto st = view_strides(*this, shape)) return Tensor(make_view(*this, shape, std::move(*st), offset()));
  return contiguous().view(std::move(shape));
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape sh = shape(), st = strides();
  std::swap(sh[size_t(d0)], sh[size_t(d1)]);
  std::swap(st[size_t(d0)], st[size_t(d1)]);
  return Tensor(make_view(*this, std::move(sh), std::move(st), offset()));
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  MT_CHECK(int64_t(dims.size()) == dim(), "permute: got ", dims.size(), " dims for ", meta());
  Shape sh(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    MT_CHECK(!seen[size_t(d)], "permute: dim ", d, " repeated in ", shape_str(dims));
    seen[size_t(d)] = true;
    sh[i] = shape()[size_t(d)];
    st[i] = strides()[size_t(d)];
  }
  return Tensor(make_view(*this, std::move(sh), std::move(st), offset()));
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = shape()[size_t(d)];
  if (start < 0) start += n;
  MT_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ", start + length,
           ") is out of bounds for dim ", d, " of ", meta());
  Shape sh = shape();
  sh[size_t(d)] = length;
  return Tensor(make_view(*this, std::move(sh), strides(), offset() + start * strides()[size_t(d)]));
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  MT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape()[size_t(d)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sh = shape(), st = strides();
  sh[size_t(d)] = (end - start + step - 1) / step;
  st[size_t(d)] *= step;
  return Tensor(make_view(*this, std::move(sh), std::move(st), offset() + start * strides()[size_t(d)]));
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  const int64_t n = shape()[size_t(d)];
  if (index < 0) index += n;
  MT_CHECK(index >= 0 && index < n, "select: index ", index, " out of range for dim ", d, " of ", meta());
  Shape sh = shape(), st = strides();
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(make_view(*this, std::move(sh), std::move(st), offset() + index * strides()[size_t(d)]));
}

Tensor Tensor::expand(Shape shape) const {
  MT_CHECK(shape.size() >= size_t(dim()), "expand: cannot expand ", meta(), " to fewer dims ", shape_str(shape));
  Shape st(shape.size(), 0);
  const size_t lead = shape.size() - size_t(dim());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      MT_CHECK(shape[i] >= 0, "expand: negative size in ", shape_str(shape));
      continue;
    }
    const int64_t have = this->shape()[i - lead];
    if (shape[i] == -1) shape[i] = have;
    MT_CHECK(have == shape[i] || have == 1, "expand: cannot expand ", meta(), " to ", shape_str(shape), " (dim ", i,
             ": ", have, " -> ", shape[i], ")");
    st[i] = have == shape[i] ? strides()[i - lead] : 0;
  }
  return Tensor(make_view(*this, std::move(shape), std::move(st), offset()));
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape sh = shape(), st = strides();
  const int64_t s = size_t(d) < st.size() ? st[size_t(d)] * sh[size_t(d)] : 1;
  sh.insert(sh.begin() + d, 1);
  st.insert(st.begin() + d, s);
  return Tensor(make_view(*this, std::move(sh), std::move(st), offset()));
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  MT_CHECK(shape()[size_t(d)] == 1, "squeeze: dim ", d, " of ", meta(), " is not 1");
  Shape sh = shape(), st = strides();
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(make_view(*this, std::move(sh), std::move(st), offset()));
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  MT_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " > end_dim ", end_dim);
  Shape sh(shape().begin(), shape().begin() + start_dim);
  int64_t n = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) n *= shape()[size_t(i)];
  sh.push_back(n);
  sh.insert(sh.end(), shape().begin() + end_dim + 1, shape().end());
  return reshape(std::move(sh));
}

// ---- copies ------------------------------------------------------------------------------

void Tensor::copy_(const Tensor& src) {
  MT_CHECK(device() == src.device(), "copy_: source on ", src.device(), ", destination on ", device());
  MT_CHECK(broadcast_shapes(src.shape(), shape(), "copy_") == shape(), "copy_: cannot broadcast source ", src.meta(),
           " to destination ", meta());
  const Tensor s = src.expand(shape());
  on_device(
      device(), [&] { cpu::copy_cast(s, *this, Rounding::nearest, 0, 0); },
      [&] { cuda::copy_cast(s, *this, Rounding::nearest, 0, 0); });
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dt, Rounding rounding, Generator* gen) const {
  if (dt == dtype()) return *this;
  Tensor out = empty(shape(), dt, device());
  uint64_t seed = 0, offset = 0;
  if (rounding == Rounding::stochastic) {
    Generator& g = gen ? *gen : default_generator();
    seed = g.seed();
    offset = g.advance(uint64_t(numel()));
  }
  on_device(
      device(), [&] { cpu::copy_cast(*this, out, rounding, seed, offset); },
      [&] { cuda::copy_cast(*this, out, rounding, seed, offset); });
  return out;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  const Tensor src = contiguous();
  Tensor out = empty(shape(), dtype(), dev);
  const size_t nbytes = size_t(numel()) * dtype_size(dtype());
  // cuda:i -> cuda:j goes through the host: simple and rare.
  if (!dev.is_cpu() && !src.device().is_cpu()) return src.to(Device::cpu()).to(dev);
  // Between the host and a device: the backend of the device end copies the bytes.
  const Device end = dev.is_cpu() ? src.device() : dev;
  on_device(
      end, [&] { MT_ASSERT(false, "Tensor::to: a copy between ", src.device(), " and ", dev); },
      [&] {
    if (dev.is_cpu()) cuda::copy_device_to_host(out.raw_data(), src.raw_data(), nbytes, end.index);
    else cuda::copy_host_to_device(out.raw_data(), src.raw_data(), nbytes, end.index);
      });
  return out;
}

// ---- element access ----------------------------------------------------------------------

namespace {
int64_t flat_offset(const Tensor& t, int64_t i) {
  MT_CHECK(i >= 0 && i < t.numel(), "flat index ", i, " out of range for ", t.meta());
  int64_t off = t.offset();
  for (size_t d = t.shape().size(); d-- > 0;) {
    off += (i % t.shape()[d]) * t.strides()[d];
    i /= t.shape()[d];
  }
  return off;
}
}  // namespace

double Tensor::flat_get(int64_t i) const {
  MT_CHECK(device().is_cpu(), "flat_get: tensor is on ", device(), "; call .to(Device::cpu()) first");
  const int64_t off = flat_offset(*this, i);
  return dispatch_all(dtype(), "flat_get",
                      [&]<class T>() { return double(load<T>(static_cast<const T*>(storage()->data())[off])); });
}

void Tensor::flat_set(int64_t i, double v) {
  MT_CHECK(device().is_cpu(), "flat_set: tensor is on ", device());
  const int64_t off = flat_offset(*this, i);
  dispatch_all(dtype(), "flat_set", [&]<class T>() {
    static_cast<T*>(storage()->data())[off] = store<T>(v);  // one rounding from double
  });
}

double Tensor::item() const {
  MT_CHECK(numel() == 1, "item: tensor ", meta(), " has ", numel(), " elements, expected 1");
  return device().is_cpu() ? flat_get(0) : to(Device::cpu()).flat_get(0);
}

std::vector<double> Tensor::to_vector() const {
  const Tensor c = device().is_cpu() ? contiguous().to(DType::f64) : to(Device::cpu()).contiguous().to(DType::f64);
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

template <class T>
std::vector<T> Tensor::values() const {
  const Tensor c = to(Device::cpu()).contiguous().to(dtype_of<T>::value);
  const T* p = c.template data<T>();
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> Tensor::values<float>() const;
template std::vector<double> Tensor::values<double>() const;
template std::vector<half> Tensor::values<half>() const;
template std::vector<bfloat16> Tensor::values<bfloat16>() const;
template std::vector<int64_t> Tensor::values<int64_t>() const;

// ---- printing ----------------------------------------------------------------------------

std::string Tensor::str(int64_t max_per_dim) const {
  if (!defined()) return "Tensor(undefined)";
  const Tensor c = to(Device::cpu());
  std::ostringstream os;
  os << "Tensor(" << meta() << ")";
  if (numel() == 0) return os.str() + " []";
  os << "\n";
  const bool integral = dtype() == DType::i64;
  const int prec = dtype() == DType::f64 ? 8 : is_16bit(dtype()) ? 4 : 6;
  // Recursive printer with elision of the middle when a dim is longer than max_per_dim.
  std::function<void(int64_t, int64_t, int)> rec = [&](int64_t d, int64_t base, int indent) {
    const int64_t n = d < dim() ? shape()[size_t(d)] : 1;
    if (d == dim()) {
      const double v = c.flat_get(base);
      if (integral) os << int64_t(v);
      else os << std::setprecision(prec) << v;
      return;
    }
    int64_t inner = 1;
    for (int64_t k = d + 1; k < dim(); ++k) inner *= shape()[size_t(k)];
    os << '[';
    for (int64_t i = 0; i < n; ++i) {
      if (n > max_per_dim && i == max_per_dim / 2) {
        os << (d + 1 == dim() ? "..., " : "...,\n" + std::string(size_t(indent + 1), ' '));
        i = n - max_per_dim / 2;
      }
      rec(d + 1, base + i * inner, indent + 1);
      if (i + 1 < n) os << (d + 1 == dim() ? ", " : ",\n" + std::string(size_t(indent + 1), ' '));
    }
    os << ']';
  };
  rec(0, 0, 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---- factories ---------------------------------------------------------------------------

namespace {
Tensor empty_in(const char* op, const Shape& shape, DType dtype, Device device, bool readout) {
  const int64_t numel = numel_of(shape, op);  // negative sizes and overflow throw (Note [Checked sizes])
  int64_t nbytes = 0;
  MT_CHECK(!__builtin_mul_overflow(numel, int64_t(dtype_size(dtype)), &nbytes), op, ": shape ", shape_str(shape),
           " of ", dtype_name(dtype), " overflows: its size in bytes does not fit in 64 bits");
  MT_CHECK(!(dtype == DType::f64 && device.is_cuda()), op, ": f64 tensors are CPU-only (asked for ", device, ")");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(nbytes), device, readout);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}
}  // namespace

Tensor empty(const Shape& shape, DType dtype, Device device) { return empty_in("empty", shape, dtype, device, false); }

Tensor readout_zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty_in("readout_zeros", shape, dtype, device, true);
  on_device(
      device, [&] { cpu::fill(t, 0.0); }, [&] { cuda::fill(t, 0.0); });
  return t;
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  on_device(
      device, [&] { cpu::fill(t, value); }, [&] { cuda::fill(t, value); });
  return t;
}
void increment_(Tensor& counter, int64_t by) {
  MT_CHECK(counter.defined(), "increment_: the counter is undefined");
  MT_CHECK(counter.dtype() == DType::i64, "increment_: counter ", counter.meta(), " must be i64");
  for (int64_t d = 0; d < counter.dim(); ++d)
    MT_CHECK(counter.shape()[size_t(d)] <= 1 || counter.strides()[size_t(d)] != 0, "increment_: counter ",
             counter.meta(), " is a broadcast view (stride 0 in dim ", d, ") and cannot be written in place");
  on_device(
      counter.device(), [&] { cpu::increment(counter, by); }, [&] { cuda::increment(counter, by); });
}

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  MT_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
           "arange: bad range start=", start, " end=", end, " step=", step);
  const int64_t n = std::max<int64_t>(0, int64_t(std::ceil((end - start) / step)));
  Tensor t = empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) t.flat_set(i, start + double(i) * step);
  return t;
}

Tensor from_vector(const std::vector<double>& data, const Shape& shape, DType dtype) {
  MT_CHECK(int64_t(data.size()) == numel_of(shape), "from_vector: ", data.size(), " values do not fill shape ",
           shape_str(shape), " (", numel_of(shape), " elements)");
  Tensor t = empty(shape, dtype);
  dispatch_all(dtype, "from_vector", [&]<class T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < data.size(); ++i) p[i] = store<T>(data[i]);  // one rounding from double
  });
  return t;
}

Tensor from_vector(const std::vector<float>& data, const Shape& shape, DType dtype) {
  return from_vector(std::vector<double>(data.begin(), data.end()), shape, dtype);
}

Tensor from_vector(const std::vector<int64_t>& data, const Shape& shape) {
  MT_CHECK(int64_t(data.size()) == numel_of(shape), "from_vector: ", data.size(), " values do not fill shape ",
           shape_str(shape));
  Tensor t = empty(shape, DType::i64);
  std::copy(data.begin(), data.end(), t.data<int64_t>());
  return t;
}

namespace {
// Fill a new tensor element by element from Philox words: f(words) -> double, counter = offset+i.
template <class F>
Tensor random_fill(const Shape& shape, DType dtype, Generator& gen, const char* op, F&& f) {
  MT_CHECK(is_floating(dtype), op, ": expected a floating dtype, got ", dtype_name(dtype));
  Tensor t = empty(shape, dtype);
  const uint64_t base = gen.advance(uint64_t(t.numel()));
  dispatch_floating(dtype, op, [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = store<T>(compute_t<T>(f(philox_words(gen.seed(), base + uint64_t(i)))));
  });
  return t;
}
}  // namespace

Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype) {
  MT_CHECK(lo <= hi, "uniform: lo ", lo, " > hi ", hi);
  const bool f64 = dtype == DType::f64;
  return random_fill(shape, dtype, gen, "uniform", [&](const PhiloxBlock& w) {
    const double u = f64 ? uniform01_f64(w[0], w[1]) : double(uniform01(w[0]));
    return lo + (hi - lo) * u;
  });
}

Tensor normal(const Shape& shape, double mean, double stddev, Generator& gen, DType dtype) {
  MT_CHECK(stddev >= 0, "normal: stddev must be >= 0, got ", stddev);
  // Box-Muller on two uniforms from the same counter; u1 in (0, 1] keeps log finite.
  return random_fill(shape, dtype, gen, "normal", [&](const PhiloxBlock& w) {
    const double u1 = 1.0 - uniform01_f64(w[0], w[1]);
    const double u2 = uniform01_f64(w[2], w[3]);
    return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  });
}

Tensor bernoulli(const Shape& shape, double p, Generator& gen, DType dtype) {
  MT_CHECK(p >= 0 && p <= 1, "bernoulli: p must be in [0, 1], got ", p);
  return random_fill(shape, dtype, gen, "bernoulli",
                     [&](const PhiloxBlock& w) { return uniform01_f64(w[0], w[1]) < p ? 1.0 : 0.0; });
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}
void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

}  // namespace mixtape
