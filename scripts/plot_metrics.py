#!/usr/bin/env python3
"""Plot mixtape JSON Lines metrics files (docs/design.md section 6) as PNG figures.

Each input file is one training run, labelled from its "summary" event ("precision" and
"scaling") or, without one, from the file name. Figures written to --out (each only when the
runs hold the events it needs; otherwise a message says why it was skipped):

  loss.png                   training loss per step ("step" events: "loss", or "loss_*" per
                             network), every run on one axis, raw (faint) and smoothed
  loss_scale.png             the loss scale per step ("step" events' "scale"), log2 axis;
                             skipped steps ("skipped": true) marked with a cross
  grad_hist_<run>_step<N>.png
                             per-layer histograms of gradient exponents at step N ("telemetry"
                             events), with the fp16 and bf16 representable ranges shaded and a
                             separate bar for zeros, as in Micikevicius et al., Figure 3
  grad_scales.png            per-layer gradient scale over training (telemetry "scale" per name),
                             as in Zhao et al., Figure 2; one panel per run
  node_scales_<run>.png      gradient scaling's per-node scales ("scales" events: the log2 scale
                             each node's output gradient carries, at every recomputation), node
                             on the y axis, step on the x axis, log2 scale as colour, like Zhao
                             et al., Figure 3b; steps with an overflow ("overflow" events) are
                             marked on top, with a cross where the step was skipped
  rounding.png               the backward pass's measured 16-bit underflow per sampled step
                             ("rounding" events of the rounding census), every run on one axis
  underflow.png              per-layer fraction of nonzero gradient values that would underflow
                             in the telemetry format, over training; one panel per run
  fp8_inputs.png             8-bit training: the share of each GEMM site's input operand that
                             saturated (top row) and that flushed to zero (bottom row) at every
                             step ("fp8_inputs" events of precision_lab --suite fp8), one column
                             per site, one line per configuration (its first seed)

Telemetry histograms count floor(log2|g|) of the stored gradient g = scale x true gradient
(autograd/telemetry.h, Note [What telemetry measures]), so the format ranges are fixed in those
units. With --unscaled the x axis is the true gradient's exponent instead, and the ranges move
left by log2(scale): what the format can hold at that scale.

  scripts/plot_metrics.py fp32.jsonl fp16.jsonl --out plots
  scripts/plot_metrics.py run.jsonl --out plots --step 500 --kind node --layers 'conv|fc'
"""
import argparse
import json
import math
import os
import re
import sys


def _import_pyplot():
    """matplotlib with the Agg backend; Debian's python3-matplotlib lives under /usr/bin/python3,
    so a different python3 first on PATH (pyenv, a venv) re-runs this script with that one."""
    try:
        import matplotlib
    except ImportError:
        system = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(system) and os.path.exists(system):
            os.execv(system, [system] + sys.argv)
        sys.exit("plot_metrics: matplotlib is missing (Debian: apt-get install python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# Base-2 exponent ranges of the 16-bit formats: [first, last] exponent e of values in [2^e, 2^(e+1)).
FORMATS = {
    # name: (subnormal exponents, normal exponents)
    "fp16": ((-24, -15), (-14, 15)),
    "bf16": ((-133, -127), (-126, 127)),
}


class Run:
    def __init__(self, path):
        self.path = path
        self.steps, self.telemetry, self.rounding, self.summary = [], [], [], None
        self.scales, self.overflows, self.fp8_inputs = [], [], []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError as e:
                    print(f"{path}:{n}: skipping a line that is not JSON ({e})", file=sys.stderr)
                    continue
                if not isinstance(ev, dict):
                    continue
                kind = ev.get("event")
                if kind == "step":
                    self.steps.append(ev)
                elif kind == "telemetry":
                    self.telemetry.append(ev)
                elif kind == "rounding":
                    self.rounding.append(ev)
                elif kind == "scales":
                    self.scales.append(ev)
                elif kind == "overflow":
                    self.overflows.append(ev)
                elif kind == "fp8_inputs":
                    self.fp8_inputs.append(ev)
                elif kind == "summary":
                    self.summary = ev
        stem = os.path.splitext(os.path.basename(path))[0]
        if self.summary and "config" in self.summary:
            self.label = str(self.summary["config"])
        elif self.summary and ("precision" in self.summary or "scaling" in self.summary):
            parts = [str(self.summary[k]) for k in ("precision", "scaling", "update_rounding") if k in self.summary]
            self.label = " / ".join(parts)
        else:
            self.label = stem
        self.stem = stem


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def smooth(values, window):
    if window <= 1:
        return values
    out, acc, q = [], 0.0, []
    for v in values:
        q.append(v)
        acc += v
        if len(q) > window:
            acc -= q.pop(0)
        out.append(acc / len(q))
    return out


def safe_name(s):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_") or "run"


def fig_path(out, name):
    return os.path.join(out, name)


# ---- loss and loss scale ------------------------------------------------------------------


def plot_loss(plt, runs, out, window):
    series = []  # (run, key, xs, ys)
    for r in runs:
        keys = sorted({k for s in r.steps for k in s if k == "loss" or k.startswith("loss_")})
        for k in keys:
            pts = [(s["step"], s[k]) for s in r.steps if number(s.get(k)) and number(s.get("step"))]
            if pts:
                series.append((r, k, [p[0] for p in pts], [p[1] for p in pts]))
    if not series:
        print("loss.png: no step events with a loss in any run; skipped")
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    styles = {}
    for r, k, xs, ys in series:
        color = r.color
        styles.setdefault(r.path, {})
        style = styles[r.path].setdefault(k, ["-", "--", ":", "-."][len(styles[r.path]) % 4])
        w = window if window > 0 else max(1, len(ys) // 50)
        label = r.label if k == "loss" else f"{r.label} {k[5:]}"
        if w > 1:
            ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.8)
            label += f" (mean of {w})"
        ax.plot(xs, smooth(ys, w), color=color, linestyle=style, linewidth=1.6, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    if all(y > 0 for *_, ys in series for y in ys):
        ax.set_yscale("log")
    ax.set_title("Training loss")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(fig_path(out, "loss.png"), dpi=110)
    plt.close(fig)
    print(f"wrote {fig_path(out, 'loss.png')}")


def plot_scale(plt, runs, out):
    have = [r for r in runs if any(number(s.get("scale")) and s["scale"] > 0 for s in r.steps)]
    if not have:
        print("loss_scale.png: no step events with a \"scale\" in any run; skipped")
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in have:
        pts = [(s["step"], math.log2(s["scale"])) for s in r.steps
               if number(s.get("step")) and number(s.get("scale")) and s["scale"] > 0]
        color = r.color
        ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", color=color, label=r.label)
        skipped = [(s["step"], math.log2(s["scale"])) for s in r.steps
                   if s.get("skipped") is True and number(s.get("scale")) and s["scale"] > 0 and number(s.get("step"))]
        if skipped:
            ax.plot([p[0] for p in skipped], [p[1] for p in skipped], "x", color=color, markersize=6,
                    label=f"{r.label}: skipped step ({len(skipped)})")
    ax.set_xlabel("step")
    ax.set_ylabel("log2(loss scale)")
    ax.set_title("Loss scale")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(fig_path(out, "loss_scale.png"), dpi=110)
    plt.close(fig)
    print(f"wrote {fig_path(out, 'loss_scale.png')}")


# ---- gradient scaling's per-node scales ----------------------------------------------------


def plot_node_scales(plt, runs, out):
    have = [r for r in runs if r.scales]
    if not have:
        print("node_scales_<run>.png: no \"scales\" events (run with --loss-scale gradient); skipped")
        return
    for r in have:
        series = {}  # (network, node label) -> [(step, log2 scale)]
        for ev in r.scales:
            if not number(ev.get("step")) or not isinstance(ev.get("log2_scale"), dict):
                continue
            net = ev.get("network", "")
            for name, v in ev["log2_scale"].items():
                if number(v):
                    series.setdefault((net, name), []).append((ev["step"], v))
        if not series:
            continue
        keys = sorted(series)  # tape position order: forward order of the nodes
        steps = sorted({s for pts in series.values() for s, _ in pts})
        col = {s: i for i, s in enumerate(steps)}
        rows = []
        for key in keys:
            last, row = math.nan, []
            pts = dict(series[key])
            for s in steps:  # a scale holds until the node recomputes it
                last = pts.get(s, last)
                row.append(last)
            rows.append(row)
        # An unrolled network (an LSTM over T steps) records one node per time step: nodes with the
        # same op, the same output and the same scales at every step become one row.
        names, grid, where = [], [], {}
        for key, row in zip(keys, rows):
            net, name = key
            pos, _, kind = name.partition(" ")
            sig = (net, kind, tuple(None if math.isnan(v) else v for v in row))
            if sig in where:
                entry = names[where[sig]]
                entry[3] = pos
                entry[4] += 1
                continue
            where[sig] = len(names)
            names.append([net, pos, kind, pos, 1])
            grid.append(row)
        labels = []
        for net, first, kind, last, count in names:
            label = f"{first}..{last} {kind} (x{count})" if count > 1 else f"{first} {kind}"
            labels.append(f"{net}: {label}" if net else label)
        fig, ax = plt.subplots(figsize=(10, 1.2 + 0.32 * len(names)))
        extent = (steps[0] - 0.5, steps[-1] + 0.5, len(names) - 0.5, -0.5)
        im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis", extent=extent)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xlabel("step")
        over = [ev for ev in r.overflows if number(ev.get("step"))]
        if over:
            rec = [ev["step"] for ev in over if not ev.get("skipped")]
            skip = [ev["step"] for ev in over if ev.get("skipped")]
            if rec:
                ax.plot(rec, [-0.5] * len(rec), "v", color="orange", markersize=5, clip_on=False,
                        label=f"overflow recomputed by the guard ({len(rec)})")
            if skip:
                ax.plot(skip, [-0.5] * len(skip), "x", color="red", markersize=7, clip_on=False,
                        label=f"overflow, step skipped ({len(skip)})")
            ax.legend(fontsize=7, loc="lower right")
        cb = fig.colorbar(im, ax=ax, pad=0.01)
        cb.set_label("log2(scale)")
        ax.set_title(f"Per-node gradient scales: {r.label}")
        fig.tight_layout()
        path = fig_path(out, f"node_scales_{safe_name(r.label)}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"wrote {path}")


# ---- telemetry ----------------------------------------------------------------------------


def plot_rounding(plt, runs, out):
    have = [r for r in runs if any(number(ev.get("underflow_rate")) and ev.get("nonzero") for ev in r.rounding)]
    if not have:
        print("rounding.png: no \"rounding\" events with 16-bit stores in any run; skipped")
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in have:
        pts = [(ev["step"], 100.0 * ev["underflow_rate"]) for ev in r.rounding
               if number(ev.get("underflow_rate")) and ev.get("nonzero")]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", color=r.color, label=r.label)
    ax.set_xlabel("step")
    ax.set_ylabel("% of nonzero backward values -> 0")
    ax.set_title("Backward-pass underflow measured where values are rounded to 16 bits")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = fig_path(out, "rounding.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def plot_fp8_inputs(plt, runs, out, max_sites=4):
    firsts, seen = [], set()
    for r in runs:  # one line per configuration: its first seed
        config = r.summary.get("config", r.label) if r.summary else r.label
        if r.fp8_inputs and config not in seen:
            seen.add(config)
            firsts.append((config, r))
    if not firsts:
        print("fp8_inputs.png: no \"fp8_inputs\" events (precision_lab --suite fp8 writes them); skipped")
        return
    sites = sorted({(s["site"], s.get("op", "")) for _, r in firsts for ev in r.fp8_inputs
                    for s in ev.get("sites", [])})[:max_sites]
    fig, axes = plt.subplots(2, len(sites), figsize=(4 * len(sites), 6), squeeze=False, sharex=True)
    for col, (site, op) in enumerate(sites):
        for row, field in enumerate(("saturated", "flushed")):
            ax = axes[row][col]
            for config, r in firsts:
                xs, ys = [], []
                for ev in r.fp8_inputs:
                    for s in ev.get("sites", []):
                        if s.get("site") == site and s.get("count"):
                            xs.append(ev["step"])
                            ys.append(100.0 * s.get(field, 0) / s["count"])
                ax.plot(xs, ys, color=r.color, label=config, linewidth=1)
            ax.set_title(f"{op} #{site} input: % {field}", fontsize=9)
            ax.grid(alpha=0.3)
            if row == 1:
                ax.set_xlabel("step")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("8-bit input operands per GEMM site")
    fig.tight_layout()
    path = fig_path(out, "fp8_inputs.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def select(records, kind, layers):
    """Telemetry records of the wanted kind (falling back to the other kind when there are none)
    whose name matches the --layers pattern."""
    pat = re.compile(layers) if layers else None
    def keep(ev, k):
        return (k == "all" or ev.get("kind") == k) and isinstance(ev.get("name"), str) and \
            (pat is None or pat.search(ev["name"]))
    chosen = [ev for ev in records if keep(ev, kind)]
    if not chosen and kind != "all":
        other = "node" if kind == "param" else "param"
        chosen = [ev for ev in records if keep(ev, other)]
    return chosen


def exponent_counts(ev):
    """{exponent: count} from a record's histogram: sparse [[e, count], ...] pairs, or a dense
    list of counts starting at "hist_lo"."""
    h = ev.get("hist")
    if not isinstance(h, list) or not h:
        return {}
    if all(isinstance(p, list) and len(p) == 2 for p in h):
        return {int(e): int(c) for e, c in h if c}
    lo = ev.get("hist_lo")
    if number(lo) and all(number(c) for c in h):
        return {int(lo) + k: int(c) for k, c in enumerate(h) if c}
    return {}


def shade_formats(ax, shift, ylim_top):
    """fp16 ranges as full-height bands, bf16 as a strip along the top (it spans ~260 exponents)."""
    (s_lo, s_hi), (n_lo, n_hi) = FORMATS["fp16"]
    ax.axvspan(n_lo + shift, n_hi + 1 + shift, color="tab:green", alpha=0.12, linewidth=0)
    ax.axvspan(s_lo + shift, s_hi + 1 + shift, color="tab:olive", alpha=0.18, linewidth=0)
    # f16 rounds |x| <= 2^-25 to zero and |x| >= 65520 (just below 2^16) to inf.
    ax.axvline(-25 + shift, color="tab:red", linestyle="--", linewidth=0.9)
    ax.axvline(16 + shift, color="tab:red", linestyle=":", linewidth=0.9)
    (bs_lo, bs_hi), (bn_lo, bn_hi) = FORMATS["bf16"]
    ax.axvspan(bn_lo + shift, bn_hi + 1 + shift, ymin=0.93, ymax=1.0, color="tab:blue", alpha=0.35, linewidth=0)
    ax.axvspan(bs_lo + shift, bs_hi + 1 + shift, ymin=0.93, ymax=1.0, color="tab:cyan", alpha=0.35, linewidth=0)


def plot_histograms(plt, runs, out, step, kind, layers, max_layers, unscaled):
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D
    wrote = False
    for r in runs:
        recs = [ev for ev in r.telemetry if number(ev.get("step")) and exponent_counts(ev)]
        if not recs:
            print(f"grad_hist: run '{r.label}' has no telemetry events with histograms; skipped")
            continue
        steps = sorted({ev["step"] for ev in recs})
        s = step if step is not None else steps[-1]
        if s not in steps:
            near = min(steps, key=lambda t: abs(t - s))
            print(f"grad_hist: run '{r.label}' has no telemetry at step {s}; using step {near}")
            s = near
        chosen = select([ev for ev in recs if ev["step"] == s], kind, layers)
        if not chosen:
            print(f"grad_hist: run '{r.label}' step {s}: no records match; skipped")
            continue
        if len(chosen) > max_layers:
            print(f"grad_hist: run '{r.label}' step {s}: showing the first {max_layers} of {len(chosen)} "
                  f"records (use --max-layers or --layers)")
            chosen = chosen[:max_layers]
        ncols = min(3, len(chosen))
        nrows = (len(chosen) + ncols - 1) // ncols
        fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.3 * nrows + 0.9), squeeze=False)
        for ax in axes.flat[len(chosen):]:
            ax.set_visible(False)
        for ax, ev in zip(axes.flat, chosen):
            counts = exponent_counts(ev)
            numel = ev.get("numel") if number(ev.get("numel")) and ev["numel"] > 0 else sum(counts.values())
            scale = ev.get("scale") if number(ev.get("scale")) and ev["scale"] > 0 else 1.0
            shift = -math.log2(scale) if unscaled else 0.0
            xs = [e + shift for e in sorted(counts)]
            fr = [counts[e] / numel for e in sorted(counts)]
            nonzero = ev.get("nonzero") if number(ev.get("nonzero")) else sum(counts.values())
            overflow = ev.get("overflow") if number(ev.get("overflow")) else 0
            zeros = max(0, numel - nonzero - overflow) / numel
            lo = min(min(xs), -24 + shift) - 3
            hi = max(max(xs), 15 + shift) + 3
            shade_formats(ax, shift, 1.0)
            ax.bar(xs, fr, width=1.0, align="edge", color="tab:gray", edgecolor="black", linewidth=0.3)
            # Zeros get a bar of their own, left of everything (exponent -inf).
            zx = lo - 1
            ax.bar([zx], [zeros], width=1.0, align="edge", color="black")
            ax.text(zx + 0.5, zeros, "0", ha="center", va="bottom", fontsize=7)
            ax.set_xlim(zx - 1, hi)
            top = max(fr + [zeros]) * 1.18 or 1.0
            ax.set_ylim(0, top)
            lab = ev["name"] + (f"  (node: {ev.get('op', '?')})" if ev.get("kind") == "node" else "")
            extra = f"{ev.get('dtype', '?')}, scale 2^{math.log2(scale):g}"
            if number(ev.get("underflow")):
                extra += f", {ev.get('format', 'f16')} underflow {100 * ev['underflow']:.2g}%"
            if overflow:
                extra += f", overflow {overflow}"
            ax.set_title(f"{lab}\n{extra}", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, axis="y", alpha=0.3)
        xl = "log2|true gradient| (bin e: [2^e, 2^(e+1)))" if unscaled else \
            "log2|stored gradient| = log2|scale x gradient| (bin e: [2^e, 2^(e+1)))"
        fig.supxlabel(xl, fontsize=9)
        fig.supylabel("fraction of values", fontsize=9)
        handles = [Patch(color="tab:green", alpha=0.3, label="fp16 normal"),
                   Patch(color="tab:olive", alpha=0.4, label="fp16 subnormal"),
                   Line2D([], [], color="tab:red", linestyle="--", label="fp16: 0 below"),
                   Line2D([], [], color="tab:red", linestyle=":", label="fp16: inf above"),
                   Patch(color="tab:blue", alpha=0.5, label="bf16 normal (top strip)"),
                   Patch(color="tab:cyan", alpha=0.5, label="bf16 subnormal (top strip)"),
                   Patch(color="black", label="zeros")]
        where = " (ranges shifted by -log2(scale))" if unscaled else ""
        fig.suptitle(f"Gradient exponents, {r.label}, step {s}{where}", fontsize=11)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
        fig.legend(handles=handles, loc="upper center", ncol=7, fontsize=7, frameon=False,
                   bbox_to_anchor=(0.5, 1 - 0.38 / fig.get_figheight()))
        name = f"grad_hist_{safe_name(r.label)}_step{s}.png"
        fig.savefig(fig_path(out, name), dpi=110)
        plt.close(fig)
        print(f"wrote {fig_path(out, name)}")
        wrote = True
    return wrote


def per_name_series(run, kind, layers, field, transform):
    series = {}
    for ev in select(run.telemetry, kind, layers):
        v = ev.get(field)
        if number(ev.get("step")) and number(v):
            t = transform(v)
            if t is not None:
                series.setdefault(ev["name"], {})[ev["step"]] = t  # one point per name and step
    return series


def plot_per_name(plt, runs, out, kind, layers, max_layers, field, transform, fname, ylabel, title, steps=False):
    from matplotlib.ticker import MaxNLocator
    have = [(r, per_name_series(r, kind, layers, field, transform)) for r in runs]
    have = [(r, s) for r, s in have if s]
    if not have:
        print(f"{fname}: no telemetry events with \"{field}\" in any run; skipped")
        return
    fig, axes = plt.subplots(len(have), 1, figsize=(10.5, 3.4 * len(have)), squeeze=False)
    for ax, (r, series) in zip(axes[:, 0], have):
        names = list(series)
        if len(names) > max_layers:
            print(f"{fname}: run '{r.label}': showing the first {max_layers} of {len(names)} names")
            names = names[:max_layers]
        for i, n in enumerate(names):
            pts = sorted(series[n].items())
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=2.5, linewidth=1.2,
                    color=f"C{i % 10}", linestyle="-" if i < 10 else "--", label=n,
                    drawstyle="steps-post" if steps else "default")
        shared = len(names) > 1 and all(series[n] == series[names[0]] for n in names)
        ax.set_title(f"{title}: {r.label}" + (" (every layer shares one value)" if shared else ""), fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if steps:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(fig_path(out, fname), dpi=110)
    plt.close(fig)
    print(f"wrote {fig_path(out, fname)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="JSON Lines metrics files, one per run")
    ap.add_argument("--out", "-o", default="plots", help="output folder (created; default: plots)")
    ap.add_argument("--step", type=int, default=None,
                    help="step of the gradient histograms (default: each run's last telemetry step)")
    ap.add_argument("--kind", choices=["param", "node", "all"], default="param",
                    help="telemetry records to plot: parameter gradients (default), node gradients, or both")
    ap.add_argument("--layers", default=None, help="regular expression the telemetry names must match")
    ap.add_argument("--max-layers", type=int, default=12, help="at most this many layers per figure (default 12)")
    ap.add_argument("--smooth", type=int, default=0,
                    help="moving-average window of the loss curves (default: 1/50 of the run, 1 = raw)")
    ap.add_argument("--unscaled", action="store_true",
                    help="histograms over the true gradient's exponent (stored exponent - log2 scale)")
    args = ap.parse_args()

    runs = []
    for p in args.files:
        try:
            runs.append(Run(p))
        except OSError as e:
            print(f"plot_metrics: cannot read {p}: {e}", file=sys.stderr)
            return 1
    seen = {}
    for r in runs:  # two runs with one label get their file names too
        seen[r.label] = seen.get(r.label, 0) + 1
    for i, r in enumerate(runs):
        if seen[r.label] > 1:
            r.label = f"{r.label} ({r.stem})"
        r.color = f"C{i % 10}"  # one color per run across the figures

    plt = _import_pyplot()
    os.makedirs(args.out, exist_ok=True)
    plot_loss(plt, runs, args.out, args.smooth)
    plot_scale(plt, runs, args.out)
    plot_rounding(plt, runs, args.out)
    plot_node_scales(plt, runs, args.out)
    plot_fp8_inputs(plt, runs, args.out)
    plot_histograms(plt, runs, args.out, args.step, args.kind, args.layers, args.max_layers, args.unscaled)
    plot_per_name(plt, runs, args.out, args.kind, args.layers, args.max_layers, "scale",
                  lambda v: math.log2(v) if v > 0 else None, "grad_scales.png", "log2(gradient scale)",
                  "Per-layer gradient scale", steps=True)
    formats = sorted({str(ev["format"]) for r in runs for ev in r.telemetry if "format" in ev}) or ["f16"]
    plot_per_name(plt, runs, args.out, args.kind, args.layers, args.max_layers, "underflow",
                  lambda v: 100.0 * v, "underflow.png", "% of nonzero values -> 0",
                  f"Per-layer {'/'.join(formats)} underflow")
    return 0


if __name__ == "__main__":
    sys.exit(main())
