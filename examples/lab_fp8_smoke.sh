#!/usr/bin/env bash
# lab_fp8_smoke.sh PYTHON CHECKER PRECISION_LAB: runs the precision lab's fp8 suite for a few steps
# per run (one seed; the formats, outlier16 and spike regimes, so both models; --smoke spikes every
# third step) and checks its outputs: every metrics file is valid JSON Lines, lab.json has a row
# per regime, model and configuration with the 8-bit operands' counts, the outlier channel and the
# spike leave bf16 bit for bit as it was (Note [Operands rescaled exactly]), the spike leaves
# current scaling as it was and saturates delayed scaling's input, the outlier flushes much of the
# per-tensor input of the linear layer it sits in and much less of DeepSeek-style blocks', and the
# runs wrote per-site "fp8_inputs" events.
set -euo pipefail
python=$1 checker=$2 exe=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$exe" --suite fp8 --smoke --seeds 1 --max-steps 6 --regimes formats,outlier16,spike \
  --only bf16,fp8-current,fp8-current-e4m3,fp8-block,fp8-delayed-recent --out-dir "$dir/lab"
for f in "$dir"/lab/*/*.jsonl; do "$python" "$checker" "$f" --loss-key loss >/dev/null; done
"$python" - "$dir/lab" <<'PY'
import json, os, sys
lab = sys.argv[1]
rows = json.load(open(os.path.join(lab, "lab.json"), encoding="utf-8"))
want = {("formats", m, c) for m in ("cnn", "char_lstm") for c in ("bf16", "fp8-current", "fp8-current-e4m3")}
want |= {("outlier16", "cnn", c) for c in ("bf16", "fp8-current", "fp8-block")}
want |= {("spike", "cnn", c) for c in ("bf16", "fp8-current", "fp8-delayed-recent")}
got = {(r.get("regime"), r.get("model"), r["config"]): r for r in rows}
if set(got) != want:
    sys.exit(f"lab.json: expected {sorted(want)}, got {sorted(got)}")
for key, r in got.items():
    if key[2].startswith("fp8"):
        if not all(r.get(f"fp8_{role}", {}).get("count", 0) > 0 for role in ("input", "weight", "grad")):
            sys.exit(f"lab.json: {key} lacks the 8-bit operands' counts")
    if key[1] == "char_lstm" and not isinstance(r.get("val_bpc"), float):
        sys.exit(f"lab.json: {key} lacks the validation bpc")
def same(a, b, what):
    x, y = got[a], got[b]
    if (x["test_accuracy"], x["train_loss"]) != (y["test_accuracy"], y["train_loss"]):
        sys.exit(f"{what}: {x['test_accuracy']} / {x['train_loss']} against {y['test_accuracy']} / {y['train_loss']}")
same(("formats", "cnn", "bf16"), ("outlier16", "cnn", "bf16"), "bf16 changed with the outlier channel")
same(("formats", "cnn", "bf16"), ("spike", "cnn", "bf16"), "bf16 changed with the spike")
same(("formats", "cnn", "fp8-current"), ("spike", "cnn", "fp8-current"), "current scaling changed with the spike")
events = [json.loads(l) for l in open(os.path.join(lab, "spike-cnn", "fp8-delayed-recent-seed0.jsonl"), encoding="utf-8")]
spiked = [s for e in events if e.get("event") == "fp8_inputs" and e["step"] % 3 == 0 for s in e["sites"]
          if s["op"] == "linear" and s["saturated"] > 0.5 * s["count"]]
if len(spiked) != 2:  # steps 3 and 6
    sys.exit(f"spike: delayed scaling saturated most of the linear input on {len(spiked)} spike steps, not 2")
def linear_flushed(r):
    site = [s for s in r["fp8_input_sites"] if s["op"] == "linear"][0]
    return site["flushed"] / site["count"]
current, block = linear_flushed(got[("outlier16", "cnn", "fp8-current")]), linear_flushed(got[("outlier16", "cnn", "fp8-block")])
if not (current > 0.05 and current > 2 * block):
    sys.exit(f"outlier16: the first linear layer's inputs flushed {current:.2%} per tensor and {block:.2%} in blocks")
md = open(os.path.join(lab, "lab.md"), encoding="utf-8").read()
for table in ("### formats (cnn)", "### formats (char_lstm)", "### outlier16 (cnn)", "inputs flushed most at"):
    if table not in md:
        sys.exit(f"lab.md lacks '{table}'")
events = [json.loads(l) for l in open(os.path.join(lab, "outlier16-cnn", "fp8-current-seed0.jsonl"), encoding="utf-8")]
if not any(e.get("event") == "fp8_inputs" and e.get("sites") for e in events):
    sys.exit("outlier16/fp8-current wrote no fp8_inputs events")
print(f"fp8 suite smoke: {len(rows)} runs; outlier16 linear inputs flushed {current:.1%} per tensor, {block:.1%} in blocks")
PY
