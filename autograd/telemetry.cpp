#include "autograd/telemetry.h"

#include <nlohmann/json.hpp>
#include <ostream>

namespace mixtape {

double TelemetryRecord::underflow_rate() const {
  return stats.nonzero > 0 ? double(stats.underflow) / double(stats.nonzero) : 0.0;
}

double TelemetryRecord::subnormal_rate() const {
  return stats.nonzero > 0 ? double(stats.subnormal) / double(stats.nonzero) : 0.0;
}

Telemetry::Telemetry(Options options) : options_(options) {
  MT_CHECK(options_.every_n_steps >= 0, "Telemetry: every_n_steps must be >= 0 (0 = never), got ",
           options_.every_n_steps);
  MT_CHECK(is_16bit(options_.format), "Telemetry: the target format must be f16 or bf16, got ",
           dtype_name(options_.format));
  MT_CHECK(options_.hist_lo <= options_.hist_hi && options_.hist_hi - options_.hist_lo < 4096,
           "Telemetry: exponent histogram range [", options_.hist_lo, ", ", options_.hist_hi,
           "] must be non-empty and hold at most 4096 bins");
}

bool Telemetry::records_step(int64_t step) const {
  return options_.every_n_steps > 0 && step % options_.every_n_steps == 0;
}

bool Telemetry::begin_step(int64_t step, Tape& tape) {
  clear();
  const bool on = records_step(step);
  if (on) tape.set_observer(this);
  else if (tape.observer() == this) tape.set_observer(nullptr);
  return on;
}

void Telemetry::clear() {
  records_.clear();
  last_node_ = nullptr;
  node_index_ = -1;
  unnamed_leaves_ = 0;
}

TelemetryRecord Telemetry::measure(const ScaledGrad& g) const {
  TelemetryRecord r;
  r.scale = g.scale;
  r.dtype = g.g.dtype();
  r.shape = g.g.shape();
  r.stats = grad_telemetry(g.g, options_.format, options_.histogram, options_.hist_lo, options_.hist_hi);
  return r;
}

void Telemetry::on_node_grad(const Node& node, size_t input, const ScaledGrad& g) {
  // The tape reports a node's inputs one after another, so a new pointer is the next node.
  if (&node != last_node_) {
    last_node_ = &node;
    ++node_index_;
    node_measured_ = RoundingCensus::is_open();
    if (node_measured_) {
      if (RoundingCensus::generation() != census_generation_) {  // a new census: counts restarted at 0
        census_generation_ = RoundingCensus::generation();
        census_mark_ = {};
      }
      const RoundingCounts now = RoundingCensus::current();
      node_rounding_ = now - census_mark_;
      census_mark_ = now;
    }
  }
  if (!options_.nodes) return;
  TelemetryRecord r = measure(g);
  r.kind = TelemetryRecord::Kind::node;
  r.op = op_name(node.op);
  r.node = node_index_;
  r.input = int64_t(input);
  r.measured = node_measured_;
  r.rounding = node_rounding_;
  const std::string& var = node.inputs[input]->name;
  r.name = !var.empty() ? var : r.op + "#" + std::to_string(node_index_) + ":" + std::to_string(input);
  records_.push_back(std::move(r));
}

void Telemetry::on_leaf_grad(const VarImpl& leaf, const ScaledGrad& g) {
  // Leaves are reported after every node of the pass: a node allocated by a later pass may
  // reuse the address of this pass's last node, so forget it (node positions keep counting).
  last_node_ = nullptr;
  const int64_t j = leaf.name.empty() ? unnamed_leaves_++ : -1;
  if (!options_.params) return;
  TelemetryRecord r = measure(g);
  r.kind = TelemetryRecord::Kind::param;
  r.name = !leaf.name.empty() ? leaf.name : "param#" + std::to_string(j);
  records_.push_back(std::move(r));
}

std::vector<std::string> Telemetry::json_lines(int64_t step, const std::string& name_prefix) const {
  std::vector<std::string> lines;
  lines.reserve(records_.size());
  for (const TelemetryRecord& r : records_) {
    nlohmann::ordered_json j;
    j["event"] = "telemetry";
    j["step"] = step;
    j["name"] = name_prefix + r.name;
    const bool node = r.kind == TelemetryRecord::Kind::node;
    j["kind"] = node ? "node" : "param";
    if (node) {
      j["op"] = r.op;
      j["node"] = r.node;
      j["input"] = r.input;
    }
    j["dtype"] = dtype_name(r.dtype);
    j["format"] = dtype_name(options_.format);
    j["scale"] = double(r.scale);
    j["numel"] = r.stats.numel;
    j["nonzero"] = r.stats.nonzero;
    j["underflow"] = r.underflow_rate();
    j["subnormal"] = r.subnormal_rate();
    j["overflow"] = r.stats.overflow;
    j["max_abs"] = r.stats.max_abs;
    if (r.measured) {
      j["rounded"] = r.rounding.rounded;
      j["measured_underflow"] = r.rounding.underflow_rate();
      j["measured_subnormal"] = r.rounding.subnormal_rate();
    }
    if (!r.stats.hist.empty()) {
      j["hist_lo"] = r.stats.hist_lo;
      j["hist_hi"] = r.stats.hist_hi;
      nlohmann::json hist = nlohmann::json::array();
      for (size_t k = 0; k < r.stats.hist.size(); ++k)
        if (r.stats.hist[k] != 0) hist.push_back({r.stats.hist_lo + int64_t(k), r.stats.hist[k]});
      j["hist"] = std::move(hist);
    }
    lines.push_back(j.dump());
  }
  return lines;
}

void Telemetry::write_jsonl(std::ostream& os, int64_t step) const {
  for (const std::string& line : json_lines(step)) os << line << '\n';
  MT_CHECK(os.good(), "Telemetry: writing the metrics stream failed at step ", step);
}

void Telemetry::write_jsonl(const std::function<void(std::string_view)>& sink, int64_t step) const {
  for (const std::string& line : json_lines(step)) sink(line);
}

}  // namespace mixtape
