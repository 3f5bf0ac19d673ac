#!/usr/bin/env python3
"""mixtape and scripts/safetensors_np.py read each other's safetensors files and write the same bytes.

    test_safetensors_interop.py mixtape_to_numpy PROGRAM   PROGRAM writes its checkpoint; load() must
                                                           find CHECKPOINT in it, bit for bit
    test_safetensors_interop.py numpy_to_mixtape PROGRAM   save() writes CHECKPOINT; PROGRAM must
                                                           find its checkpoint in it, bit for bit
    test_safetensors_interop.py same_bytes PROGRAM         both write; the files must be equal, and
                                                           `safetensors_np.py compare` must say so

PROGRAM is tests/interop/safetensors_interop.cpp. CHECKPOINT below is its checkpoint written down
again, independently: bit patterns as numbers, values rounded by numpy's own conversions, and
the bfloat16 roundings (numpy has no bfloat16) worked out by hand. Exit status 0 when the
direction holds, 1 with every difference otherwise.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "safetensors_np.py"
sys.path.insert(0, str(SCRIPT.parent))
import safetensors_np as st  # noqa: E402


def from_bits(bits, dtype, shape):
    """An array of `dtype` holding exactly these bit patterns."""
    width = np.dtype(dtype).itemsize
    return np.array(bits, dtype=f"<u{width}").view(dtype).reshape(shape)


# f32 values that bfloat16 rounds (to nearest even) and the bits it must give, worked out by hand
# from each float's bits (upper half; the lower half decides, 0x8000 being the tie):
BF16_ROUNDED = [
    (1 / 3, 0x3EAB),                  # 0x3EAAAAAB: lower half 0xAAAB above the tie, rounds up
    (1 + 2**-8, 0x3F80),              # 0x3F808000: the tie, 0x3F80 is even
    (1 + 3 * 2**-8, 0x3F82),          # 0x3F818000: the tie, 0x3F81 is odd, rounds up
    (3.4028234663852886e38, 0x7F80),  # 0x7F7FFFFF: the largest float rounds up into inf
    (-1e-40, 0x8001),                 # 0x800116C2: a subnormal, above the tie below 0x0002
    (2**-149, 0x0000),                # 0x00000001: below the tie, to zero
]


def checkpoint():
    """safetensors_interop.cpp's checkpoint: {name: array or BF16}, {key: value}."""
    to_half = [0.1, 1 / 3, 65519, 65520, 2**-25, 3 * 2**-25, -1e-8, 1 + 2**-11]
    with np.errstate(over="ignore"):  # 65520 rounds to inf, as it must
        f16_from_f32 = np.array(to_half).astype(np.float32).astype(np.float16)
    tensors = {
        "i64": np.array([[0, -1, 1], [-(2**63), 2**63 - 1, 2**53 + 1]], dtype=np.int64),
        "f64.bits": from_bits([0x0000000000000000, 0x8000000000000000, 0x3FB999999999999A, 0x0000000000000001,
                               0x7FEFFFFFFFFFFFFF, 0xFFF0000000000000, 0x7FF8000000000001, 0xFFF0000000000001],
                              np.float64, [8]),
        "f32.bits": from_bits([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x7F800000,
                               0x7FC00000, 0xFFA00001], np.float32, [2, 4]),
        "f16.bits": from_bits([0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFC00, 0x7E00, 0x7C01], np.float16, [2, 4]),
        "bf16.bits": st.BF16(np.array([0x0000, 0x8000, 0x0001, 0x807F, 0x7F7F, 0x7F80, 0xFFC0, 0x7F81],
                                      dtype=np.uint16).reshape(2, 2, 2)),
        "f32.values": np.array([0.1, -3.25, 1e-40, 16777217.0, 3.4028235e38, -1e-50]).astype(np.float32).reshape(3, 2),
        "f16.from_f32": f16_from_f32,
        "f16.from_f64": np.array([0.1, 1 + 2**-11 + 2**-40, 65519.99, -(2**-24)]).astype(np.float16),
        "bf16.from_f32": st.BF16([bits for _, bits in BF16_ROUNDED]),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty.f16": np.zeros((0, 3), dtype=np.float16),
        "empty.i64": np.zeros(0, dtype=np.int64),
        "ünïcode name": np.array(-0.0),
        "e4m3.bits": st.F8(np.array([[0x00, 0x80, 0x01], [0x38, 0x7E, 0x7F]]), "F8_E4M3"),
        "e5m2.bits": st.F8([0x00, 0x80, 0x01, 0x3C, 0x7B, 0x7C, 0xFE], "F8_E5M2"),
    }
    metadata = {"format": "mixtape", "step": "120", "note": 'ünïcode "quoted" back\\slash\ttab\nnewline\x01 🎉',
                "empty": ""}
    return tensors, metadata


def data_bytes(t):
    return (t.bits if isinstance(t, (st.BF16, st.F8)) else t).tobytes()


def mismatches(got, want):
    """Every way (tensors, metadata) `got` differs from `want`: type, dtype, shape, bits, metadata."""
    (got_t, got_m), (want_t, want_m) = got, want
    out = []
    for name in sorted(set(got_t) | set(want_t)):
        g, w = got_t.get(name), want_t.get(name)
        if g is None or w is None:
            out.append(f"tensor {name!r}: {'missing' if g is None else 'not expected'}")
        elif type(g) is not type(w) or st.dtype_name(g) != st.dtype_name(w) or g.shape != w.shape:
            out.append(f"tensor {name!r}: {type(g).__name__} {getattr(g, 'dtype', 'bf16')} {g.shape}, "
                       f"expected {type(w).__name__} {getattr(w, 'dtype', 'bf16')} {w.shape}")
        elif data_bytes(g) != data_bytes(w):
            out.append(f"tensor {name!r}: {st.first_difference(g, w)}")
    if got_m != want_m:
        out.append(f"metadata {got_m!r}, expected {want_m!r}")
    return out


def run(*command):
    return subprocess.run([str(c) for c in command], capture_output=True, text=True)


def mixtape_to_numpy(program, tmp):
    path = tmp / "mixtape.safetensors"
    written = run(program, "write", path)
    if written.returncode != 0:
        return [f"{program} write failed: {written.stderr.strip()}"]
    failures = mismatches(st.load(path), checkpoint())
    # The script's bfloat16 rounding is mixtape's.
    rounded = st.BF16.from_float32([value for value, _ in BF16_ROUNDED]).bits
    if rounded.tolist() != [bits for _, bits in BF16_ROUNDED]:
        failures.append(f"BF16.from_float32 gives {[hex(b) for b in rounded]}")
    return failures


def numpy_to_mixtape(program, tmp):
    path = tmp / "numpy.safetensors"
    st.save(path, *checkpoint())
    checked = run(program, "check", path)
    if checked.returncode != 0:
        return [f"{program} check exits {checked.returncode}:\n{checked.stdout}{checked.stderr}"]
    return []


def same_bytes(program, tmp):
    ours, theirs = tmp / "numpy.safetensors", tmp / "mixtape.safetensors"
    st.save(ours, *checkpoint())
    written = run(program, "write", theirs)
    if written.returncode != 0:
        return [f"{program} write failed: {written.stderr.strip()}"]
    a, b = ours.read_bytes(), theirs.read_bytes()
    failures = []
    if a != b:
        at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        failures.append(f"the files differ from byte {at} on ({len(a)} and {len(b)} bytes); around it:\n"
                        f"  numpy:   {a[max(0, at - 40):at + 40]!r}\n  mixtape: {b[max(0, at - 40):at + 40]!r}")
    compared = run(sys.executable, SCRIPT, "compare", ours, theirs)
    if compared.returncode != 0:
        failures.append(f"safetensors_np.py compare exits {compared.returncode}: {compared.stdout}{compared.stderr}")
    hashes = [run(sys.executable, SCRIPT, "hash", path).stdout for path in (ours, theirs)]
    if hashes[0] != hashes[1] or not hashes[0]:
        failures.append(f"safetensors_np.py hash differs:\n{hashes[0]}\nvs\n{hashes[1]}")
    return failures


DIRECTIONS = {"mixtape_to_numpy": mixtape_to_numpy, "numpy_to_mixtape": numpy_to_mixtape, "same_bytes": same_bytes}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in DIRECTIONS:
        print(__doc__, file=sys.stderr)
        return 2
    direction, program = sys.argv[1], Path(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="mixtape-interop-") as tmp:
        failures = DIRECTIONS[direction](program, Path(tmp))
    for failure in failures:
        print(f"FAIL {direction}: {failure}")
    if not failures:
        print(f"ok {direction}: {len(checkpoint()[0])} tensors and {len(checkpoint()[1])} metadata entries agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
