#!/usr/bin/env python3
"""Validate a mixtape JSON Lines metrics file.

Every line must be a JSON object with a string "event"; "step" events need a numeric "loss"
(or per-network losses named "loss_*"). With --loss-falls, the mean training loss over the
last quarter of the step events must be below the mean over the first quarter.
"""
import argparse
import json
import math
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("path")
    ap.add_argument("--loss-falls", action="store_true", help="require the training loss to fall")
    ap.add_argument("--loss-key", default="loss", help="which step field to compare (default: loss)")
    args = ap.parse_args()

    steps = []
    with open(args.path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                ev = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"{args.path}:{n}: not JSON: {e}", file=sys.stderr)
                return 1
            if not isinstance(ev, dict) or not isinstance(ev.get("event"), str):
                print(f"{args.path}:{n}: expected an object with a string 'event'", file=sys.stderr)
                return 1
            if ev["event"] == "step":
                losses = {k: v for k, v in ev.items() if k == "loss" or k.startswith("loss_")}
                if not losses or not all(isinstance(v, (int, float)) for v in losses.values()):
                    print(f"{args.path}:{n}: step event without a numeric loss", file=sys.stderr)
                    return 1
                steps.append(ev)
    if not steps:
        print(f"{args.path}: no step events", file=sys.stderr)
        return 1
    print(f"{args.path}: {len(steps)} step events, valid JSON Lines")
    if args.loss_falls:
        vals = [s[args.loss_key] for s in steps if args.loss_key in s]
        q = max(1, len(vals) // 4)
        first, last = sum(vals[:q]) / q, sum(vals[-q:]) / q
        print(f"mean {args.loss_key}: first quarter {first:.4f}, last quarter {last:.4f}")
        if not (math.isfinite(last) and last < first):
            print("the training loss did not fall", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
