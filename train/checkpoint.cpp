#include "train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "tensor/safetensors.h"
#include "tensor/state_io.h"

namespace mixtape::train {

void add_precision_identity(RunIdentity& id, const PrecisionTrainer& t, const std::string& prefix) {
  id.emplace_back(prefix + "precision", nn::precision_name(t.precision()));
  id.emplace_back(prefix + "loss_scale", t.options().loss_scale.str());
  if (nn::is_pure(t.precision()))
    id.emplace_back(prefix + "update_rounding", update_rounding_name(t.options().rounding));
  id.emplace_back(prefix + "compute_dtype", dtype_name(t.compute_dtype()));
  id.emplace_back(prefix + "optimizer", t.optimizer().name());
  if (t.options().loss_scale.kind == LossScaleSpec::Kind::gradient)
    id.emplace_back(prefix + "grad_scale_period", std::to_string(t.options().gradient_scaling.update_period));
}

void add_training_state(TensorDict& ckpt, const std::string& prefix, const nn::Module& model,
                        const PrecisionTrainer& trainer, const LRScheduler* sched) {
  ckpt.merge(prefix + "model.", model.state_dict());
  ckpt.merge(prefix + "rng.", model.generator_state());
  ckpt.merge(prefix + "trainer.", trainer.state_dict());
  if (sched) ckpt.merge(prefix + "sched.", sched->state_dict());
}

void load_training_state(const TensorDict& ckpt, const std::string& prefix, nn::Module& model,
                         PrecisionTrainer& trainer, LRScheduler* sched) {
  try {
    model.load_state_dict(ckpt.sub(prefix + "model."));
    model.load_generator_state(ckpt.sub(prefix + "rng."));
    trainer.load_state_dict(ckpt.sub(prefix + "trainer."));
    if (sched) sched->load_state_dict(ckpt.sub(prefix + "sched."));
  } catch (const Error& e) {
    if (prefix.empty()) throw;
    // which of the checkpoint's networks (dcgan: "generator.", "discriminator.") the entry belongs to
    throw Error(detail::cat("checkpoint entries '", prefix, "*': ", e.what()));
  }
}

std::vector<std::string> training_state_prefixes(const std::string& prefix, bool sched) {
  std::vector<std::string> p = {prefix + "model.", prefix + "rng.", prefix + "trainer."};
  if (sched) p.push_back(prefix + "sched.");
  return p;
}

void check_all_read(const TensorDict& ckpt, const std::vector<std::string>& prefixes,
                    const std::vector<std::string>& names, const std::string& path) {
  for (const auto& [name, t] : ckpt) {
    bool read = std::find(names.begin(), names.end(), name) != names.end();
    for (const std::string& p : prefixes) read = read || name.starts_with(p);
    if (read) continue;
    std::string parts;
    for (const std::string& p : prefixes) parts += (parts.empty() ? "" : ", ") + p + "*";
    for (const std::string& n : names) parts += (parts.empty() ? "" : ", ") + n;
    throw Error(detail::cat("--resume: ", path, " holds the tensor '", name, "' ", t.meta(),
                            ", which no part of this run reads (it reads ", parts,
                            "): the file is not a checkpoint of this program, or it was changed"));
  }
}

void add_generator(TensorDict& ckpt, const std::string& key, const Generator& g) {
  ckpt.set_meta(key + ".seed", std::to_string(g.seed()));
  ckpt.set_meta(key + ".offset", std::to_string(g.offset()));
}

void load_generator(const TensorDict& ckpt, const std::string& key, Generator& g) {
  g.set_state(state_io::get_uint(ckpt, key + ".seed", "checkpoint"),
              state_io::get_uint(ckpt, key + ".offset", "checkpoint"));
}

int64_t progress_int(const TensorDict& ckpt, const std::string& key) {
  return state_io::get_int(ckpt, "progress." + key, "checkpoint");
}

double progress_double(const TensorDict& ckpt, const std::string& key) {
  return state_io::get_double(ckpt, "progress." + key, "checkpoint");
}

int64_t Checkpointer::steps_until_due(int64_t step, int64_t last) const {
  const int64_t due_step = every_ > 0 ? (step + every_ - 1) / every_ * every_ : last;
  return std::min(due_step, last) - step + 1;
}

bool Checkpointer::resuming() const {
  std::error_code ec;
  return resume_ && std::filesystem::exists(path_, ec);
}

std::optional<TensorDict> Checkpointer::resume_state(const RunIdentity& id) const {
  if (!resume_) return std::nullopt;
  if (!resuming()) {
    std::printf("resume: no checkpoint at %s yet; starting a new run\n", path_.c_str());
    return std::nullopt;
  }
  TensorDict ckpt = load_safetensors(path_);  // checks its checksums (Note [Checksums])
  if (!ckpt.verified)
    std::printf(
        "resume: %s carries no checksums (written by another program, or by mixtape before it wrote "
        "them): its contents could not be verified\n",
        path_.c_str());
  std::string differences;
  const std::string saved_ranks = ckpt.has_meta("run.ranks") ? ckpt.meta("run.ranks") : std::string("1");
  if (saved_ranks != std::to_string(ranks_))
    differences += "\n  ranks: the checkpoint was saved by " + saved_ranks + ", this run has " + std::to_string(ranks_);
  for (const auto& [key, value] : id) {
    const std::string saved = ckpt.has_meta("run." + key) ? ckpt.meta("run." + key) : std::string("(none)");
    if (saved != value) differences += "\n  " + key + ": the checkpoint has '" + saved + "', this run '" + value + "'";
  }
  MT_CHECK(differences.empty(), "--resume: ", path_, " belongs to another run:", differences,
           "\n(give another --checkpoint to start a new run, or the flags the checkpoint was trained with)");
  return ckpt;
}

void Checkpointer::check_room(const TensorDict& ckpt) const {
  if (rank_ != 0) return;
  uint64_t bytes = uint64_t(1) << 16;  // the header and the metadata, generously
  for (const auto& [name, t] : ckpt) bytes += uint64_t(t.numel()) * dtype_size(t.dtype());
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  const std::filesystem::space_info room = std::filesystem::space(parent.empty() ? "." : parent, ec);
  if (ec || room.available >= bytes) return;
  std::fprintf(stderr,
               "warning: --checkpoint %s: its folder has %llu bytes free, and a checkpoint of this run takes "
               "about %llu: the saves will fail unless space is freed\n",
               path_.c_str(), (unsigned long long)room.available, (unsigned long long)bytes);
}

void Checkpointer::save(TensorDict ckpt, const RunIdentity& id) const {
  if (rank_ != 0) return;
  for (const auto& [key, value] : id) ckpt.set_meta("run." + key, value);
  if (ranks_ > 1) ckpt.set_meta("run.ranks", std::to_string(ranks_));
  save_safetensors(path_, ckpt);
}

}  // namespace mixtape::train
