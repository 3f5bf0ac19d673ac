#include "tensor/cpu/stats.h"

#include <algorithm>
#include <cmath>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

namespace {

// Calls f(v) with every element of x as a double, in row-major order.
template <class F>
void for_each_value(const Strided& x, const char* op, F&& f) {
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    for_each_offset<1>(x.shape(), {x.strides()}, [&](const std::array<int64_t, 1>& o) { f(double(load(px[o[0]]))); });
  });
}

void write(const Strided& out, double a, double b, double c, double d, double e) {
  double* p = out.data<double>();
  p[0] = a;
  p[1] = b;
  p[2] = c;
  p[3] = d;
  p[4] = e;
}

}  // namespace

void tensor_moments(const Strided& x, const Strided& out) {
  double n = 0.0, bad = 0.0, s = 0.0, ss = 0.0, m = 0.0;
  for_each_value(x, "tensor_moments", [&](double v) {
    if (!std::isfinite(v)) {
      bad += 1.0;
      return;
    }
    n += 1.0;
    s += v;
    ss += v * v;
    m = std::max(m, std::abs(v));
  });
  write(out, n, bad, s, ss, m);
}

void log_abs_moments(const Strided& x, const Strided& out) {
  double n = 0.0, bad = 0.0, s = 0.0, ss = 0.0, m = 0.0;
  for_each_value(x, "log_abs_moments", [&](double v) {
    if (!std::isfinite(v)) {
      bad += 1.0;
      return;
    }
    const double a = std::abs(v);
    m = std::max(m, a);
    if (a == 0.0) return;
    const double l = std::log(a);
    n += 1.0;
    s += l;
    ss += l * l;
  });
  write(out, n, bad, s, ss, m);
}

}  // namespace mixtape::cpu
