#include "tensor/ops/lstm.h"

#include "cuda/backend.h"
#include "tensor/cpu/lstm.h"
#include "tensor/ops/common.h"
#include "tensor/ops/elementwise.h"
#include "tensor/ops/linalg.h"
#include "tensor/ops/shape.h"

namespace mixtape {

namespace {

// gates [B, 4H] and c_prev [B, H] on one device, one floating dtype.
void check_cell_inputs(const char* op, const Tensor& gates, const Tensor& c_prev) {
  ops::check_same(op, {&gates, &c_prev});
  ops::check_floating(op, gates);
  ops::check_dim(op, gates, 2, "gates [B, 4H]");
  ops::check_dim(op, c_prev, 2, "c_prev [B, H]");
  MT_CHECK(gates.size(1) % 4 == 0, op, ": gates ", gates.meta(), " must have 4H columns (the i, f, g, o chunks); ",
           gates.size(1), " is not divisible by 4");
  MT_CHECK(gates.size(1) == 4 * c_prev.size(1), op, ": gates ", gates.meta(), " must have 4H = ", 4 * c_prev.size(1),
           " columns for c_prev ", c_prev.meta());
  MT_CHECK(gates.size(0) == c_prev.size(0), op, ": batch mismatch between gates ", gates.meta(), " and c_prev ",
           c_prev.meta());
}

}  // namespace

namespace {

LstmCellSaved cell_forward(const char* op, const Tensor& gates, const Tensor& c_prev, bool save) {
  check_cell_inputs(op, gates, c_prev);
  Tensor c = empty(c_prev.shape(), c_prev.dtype(), c_prev.device());
  Tensor h = empty(c_prev.shape(), c_prev.dtype(), c_prev.device());
  const DType compute = c_prev.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor acts = save ? empty({c_prev.size(0), 5 * c_prev.size(1)}, compute, c_prev.device()) : Tensor();
  on_device(
      gates.device(), [&] { cpu::lstm_cell(gates, c_prev, c, h, acts); },
      [&] { cuda::lstm_cell(gates, c_prev, c, h, acts); });
  return {c, h, acts};
}

void check_cell_grads(const char* op, const Tensor& c_prev, const Tensor& dc, const Tensor& dh) {
  ops::check_same(op, {&c_prev, &dc, &dh});
  MT_CHECK(dc.shape() == c_prev.shape() && dh.shape() == c_prev.shape(), op, ": dc ", dc.meta(), " and dh ", dh.meta(),
           " must match c_prev ", c_prev.meta());
}

}  // namespace

LstmCellResult<Tensor> lstm_cell(const Tensor& gates, const Tensor& c_prev) {
  LstmCellSaved r = cell_forward("lstm_cell", gates, c_prev, false);
  return {r.c, r.h};
}

LstmCellSaved lstm_cell_saving(const Tensor& gates, const Tensor& c_prev) {
  return cell_forward("lstm_cell", gates, c_prev, true);
}

LstmCellGrads lstm_cell_backward(const Tensor& gates, const Tensor& c_prev, const Tensor& dc, const Tensor& dh) {
  const char* op = "lstm_cell backward";
  check_cell_inputs(op, gates, c_prev);
  check_cell_grads(op, c_prev, dc, dh);
  Tensor d_gates = empty(gates.shape(), gates.dtype(), gates.device());
  Tensor d_c_prev = empty(c_prev.shape(), c_prev.dtype(), c_prev.device());
  on_device(
      gates.device(), [&] { cpu::lstm_cell_backward(gates, c_prev, dc, dh, d_gates, d_c_prev); },
      [&] { cuda::lstm_cell_backward(gates, c_prev, dc, dh, d_gates, d_c_prev); });
  return {d_gates, d_c_prev};
}

LstmCellGrads lstm_cell_backward_saved(const Tensor& acts, const Tensor& c_prev, const Tensor& dc, const Tensor& dh) {
  const char* op = "lstm_cell backward";
  check_cell_grads(op, c_prev, dc, dh);
  ops::check_floating(op, c_prev);
  const DType compute = c_prev.dtype() == DType::f64 ? DType::f64 : DType::f32;
  MT_CHECK(acts.defined() && acts.device() == c_prev.device() && acts.dtype() == compute && acts.is_contiguous() &&
               acts.shape() == Shape({c_prev.size(0), 5 * c_prev.size(1)}),
           op, ": the saved activations must be a contiguous ", dtype_name(compute), "[", c_prev.size(0), ", ",
           5 * c_prev.size(1), "] on ", c_prev.device().str(), ", got ", acts.defined() ? acts.meta() : "none");
  const int64_t B = c_prev.size(0), H = c_prev.size(1);
  Tensor d_gates = empty({B, 4 * H}, c_prev.dtype(), c_prev.device());
  Tensor d_c_prev = empty(c_prev.shape(), c_prev.dtype(), c_prev.device());
  on_device(
      c_prev.device(), [&] { cpu::lstm_cell_backward_saved(acts, c_prev, dc, dh, d_gates, d_c_prev); },
      [&] { cuda::lstm_cell_backward_saved(acts, c_prev, dc, dh, d_gates, d_c_prev); });
  return {d_gates, d_c_prev};
}

namespace {

// The CPU kernels take f32, f16 and bf16; f64 (the gradient checks) and other devices run the
// step ops.
bool sequence_on_cpu(const Tensor& proj) { return proj.device().is_cpu() && proj.dtype() != DType::f64; }

}  // namespace

LstmSequence lstm_sequence(const Tensor& proj, int64_t time_dim, const Tensor& w, const Tensor& b, const Tensor& h0,
                           const Tensor& c0, bool save) {
  const char* op = "lstm_sequence";
  MT_CHECK(time_dim == 0 || time_dim == 1, op, ": time_dim must be 0 or 1, got ", time_dim);
  if (b.defined()) ops::check_same(op, {&proj, &w, &b, &h0, &c0});
  else ops::check_same(op, {&proj, &w, &h0, &c0});
  ops::check_floating(op, proj);
  MT_CHECK(proj.dim() == 3 && w.dim() == 2 && w.size(0) == 4 * w.size(1) && proj.size(2) == w.size(0), op,
           ": expected proj [., ., 4H] and w [4H, H], got ", proj.meta(), " and ", w.meta());
  const int64_t T = proj.size(time_dim), B = proj.size(1 - time_dim), H = w.size(1);
  MT_CHECK(T > 0, op, ": the sequence ", proj.meta(), " has no steps");
  for (const Tensor* s : {&h0, &c0})
    MT_CHECK(s->shape() == Shape({B, H}), op, ": the initial states must be [", B, ", ", H, "], got ", s->meta());
  MT_CHECK(!b.defined() || b.shape() == Shape({4 * H}), op, ": b must be [", 4 * H, "], got ", b.meta());
  const DType compute = proj.dtype() == DType::f64 ? DType::f64 : DType::f32;
  LstmSequence s;
  if (sequence_on_cpu(proj)) {
    s.hs = empty({T + 1, B, H}, proj.dtype(), proj.device());
    s.cs = empty({T + 1, B, H}, proj.dtype(), proj.device());
    s.hs.select(0, 0).copy_(h0);
    s.cs.select(0, 0).copy_(c0);
    if (save) s.acts = empty({T, B, 5 * H}, compute, proj.device());
    cpu::lstm_layer_forward(proj, time_dim, w, b, s.hs, s.cs, s.acts);
    return s;
  }
  // W with W^T's rows contiguous: each step's GEMM then reads its right operand in place instead
  // of packing it again, T times (tensor/cpu/gemm_tiles.inc). The arithmetic does not depend on
  // the layout. (The CPU kernel packs W once, from any strides.)
  const Tensor w_rows = w.t().contiguous().t();
  std::vector<Tensor> hs{h0}, cs{c0}, acts;
  for (int64_t t = 0; t < T; ++t) {
    const Tensor gates = add(proj.select(time_dim, t), linear(hs.back(), w_rows, b));
    if (save) {
      LstmCellSaved step = lstm_cell_saving(gates, cs.back());
      acts.push_back(std::move(step.acts));
      cs.push_back(std::move(step.c));
      hs.push_back(std::move(step.h));
    } else {
      LstmCellResult<Tensor> step = lstm_cell(gates, cs.back());
      cs.push_back(std::move(step.c));
      hs.push_back(std::move(step.h));
    }
  }
  s.hs = stack(hs, 0);
  s.cs = stack(cs, 0);
  if (save) s.acts = stack(acts, 0);
  return s;
}

LstmSequenceGrads lstm_sequence_backward(const LstmSequence& s, const Tensor& w, const Tensor& dout, int64_t time_dim,
                                         const Tensor& dh, const Tensor& dc, bool need_dh0) {
  const char* op = "lstm_sequence backward";
  MT_CHECK(s.acts.defined(), op, ": the sequence was run without saving its activations");
  MT_CHECK(time_dim == 0 || time_dim == 1, op, ": time_dim must be 0 or 1, got ", time_dim);
  ops::check_same(op, {&s.hs, &w, &dout, &dh, &dc});
  const int64_t T = s.acts.size(0), B = s.acts.size(1), H = w.size(1);
  const Shape douts = time_dim == 0 ? Shape{T, B, H} : Shape{B, T, H};
  MT_CHECK(dout.shape() == douts && dh.shape() == Shape({B, H}) && dc.shape() == Shape({B, H}), op, ": expected dout ",
           shape_str(douts), " and dh, dc [", B, ", ", H, "], got ", dout.meta(), ", ", dh.meta(), ", ", dc.meta());
  LstmSequenceGrads g;
  if (sequence_on_cpu(dout)) {
    g.dg = empty(time_dim == 0 ? Shape{T, B, 4 * H} : Shape{B, T, 4 * H}, dout.dtype(), dout.device());
    g.dh = dh.clone();  // the kernel's running gradients: fresh contiguous copies
    g.dc = dc.clone();
    cpu::lstm_layer_backward(s.acts, s.cs, w, dout, time_dim, g.dh, g.dc, g.dg, need_dh0);
    if (!need_dh0) g.dh = Tensor();
    return g;
  }
  Tensor gh = dh, gc = dc;
  std::vector<Tensor> dgs(static_cast<size_t>(T));
  for (int64_t t = T - 1; t >= 0; --t) {
    LstmCellGrads step =
        lstm_cell_backward_saved(s.acts.select(0, t), s.cs.select(0, t), gc, add(dout.select(time_dim, t), gh));
    gc = std::move(step.d_c_prev);
    if (t > 0 || need_dh0) gh = linear_backward_input(step.d_gates, w);  // (B, H) = (B, 4H) (4H, H)
    dgs[size_t(t)] = std::move(step.d_gates);
  }
  g.dg = stack(dgs, time_dim);
  if (need_dh0) g.dh = gh;
  g.dc = gc;
  return g;
}

namespace {

// The kernels' description of a per-tensor QuantSpec, and a step's stats as quantize() reports them.
BlockQuant per_tensor_quant(const char* op, const QuantSpec& spec, int64_t rows, int64_t cols) {
  MT_CHECK(spec.layout.block_rows == 0 && spec.layout.block_cols == 0 && spec.given_scale == 0.0f &&
               spec.rule == ScaleRule::amax && is_8bit(spec.format),
           op, ": expects a per-tensor amax spec of an 8-bit format without a given scale");
  return {spec.format, std::max<int64_t>(rows, 1), std::max<int64_t>(cols, 1), spec.rule, spec.overflow, spec.margin,
          0.0f,        spec.fallback_scale};
}
std::vector<QuantStats> step_stats(const std::vector<cpu::Fp8StepStats>& steps, int64_t count) {
  std::vector<QuantStats> out;
  for (const cpu::Fp8StepStats& s : steps) {
    const cpu::RowCounts& c = s.counts;
    out.push_back(s.scale_inv == 0.0f ? QuantStats{}
                                      : QuantStats{count, c.saturated, c.flushed, c.subnormal, c.nonfinite, c.amax,
                                                   s.scale_inv, s.scale_inv});
  }
  return out;
}
void check_weight_codes(const char* op, const Quantized& w, int64_t H) {
  MT_CHECK(w.codes.defined() && w.codes.shape() == Shape({4 * H, H}) && w.scale_inv.numel() == 1 && !w.transposed &&
               w.codes.device().is_cpu(),
           op, ": w must be the per-tensor codes of [", 4 * H, ", ", H, "] on the CPU");
}

}  // namespace

LstmSequence lstm_sequence_fp8(const Tensor& proj, int64_t time_dim, const Quantized& w, const Tensor& b,
                               const Tensor& h0, const Tensor& c0, const QuantSpec& spec,
                               std::vector<QuantStats>& stats) {
  const char* op = "lstm_sequence_fp8";
  MT_CHECK(time_dim == 0 || time_dim == 1, op, ": time_dim must be 0 or 1, got ", time_dim);
  MT_CHECK(proj.dim() == 3 && is_16bit(proj.dtype()) && proj.device().is_cpu(), op,
           ": expected a 16-bit proj [., ., 4H] on the CPU, got ", proj.meta());
  const int64_t T = proj.size(time_dim), B = proj.size(1 - time_dim), H = proj.size(2) / 4;
  check_weight_codes(op, w, H);
  for (const Tensor* t : {&h0, &c0})
    MT_CHECK(t->shape() == Shape({B, H}) && t->dtype() == proj.dtype(), op, ": the initial states must be ",
             dtype_name(proj.dtype()), " [", B, ", ", H, "], got ", t->meta());
  MT_CHECK(!b.defined() || (b.shape() == Shape({4 * H}) && b.dtype() == proj.dtype()), op, ": b must be ",
           dtype_name(proj.dtype()), " [", 4 * H, "], got ", b.meta());
  MT_CHECK(T > 0, op, ": the sequence ", proj.meta(), " has no steps");
  LstmSequence s;
  s.hs = empty({T + 1, B, H}, proj.dtype());
  s.cs = empty({T + 1, B, H}, proj.dtype());
  s.hs.select(0, 0).copy_(h0);
  s.cs.select(0, 0).copy_(c0);
  s.acts = empty({T, B, 5 * H}, DType::f32);
  std::vector<cpu::Fp8StepStats> st;
  cpu::lstm_layer_forward_fp8(proj, time_dim, w.codes, w.scale_inv.to_vector()[0], b, per_tensor_quant(op, spec, B, H),
                              s.hs, s.cs, s.acts, st);
  stats = step_stats(st, B * H);
  return s;
}

LstmSequenceGrads lstm_sequence_fp8_backward(const LstmSequence& s, const Quantized& w, const Tensor& dout,
                                             int64_t time_dim, const Tensor& dh, const Tensor& dc, bool need_dh0,
                                             const QuantSpec& spec, std::vector<QuantStats>& stats) {
  const char* op = "lstm_sequence_fp8 backward";
  MT_CHECK(s.acts.defined() && s.acts.dtype() == DType::f32, op,
           ": the sequence was run without saving its activations");
  const int64_t T = s.acts.size(0), B = s.acts.size(1), H = dh.size(1);
  check_weight_codes(op, w, H);
  const Shape douts = time_dim == 0 ? Shape{T, B, H} : Shape{B, T, H};
  MT_CHECK(dout.shape() == douts && dh.shape() == Shape({B, H}) && dc.shape() == Shape({B, H}) &&
               dout.dtype() == s.hs.dtype() && dh.dtype() == s.hs.dtype() && dc.dtype() == s.hs.dtype(),
           op, ": expected dout ", shape_str(douts), " and dh, dc [", B, ", ", H, "] in ", dtype_name(s.hs.dtype()),
           ", got ", dout.meta(), ", ", dh.meta(), ", ", dc.meta());
  LstmSequenceGrads g;
  g.dg = empty(time_dim == 0 ? Shape{T, B, 4 * H} : Shape{B, T, 4 * H}, dout.dtype());
  g.dh = dh.clone();  // the kernel's running gradients: fresh contiguous copies
  g.dc = dc.clone();
  std::vector<cpu::Fp8StepStats> st;
  cpu::lstm_layer_backward_fp8(s.acts, s.cs, w.codes, w.scale_inv.to_vector()[0], dout, time_dim, g.dh, g.dc, g.dg,
                               need_dh0, per_tensor_quant(op, spec, B, 4 * H), st);
  if (!need_dh0) g.dh = Tensor();
  stats = step_stats(st, B * 4 * H);
  return g;
}

namespace {

// gx and gh [B, 3H], h_prev [B, H] on one device, one floating dtype.
void check_gru_inputs(const char* op, const Tensor& gx, const Tensor& gh, const Tensor& h_prev) {
  ops::check_same(op, {&gx, &gh, &h_prev});
  ops::check_floating(op, gx);
  ops::check_dim(op, gx, 2, "gx [B, 3H]");
  ops::check_dim(op, gh, 2, "gh [B, 3H]");
  ops::check_dim(op, h_prev, 2, "h_prev [B, H]");
  const int64_t B = h_prev.size(0), H = h_prev.size(1);
  for (const Tensor* g : {&gx, &gh})
    MT_CHECK(g->shape() == Shape({B, 3 * H}), op, ": gx ", gx.meta(), " and gh ", gh.meta(), " must both be [", B, ", ",
             3 * H, "] (the r, z, n chunks) for h_prev ", h_prev.meta());
}

}  // namespace

Tensor gru_cell(const Tensor& gx, const Tensor& gh, const Tensor& h_prev) {
  check_gru_inputs("gru_cell", gx, gh, h_prev);
  Tensor h = empty(h_prev.shape(), h_prev.dtype(), h_prev.device());
  on_device(
      gx.device(), [&] { cpu::gru_cell(gx, gh, h_prev, h); }, [&] { cuda::gru_cell(gx, gh, h_prev, h); });
  return h;
}

GruCellGrads gru_cell_backward(const Tensor& gx, const Tensor& gh, const Tensor& h_prev, const Tensor& dh) {
  const char* op = "gru_cell backward";
  check_gru_inputs(op, gx, gh, h_prev);
  ops::check_same(op, {&h_prev, &dh});
  MT_CHECK(dh.shape() == h_prev.shape(), op, ": dh ", dh.meta(), " must match h_prev ", h_prev.meta());
  Tensor d_gx = empty(gx.shape(), gx.dtype(), gx.device());
  Tensor d_gh = empty(gh.shape(), gh.dtype(), gh.device());
  Tensor d_h_prev = empty(h_prev.shape(), h_prev.dtype(), h_prev.device());
  on_device(
      gx.device(), [&] { cpu::gru_cell_backward(gx, gh, h_prev, dh, d_gx, d_gh, d_h_prev); },
      [&] { cuda::gru_cell_backward(gx, gh, h_prev, dh, d_gx, d_gh, d_h_prev); });
  return {d_gx, d_gh, d_h_prev};
}

}  // namespace mixtape
