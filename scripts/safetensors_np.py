#!/usr/bin/env python3
"""Read, write, hash and compare safetensors files with nothing but the standard library and numpy.

The format is the one mixtape writes and reads (tensor/safetensors.h):

  [8 bytes]  N, the header length, unsigned little-endian
  [N bytes]  a UTF-8 JSON object, padded with spaces to a multiple of 8:
             {"__metadata__": {"key": "value", ...},
              "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
  [rest]     the tensors' bytes, little-endian, row-major; sorted by offset the tensors tile
             this buffer exactly, and each holds numel * element size bytes

Dtypes: F32, F64, F16, BF16, I64, F8_E4M3, F8_E5M2. numpy has no bfloat16, so a BF16 tensor is a
`BF16`: its raw bits as a uint16 array (`.bits`), with `.to_float32()` for the values (exact: every
bfloat16 is a float32); an 8-bit float tensor is an `F8`, its codes as a uint8 array (`.bits`) and
its `.format`, with `.to_float32()` likewise. Every other tensor is a numpy array of float32, float64, float16 or int64, and a
round trip keeps every bit, NaN payloads and negative zeros included. Needs Python 3.8 or later.

Checksums (Note [Checksums] in tensor/safetensors.cpp): mixtape writes a CRC-32 (zlib.crc32) of
each tensor's bytes as metadata entry "crc32:<name>" and one of the other metadata entries (sorted
by key, each as key, NUL, value, NUL, UTF-8) as "crc32:__metadata__", 8 lowercase hex digits.
`load` checks them when a file has them, raises SafetensorsError naming the tensor on a mismatch,
and returns the metadata without them; `save` writes them, as mixtape does.

As a module:
    tensors, metadata = load("ckpt.safetensors")   # {name: array or BF16}, {key: value}
    save("out.safetensors", tensors, metadata)      # the bytes mixtape writes for the same input

From the command line (exit status 0: done or identical, 1: different, 2: unreadable file):
    safetensors_np.py list FILE          name, dtype and shape of each tensor; the metadata
    safetensors_np.py hash FILE          name, dtype, shape and sha256 of each tensor's bytes
                                         (sorted by name); then the metadata as key=value,
                                         sorted (a name with a space, a key with '=' or a
                                         line break is printed as a JSON string)
    safetensors_np.py verify FILE        exit 0 when every checksum matches (or, with a line
                                         saying so, when the file has none), else 2 and why
    safetensors_np.py compare A B [--ignore-meta KEY ...]
                                         exit 0 when A and B hold the same tensors (names,
                                         dtypes, shapes, bytes) and metadata, else 1 and every
                                         difference (where in the file the data lie is not
                                         compared: `cmp A B` compares that too)
"""
import argparse
import hashlib
import json
import math
import os
import sys
import zlib

import numpy as np

# safetensors dtype -> numpy dtype of the raw data (a BF16 tensor's data are uint16 bits).
DTYPES = {
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "F8_E4M3": np.dtype("u1"),
    "F8_E5M2": np.dtype("u1"),
}
# The writer's layout order: the reference implementation sorts by its dtype enum, descending
# (which orders by alignment), then by name; among these dtypes I64 > F64 > F32 > BF16 > F16 > F8_E4M3 >
# F8_E5M2.
LAYOUT_RANK = {"I64": 4, "F64": 3, "F32": 2, "BF16": 1, "F16": 0, "F8_E4M3": -1, "F8_E5M2": -2}
MAX_HEADER = 100_000_000  # the reference implementation refuses longer headers; so does mixtape


class SafetensorsError(ValueError):
    """A file that is not a valid safetensors file, or tensors that cannot be saved as one."""


class BF16:
    """A bfloat16 tensor, which numpy lacks: its raw bits, a uint16 array of the tensor's shape."""

    def __init__(self, bits):
        self.bits = np.asarray(bits, dtype=np.uint16)

    @property
    def shape(self):
        return self.bits.shape

    def to_float32(self):
        """The values as float32, exactly (bfloat16 is the upper half of a float32)."""
        return (self.bits.astype(np.uint32) << 16).view(np.float32)

    @staticmethod
    def from_float32(values):
        """float32 values rounded to nearest even, as mixtape's round_to_bf16 rounds (tensor/core/half.h):
        overflow becomes inf and every NaN becomes the canonical NaN 0x7FFF."""
        x = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
        rounded = (x + 0x7FFF + ((x >> 16) & 1)) >> 16
        is_nan = (x & 0x7FFFFFFF) > 0x7F800000
        return BF16(np.where(is_nan, 0x7FFF, rounded).astype(np.uint16))

    def __repr__(self):
        return f"BF16({self.to_float32()!r})"


class F8:
    """An 8-bit float tensor (OCP FP8), which numpy lacks: its codes, a uint8 array of the tensor's
    shape, and its format, "F8_E4M3" (bias 7, no infinities, S.1111.111 is NaN, largest 448) or
    "F8_E5M2" (bias 15, IEEE-like, largest 57344), as tensor/core/fp8.h defines them."""

    FORMATS = {"F8_E4M3": (4, 3, 7), "F8_E5M2": (5, 2, 15)}  # exponent bits, mantissa bits, bias

    def __init__(self, bits, fmt):
        if fmt not in F8.FORMATS:
            raise SafetensorsError(f"F8 format must be one of {sorted(F8.FORMATS)}, got {fmt!r}")
        self.bits = np.asarray(bits, dtype=np.uint8)
        self.format = fmt

    @property
    def shape(self):
        return self.bits.shape

    def to_float32(self):
        """The values as float32, exactly (every 8-bit value is a float32)."""
        return F8._table(self.format)[self.bits]

    @staticmethod
    def _table(fmt):
        e_bits, m_bits, bias = F8.FORMATS[fmt]
        values = np.empty(256, dtype=np.float32)
        for code in range(256):
            sign = -1.0 if code & 0x80 else 1.0
            e, m = (code >> m_bits) & ((1 << e_bits) - 1), code & ((1 << m_bits) - 1)
            top = (1 << e_bits) - 1
            if fmt == "F8_E4M3" and e == top and m == (1 << m_bits) - 1:
                v = float("nan")
            elif fmt == "F8_E5M2" and e == top:
                v = sign * float("inf") if m == 0 else float("nan")
            elif e == 0:
                v = sign * m / (1 << m_bits) * 2.0 ** (1 - bias)
            else:
                v = sign * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)
            values[code] = v
        return values

    def __repr__(self):
        return f"F8({self.format}, {self.to_float32()!r})"


def dtype_name(tensor):
    """The safetensors dtype of a BF16, an F8 or a numpy array; SafetensorsError for anything else."""
    if isinstance(tensor, BF16):
        return "BF16"
    if isinstance(tensor, F8):
        return tensor.format
    if not isinstance(tensor, (np.ndarray, np.generic)):
        raise SafetensorsError(f"expected a numpy array or a BF16, got {type(tensor).__name__}")
    for name, dt in DTYPES.items():
        if name != "BF16" and not name.startswith("F8_") and tensor.dtype.newbyteorder("<") == dt:
            return name
    raise SafetensorsError(f"numpy dtype {tensor.dtype} is none of F32, F64, F16, BF16 (as BF16), I64, "
                           f"F8_E4M3 or F8_E5M2 (as F8)")


def raw_bytes(tensor):
    """A tensor's data as the file stores it: little-endian, row-major."""
    data = tensor.bits if isinstance(tensor, (BF16, F8)) else tensor
    return np.ascontiguousarray(data, dtype=DTYPES[dtype_name(tensor)]).tobytes()


# ---- load -------------------------------------------------------------------------------------


def _unique_keys(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise SafetensorsError(f"duplicate key {_quoted(key)} in the header")
        obj[key] = value
    return obj


def _quoted(value, limit=80):
    """A JSON value from a header for an error message, cut to `limit` characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _parse_entry(name, entry):
    """(dtype, shape, begin, end) of one header entry, validated on its own."""
    where = f"tensor {_quoted(name)}"
    if not isinstance(entry, dict):
        raise SafetensorsError(f"{where}: expected an object {{dtype, shape, data_offsets}}, got {_quoted(entry)}")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in entry:
            raise SafetensorsError(f'{where}: missing "{key}"')
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPES:
        raise SafetensorsError(f"{where}: unsupported dtype {_quoted(dtype)} (F32, F64, F16, BF16, I64)")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise SafetensorsError(f"{where}: shape must be a list of non-negative integers, got {_quoted(shape)}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
        raise SafetensorsError(f"{where}: data_offsets must be [begin, end], non-negative integers, "
                               f"got {_quoted(offsets)}")
    begin, end = offsets
    if begin > end:
        raise SafetensorsError(f"{where}: data_offsets [{begin}, {end}] end before they begin")
    nbytes = math.prod(shape) * DTYPES[dtype].itemsize
    if end - begin != nbytes:
        raise SafetensorsError(f"{where}: data_offsets [{begin}, {end}] hold {end - begin} bytes "
                               f"but {dtype} {shape} needs {nbytes}")
    return dtype, tuple(shape), begin, end


def _no_constants(name):
    raise SafetensorsError(f"the header is not valid JSON: {name} is not a JSON number")


def _read_header(f, file_size):
    """The header as a dict and the offset of the data buffer, after checking the header length and
    that the header is a JSON object."""
    if file_size < 8:
        raise SafetensorsError(f"file is {file_size} bytes, too short for the 8-byte header length")
    n = int.from_bytes(f.read(8), "little")
    if n > MAX_HEADER:
        raise SafetensorsError(f"header length {n} exceeds the limit of {MAX_HEADER} bytes (not a safetensors file?)")
    if n > file_size - 8:
        raise SafetensorsError(f"header length {n} runs past the end of the {file_size}-byte file")
    raw = f.read(n)
    if not raw.startswith(b"{"):
        raise SafetensorsError("the header does not start with '{'")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constants)
    except UnicodeDecodeError as e:
        raise SafetensorsError(f"the header is not UTF-8: {e}") from None
    except json.JSONDecodeError as e:
        raise SafetensorsError(f"the header is not valid JSON: {e}") from None
    except RecursionError:
        raise SafetensorsError("the header is nested too deeply (a safetensors header needs 3 levels)") from None
    if not isinstance(header, dict):
        raise SafetensorsError("the header is not a JSON object")
    return header, 8 + n


def _metadata(header):
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict):
        raise SafetensorsError(f"__metadata__ must be an object of strings, got {_quoted(metadata)}")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise SafetensorsError(f"__metadata__ entry {_quoted(key)} must be a string, got {_quoted(value)}")
    return metadata


def _layout(header, data_size):
    """The tensors' entries as (begin, end, name, dtype, shape), sorted by offset, after checking
    that they tile the data buffer: no overlap, no hole, nothing after the last."""
    entries = []
    for name, entry in header.items():
        if name != "__metadata__":
            dtype, shape, begin, end = _parse_entry(name, entry)
            entries.append((begin, end, name, dtype, shape))
    entries.sort()
    expected, previous = 0, None
    for begin, end, name, _, _ in entries:
        where = f"tensor {_quoted(name)}: data_offsets [{begin}, {end}]"
        if end > data_size:
            raise SafetensorsError(f"{where} run past the {data_size}-byte data buffer (file truncated?)")
        if begin < expected:
            raise SafetensorsError(f"{where} overlap tensor {_quoted(previous)} which ends at {expected}")
        if begin > expected:
            raise SafetensorsError(f"{where} leave a hole of {begin - expected} bytes after byte {expected}")
        expected, previous = end, name
    if expected != data_size:
        raise SafetensorsError(f"the tensors cover {expected} bytes but the data buffer after the header has "
                               f"{data_size} (trailing bytes or a missing tensor)")
    return entries


CRC_PREFIX = "crc32:"
METADATA_CRC = "crc32:__metadata__"


def _crc(data, crc=0):
    return zlib.crc32(data, crc) & 0xFFFFFFFF


def metadata_crc(metadata):
    """The CRC-32 of the metadata entries that are not checksums, sorted by key, as 8 hex digits."""
    crc = 0
    for key in sorted(k for k in metadata if not k.startswith(CRC_PREFIX)):
        crc = _crc(key.encode("utf-8") + b"\0" + metadata[key].encode("utf-8") + b"\0", crc)
    return f"{crc:08x}"


def checksums(tensors, metadata):
    """The checksum entries mixtape's writer adds for these tensors and metadata."""
    out = {METADATA_CRC: metadata_crc(metadata)}
    for name, t in tensors.items():
        out[CRC_PREFIX + name] = f"{_crc(raw_bytes(t)):08x}"
    return out


def verify(tensors, metadata):
    """Checks a file's checksums; returns the metadata without them and whether there were any."""
    stored = {k: v for k, v in metadata.items() if k.startswith(CRC_PREFIX)}
    if not stored:
        return dict(metadata), False
    corrupt = " (the file is damaged: a flipped bit, a bad copy or a partial write)"
    for name, t in tensors.items():
        if CRC_PREFIX + name not in stored:
            raise SafetensorsError(f"tensor {_quoted(name)} has no checksum, while the file carries checksums{corrupt}")
        got = f"{_crc(raw_bytes(t)):08x}"
        if stored[CRC_PREFIX + name] != got:
            raise SafetensorsError(f"tensor {_quoted(name)} fails its checksum: CRC-32 {got}, "
                                   f"the file says {_quoted(stored[CRC_PREFIX + name])}{corrupt}")
    if METADATA_CRC not in stored:
        raise SafetensorsError(f"the metadata has no checksum, while the tensors have{corrupt}")
    got = metadata_crc(metadata)
    if stored[METADATA_CRC] != got:
        raise SafetensorsError(f"the metadata fails its checksum: CRC-32 {got}, the file says "
                               f"{_quoted(stored[METADATA_CRC])}{corrupt}")
    for key in stored:
        if key != METADATA_CRC and key[len(CRC_PREFIX):] not in tensors:
            raise SafetensorsError(f"a checksum for tensor {_quoted(key[len(CRC_PREFIX):])}, "
                                   f"which the file does not hold{corrupt}")
    return {k: v for k, v in metadata.items() if not k.startswith(CRC_PREFIX)}, True


def load(path, with_status=False):
    """(tensors, metadata) of a safetensors file: {name: numpy array or BF16} in the order of their
    data in the file, and {key: value} without the checksum entries. Raises SafetensorsError naming
    the file and, where there is one, the tensor, for anything the format does not allow
    (tensor/safetensors.h lists it) and for a checksum that does not match. with_status: also
    whether the file carried checksums."""
    tensors = {}
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            header, data_start = _read_header(f, file_size)
            metadata = _metadata(header)
            for begin, end, name, dtype, shape in _layout(header, file_size - data_start):
                data = bytearray(end - begin)
                f.seek(data_start + begin)
                if f.readinto(data) != len(data):
                    raise SafetensorsError(f"tensor {_quoted(name)}: the file ended while reading it")
                array = np.frombuffer(data, dtype=DTYPES[dtype]).reshape(shape)  # shares `data`, writable
                if dtype == "BF16":
                    tensors[name] = BF16(array)
                elif dtype.startswith("F8_"):
                    tensors[name] = F8(array, dtype)
                else:  # the host's byte order (a no-op on little-endian hosts)
                    tensors[name] = array.astype(array.dtype.newbyteorder("="), copy=False)
        metadata, verified = verify(tensors, metadata)
    except SafetensorsError as e:
        raise SafetensorsError(f"{path}: {e}") from None
    return (tensors, metadata, verified) if with_status else (tensors, metadata)


# ---- save -------------------------------------------------------------------------------------


def _header_bytes(tensors, metadata=None, with_checksums=True):
    """The header mixtape's save_safetensors writes, padded, and the tensor names in data order."""
    for name in tensors:
        if not isinstance(name, str) or name == "__metadata__":
            raise SafetensorsError(f"tensor names are strings other than '__metadata__', got {name!r}")
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise SafetensorsError(f"metadata maps strings to strings, got {key!r}: {value!r}")
    if any(key.startswith(CRC_PREFIX) for key in (metadata or {})):
        raise SafetensorsError(f"metadata keys starting with {CRC_PREFIX!r} are reserved for the checksums")
    if with_checksums:
        metadata = {**(metadata or {}), **checksums(tensors, metadata or {})}
    order = sorted(tensors, key=lambda name: (-LAYOUT_RANK[dtype_name(tensors[name])], name))
    header = {}
    if metadata:
        header["__metadata__"] = {key: metadata[key] for key in sorted(metadata)}
    offset = 0
    for name in order:
        t = tensors[name]
        nbytes = math.prod(t.shape) * DTYPES[dtype_name(t)].itemsize
        header[name] = {"dtype": dtype_name(t), "shape": [int(d) for d in t.shape],
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    try:
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise SafetensorsError(f"a tensor name or metadata entry is not valid UTF-8: {e}") from None
    return text + b" " * (-len(text) % 8), order  # the data starts 8-byte aligned


def save(path, tensors, metadata=None, with_checksums=True):
    """Writes {name: numpy array or BF16} and {key: value} (strings) to `path`, byte for byte as
    mixtape's save_safetensors lays them out, checksums included (with_checksums=False: the bare
    format, as save_safetensors with Checksums::none). The file appears whole or not at all: it is
    written next to `path`, synced and renamed over it."""
    header, order = _header_bytes(tensors, metadata, with_checksums)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(len(header).to_bytes(8, "little"))
            f.write(header)
            for name in order:
                f.write(raw_bytes(tensors[name]))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---- command line -----------------------------------------------------------------------------


def shown(text, avoid=""):
    """`text` as is when it reads unambiguously on one line (printable, not empty, not starting with
    a quote, none of the characters in `avoid`), otherwise as a JSON string."""
    plain = text and text.isprintable() and not text.startswith('"') and not any(c in text for c in avoid)
    return text if plain else json.dumps(text, ensure_ascii=False)


def shape_text(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def metadata_lines(metadata):
    return [f"{shown(k, '= ')}={shown(metadata[k])}" for k in sorted(metadata)]


def cmd_list(args):
    tensors, metadata = load(args.file)
    rows = [(shown(name, " "), dtype_name(t), shape_text(t.shape)) for name, t in tensors.items()]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(2)]
    for name, dtype, shape in rows:
        print(f"{name:<{widths[0]}}  {dtype:<{widths[1]}}  {shape}")
    print(f"{len(tensors)} tensors; metadata: {len(metadata)} entries")
    for line in metadata_lines(metadata):
        print(f"  {line}")
    return 0


def hash_lines(tensors, metadata):
    """One line per tensor, sorted by name: name dtype shape sha256; then key=value, sorted."""
    lines = [f"{shown(name, ' ')} {dtype_name(t)} {shape_text(t.shape)} {hashlib.sha256(raw_bytes(t)).hexdigest()}"
             for name, t in sorted(tensors.items(), key=lambda item: item[0])]
    return lines + metadata_lines(metadata)


def cmd_hash(args):
    print("\n".join(hash_lines(*load(args.file))))
    return 0


def first_difference(a, b):
    """How two tensors of one dtype and shape differ: the count of elements whose bits differ and the
    first of them, or None when every bit agrees."""
    bits_a = np.frombuffer(raw_bytes(a), dtype=f"<u{DTYPES[dtype_name(a)].itemsize}")
    bits_b = np.frombuffer(raw_bytes(b), dtype=bits_a.dtype)
    differ = np.flatnonzero(bits_a != bits_b)
    if differ.size == 0:
        return None
    i = int(differ[0])
    values_a = a.to_float32() if isinstance(a, (BF16, F8)) else a
    values_b = b.to_float32() if isinstance(b, (BF16, F8)) else b
    index = list(np.unravel_index(i, a.shape)) if a.shape else []
    va, vb = values_a.reshape(-1)[i].item(), values_b.reshape(-1)[i].item()
    return (f"{differ.size} of {bits_a.size} elements differ; the first at {[int(k) for k in index]}: "
            f"{va!r} (bits {int(bits_a[i]):#x}) vs {vb!r} (bits {int(bits_b[i]):#x})")


def differences(a, b, ignore_meta=()):
    """Every way two (tensors, metadata) pairs differ, as lines; empty when they are the same."""
    (tensors_a, meta_a), (tensors_b, meta_b) = a, b
    out = []
    for name in sorted(set(tensors_a) | set(tensors_b)):
        where = f"tensor {shown(name, ' ')}"
        if name not in tensors_b:
            out.append(f"{where}: only in A")
        elif name not in tensors_a:
            out.append(f"{where}: only in B")
        else:
            ta, tb = tensors_a[name], tensors_b[name]
            if dtype_name(ta) != dtype_name(tb) or ta.shape != tb.shape:
                out.append(f"{where}: {dtype_name(ta)} {shape_text(ta.shape)} "
                           f"vs {dtype_name(tb)} {shape_text(tb.shape)}")
            elif (diff := first_difference(ta, tb)) is not None:
                out.append(f"{where}: {diff}")
    for key in sorted((set(meta_a) | set(meta_b)) - set(ignore_meta)):
        where = f"metadata {shown(key, '= ')}"
        if key not in meta_b:
            out.append(f"{where}: only in A")
        elif key not in meta_a:
            out.append(f"{where}: only in B")
        elif meta_a[key] != meta_b[key]:
            out.append(f"{where}: {shown(meta_a[key])} vs {shown(meta_b[key])}")
    return out


def cmd_verify(args):
    tensors, metadata, verified = load(args.file, with_status=True)
    if verified:
        print(f"ok: {len(tensors)} tensors and {len(metadata)} metadata entries match their CRC-32")
    else:
        print(f"{args.file} carries no checksums (written by another program, or by mixtape before they "
              f"existed): it could not be verified")
    return 0


def cmd_compare(args):
    a, b = load(args.a), load(args.b)
    diffs = differences(a, b, args.ignore_meta)
    if diffs:
        print(f"{args.a} and {args.b} differ:")
        for line in diffs:
            print(f"  {line}")
        return 1
    ignored = f" (ignoring metadata {', '.join(args.ignore_meta)})" if args.ignore_meta else ""
    print(f"identical: {len(a[0])} tensors, {len(set(a[1]) - set(args.ignore_meta))} metadata entries{ignored}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="name, dtype and shape of each tensor; the metadata")
    p.add_argument("file")
    p.set_defaults(run=cmd_list)
    p = sub.add_parser("hash", help="name, dtype, shape and sha256 of each tensor, sorted by name; the metadata")
    p.add_argument("file")
    p.set_defaults(run=cmd_hash)
    p = sub.add_parser("verify", help="check every checksum of a file")
    p.add_argument("file")
    p.set_defaults(run=cmd_verify)
    p = sub.add_parser("compare", help="exit 0 when two files hold the same tensors and metadata, else 1")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--ignore-meta", action="append", default=[], metavar="KEY",
                   help="leave this metadata key out of the comparison (repeatable)")
    p.set_defaults(run=cmd_compare)
    args = ap.parse_args(argv)
    try:
        return args.run(args)
    except (SafetensorsError, OSError) as e:
        print(f"safetensors_np: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
