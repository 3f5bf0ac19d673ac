#!/usr/bin/env python3
"""scripts/safetensors_np.py on its own: it writes the reference implementation's bytes, refuses every
malformed file with a message naming the file, and its `compare` and `hash` commands see every
difference (other tests rely on them to call two checkpoints identical)."""
import hashlib
import json
import subprocess
import sys
import tempfile
import unittest
import zlib
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "safetensors_np.py"
sys.path.insert(0, str(SCRIPT.parent))
import safetensors_np as st  # noqa: E402


def file_bytes(header, data=b""):
    """A file: the header length, the header, the data."""
    header = header.encode() if isinstance(header, str) else header
    return len(header).to_bytes(8, "little") + header + data


def cli(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="mixtape-safetensors-np-")
        self.dir = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, data):
        path = self.dir / name
        path.write_bytes(data)
        return path


class Save(TempDirTest):
    def test_reference_bytes(self):
        # From huggingface/safetensors' own tests (as tests/tensor/test_safetensors.cpp): a 64-byte
        # header needs no padding, a 65-byte one gets 7 spaces; no tensors, with and without metadata.
        # The bare format: without the checksum entries.
        data = np.arange(6, dtype=np.float32)
        st.save(self.dir / "a", {"attn.0": data.reshape(1, 2, 3)}, with_checksums=False)
        self.assertEqual((self.dir / "a").read_bytes(),
                         file_bytes('{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}', data.tobytes()))
        st.save(self.dir / "b", {"attn0": data.reshape(1, 1, 2, 3)}, with_checksums=False)
        self.assertEqual((self.dir / "b").read_bytes(),
                         file_bytes('{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       ',
                                    data.tobytes()))
        st.save(self.dir / "c", {}, with_checksums=False)
        self.assertEqual((self.dir / "c").read_bytes(), file_bytes("{}      "))
        st.save(self.dir / "d", {}, {"framework": "pt"}, with_checksums=False)
        self.assertEqual((self.dir / "d").read_bytes(), file_bytes('{"__metadata__":{"framework":"pt"}}     '))
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()), ["a", "b", "c", "d"])  # no temporaries

    def test_checksums(self):
        # Note [Checksums]: every tensor and the metadata carry a CRC-32; one flipped bit anywhere in
        # a tensor's data, or in a metadata value, is refused naming what failed; the entries do not
        # come back from load; a file without them loads, reported as not verified.
        tensors = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": st.BF16([0x3F80, 0x7FC1]),
                   "step": np.array([7], dtype=np.int64)}
        path = self.dir / "x.safetensors"
        st.save(path, tensors, {"progress.step": "7"})
        got, meta, verified = st.load(path, with_status=True)
        self.assertTrue(verified)
        self.assertEqual(meta, {"progress.step": "7"})
        raw = path.read_bytes()
        header_len = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + header_len])
        self.assertEqual(header["__metadata__"]["crc32:w"], f"{zlib.crc32(tensors['w'].tobytes()):08x}")
        for name in tensors:
            begin, end = header[name]["data_offsets"]
            for byte in (begin, end - 1):
                bad = bytearray(raw)
                bad[8 + header_len + byte] ^= 0x10
                path.write_bytes(bytes(bad))
                with self.assertRaisesRegex(st.SafetensorsError, f'tensor "{name}" fails its checksum'):
                    st.load(path)
        bad = raw.replace(b'"progress.step":"7"', b'"progress.step":"8"')
        self.assertNotEqual(bad, raw)
        path.write_bytes(bad)
        with self.assertRaisesRegex(st.SafetensorsError, "the metadata fails its checksum"):
            st.load(path)
        st.save(path, tensors, {"progress.step": "7"}, with_checksums=False)
        self.assertFalse(st.load(path, with_status=True)[2])
        out = subprocess.run([sys.executable, SCRIPT, "verify", path], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0)
        self.assertIn("could not be verified", out.stdout)
        with self.assertRaisesRegex(st.SafetensorsError, "reserved"):
            st.save(path, tensors, {"crc32:w": "00000000"})

    def test_f8(self):
        # OCP FP8 as tensor/core/fp8.h defines it: E4M3 has no infinities and one NaN per sign.
        e4m3 = st.F8(np.arange(256), "F8_E4M3").to_float32()
        self.assertEqual([e4m3[c] for c in (0x01, 0x08, 0x38, 0x7E)], [2.0**-9, 2.0**-6, 1.0, 448.0])
        self.assertEqual(int(np.isnan(e4m3).sum()), 2)
        self.assertTrue(np.isfinite(e4m3[[0x78, 0xF8]]).all())  # 256 and -256, not infinities
        e5m2 = st.F8(np.arange(256), "F8_E5M2").to_float32()
        self.assertEqual([e5m2[c] for c in (0x01, 0x3C, 0x7B, 0x7C, 0xFC)],
                         [2.0**-16, 1.0, 57344.0, np.inf, -np.inf])
        self.assertEqual(int(np.isnan(e5m2).sum()), 6)
        path = self.dir / "f8.safetensors"
        st.save(path, {"b": st.F8([0x38, 0x7F], "F8_E5M2"), "a": st.F8([[0x38]], "F8_E4M3")})
        got, _ = st.load(path)
        self.assertEqual(list(got), ["a", "b"])  # E4M3 before E5M2, as the reference lays them out
        self.assertEqual((got["b"].format, got["b"].bits.tolist()), ("F8_E5M2", [0x38, 0x7F]))

    def test_layout_and_round_trip(self):
        tensors = {
            "z.f16": np.array([1.5, -0.0], dtype=np.float16),
            "a.bf16": st.BF16([0x3F80, 0x7FC1]),
            "m.f32.big_endian": np.array([[1.0, 2.0]], dtype=">f4"),
            "b.f64": np.array(0.1),
            "idx": np.array([-3, 2**40], dtype=np.int64),
        }
        path = self.dir / "x.safetensors"
        st.save(path, tensors, {"step": "3"})
        loaded, metadata = st.load(path)
        # By descending alignment (I64, F64, F32, BF16, F16), then by name.
        self.assertEqual(list(loaded), ["idx", "b.f64", "m.f32.big_endian", "a.bf16", "z.f16"])
        self.assertEqual(metadata, {"step": "3"})
        for name, t in tensors.items():
            self.assertEqual(st.raw_bytes(loaded[name]), st.raw_bytes(t), name)
        self.assertEqual(loaded["m.f32.big_endian"].dtype, np.float32)
        self.assertEqual(loaded["a.bf16"].to_float32().tolist()[0], 1.0)
        self.assertTrue(np.signbit(loaded["z.f16"][1]))

    def test_refuses_what_the_format_cannot_hold(self):
        for tensors, metadata, message in [
            ({"w": np.zeros(2, dtype=np.int32)}, None, "int32"),
            ({"w": [1.0, 2.0]}, None, "numpy array"),
            ({"__metadata__": np.zeros(1)}, None, "__metadata__"),
            ({"w": np.zeros(1)}, {"step": 3}, "strings"),
            ({"w\ud800": np.zeros(1)}, None, "UTF-8"),
        ]:
            with self.assertRaisesRegex(st.SafetensorsError, message):
                st.save(self.dir / "bad", tensors, metadata)
        self.assertEqual(list(self.dir.iterdir()), [])

    def test_bf16_rounding(self):
        f32 = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, np.inf, -np.inf, np.nan, -np.nan, 3.4e38], dtype=np.float32)
        self.assertEqual(st.BF16.from_float32(f32).bits.tolist(),
                         [0x3F80, 0x3F80, 0x3F82, 0x7F80, 0xFF80, 0x7FFF, 0x7FFF, 0x7F80])
        every = st.BF16(np.arange(65536, dtype=np.uint16))
        finite = np.isfinite(every.to_float32())
        self.assertEqual(st.BF16.from_float32(every.to_float32()[finite]).bits.tolist(), every.bits[finite].tolist())


class Load(TempDirTest):
    GOOD = file_bytes('{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}',
                      np.arange(4, dtype=np.float32).tobytes())

    def error(self, data):
        """The message load() raises for a file holding `data`, or None when it loads."""
        path = self.write("bad.safetensors", data)
        try:
            st.load(path)
        except st.SafetensorsError as e:
            self.assertIn(str(path), str(e))
            return str(e)
        return None

    def one(self, entry, data=np.arange(4, dtype=np.float32).tobytes()):
        return self.error(file_bytes("{" + entry + "}", data))

    def test_good_file(self):
        self.assertIsNone(self.error(self.GOOD))
        tensors, metadata = st.load(self.dir / "bad.safetensors")
        self.assertEqual(tensors["w"].tolist(), [[0, 1], [2, 3]])
        self.assertEqual(metadata, {})

    def test_malformed_files(self):
        long_header = (1000).to_bytes(8, "little") + b"{}"
        cases = [
            (b"abc", "too short"),
            (long_header, "header length 1000 runs past the end"),
            ((1 << 40).to_bytes(8, "little") + b"{}", "exceeds the limit"),
            (file_bytes('{"w": ['), "not valid JSON"),
            (file_bytes("[1, 2]  "), "does not start with '{'"),
            (file_bytes(b'{"w\xff": 1}'), "not UTF-8"),
            (file_bytes('{"w":{"dtype":"F32","shape":[NaN],"data_offsets":[0,0]}}'), "NaN"),
            (file_bytes('{"w":' + "[" * 100000 + "]" * 100000 + "}"), "nested too deeply"),
            (file_bytes('{"__metadata__":{"step":3}}'), "__metadata__ entry \"step\" must be a string"),
            (file_bytes('{"__metadata__":[]}'), "__metadata__ must be an object"),
        ]
        for data, message in cases:
            with self.subTest(message=message):
                self.assertIn(message, self.error(data) or "(loaded)")

    def test_malformed_entries(self):
        cases = [
            ('"w":[1]', "expected an object"),
            ('"w":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}', 'unsupported dtype "I32"'),
            ('"w":{"dtype":"F32","shape":[2,2]}', 'missing "data_offsets"'),
            ('"w":{"dtype":"F32","shape":[2,-2],"data_offsets":[0,16]}', "non-negative integers"),
            ('"w":{"dtype":"F32","shape":[2,2.0],"data_offsets":[0,16]}', "non-negative integers"),
            ('"w":{"dtype":"F32","shape":[true,4],"data_offsets":[0,16]}', "non-negative integers"),
            ('"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0]}', "[begin, end]"),
            ('"w":{"dtype":"F32","shape":[0],"data_offsets":[16,0]}', "end before they begin"),
            ('"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}', "hold 16 bytes but F32 [2, 3] needs 24"),
            ('"w":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}', "run past the 16-byte data buffer"),
            ('"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}', "hole of 8 bytes"),
            ('"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},'
             '"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}', 'overlap tensor "a"'),
            ('"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}',
             "cover 8 bytes but the data buffer after the header has 16"),
            ('"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
             '"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}', 'duplicate key "w"'),
        ]
        for entry, message in cases:
            with self.subTest(message=message):
                self.assertIn(message, self.one(entry) or "(loaded)")

    def test_every_truncation_fails(self):
        for cut in range(len(self.GOOD)):
            with self.subTest(cut=cut):
                self.assertIsNotNone(self.error(self.GOOD[:cut]))
        self.assertIn("trailing bytes", self.error(self.GOOD + b"x"))


class CommandLine(TempDirTest):
    TENSORS = {
        "w": np.array([[1.0, -0.0], [np.inf, 2.5]], dtype=np.float32),
        "b": st.BF16([0x3F80, 0x7FC0]),
        "n": np.array(1, dtype=np.int64),
    }
    METADATA = {"step": "7", "saved_at": "monday"}

    def save(self, name, tensors=None, metadata=None):
        path = self.dir / name
        st.save(path, self.TENSORS if tensors is None else tensors, self.METADATA if metadata is None else metadata)
        return path

    def changed(self, name, value):
        return {**self.TENSORS, name: value}

    def test_hash(self):
        out = cli("hash", self.save("a.safetensors"))
        self.assertEqual(out.returncode, 0, out.stderr)
        sha = {name: hashlib.sha256(st.raw_bytes(t)).hexdigest() for name, t in self.TENSORS.items()}
        self.assertEqual(out.stdout.splitlines(), [
            f"b BF16 [2] {sha['b']}",
            f"n I64 [] {sha['n']}",
            f"w F32 [2,2] {sha['w']}",
            "saved_at=monday",
            "step=7",
        ])
        self.assertEqual(sha["w"], hashlib.sha256(np.array([1, -0.0, np.inf, 2.5], "<f4").tobytes()).hexdigest())

    def test_hash_quotes_what_would_be_ambiguous(self):
        out = cli("hash", self.save("a", {"two words": np.zeros(1, np.float16)}, {"k=v": "line\nbreak", "e": ""}))
        lines = out.stdout.splitlines()
        self.assertTrue(lines[0].startswith('"two words" F16 [1] '), lines)
        self.assertEqual(lines[1:], ['e=""', f'{json.dumps("k=v")}={json.dumps("line" + chr(10) + "break")}'])

    def test_list(self):
        out = cli("list", self.save("a.safetensors"))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split()[:9], ["n", "I64", "[]", "w", "F32", "[2,2]", "b", "BF16", "[2]"])
        self.assertIn("step=7", out.stdout)

    def compare(self, a, b, *options):
        return cli("compare", a, b, *options)

    def test_compare_identical(self):
        out = self.compare(self.save("a"), self.save("b"))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("identical: 3 tensors, 2 metadata entries", out.stdout)

    def test_compare_finds_every_difference(self):
        a = self.save("a")
        w = self.TENSORS["w"]
        cases = [  # (tensors, metadata, what the report must say)
            (self.changed("w", np.array([[1.0, 0.0], [np.inf, 2.5]], dtype=np.float32)),
             None, "tensor w: 1 of 4 elements differ; the first at [0, 1]"),  # -0 vs +0: == would miss it
            (self.changed("b", st.BF16([0x3F80, 0x7FC1])), None, "tensor b: 1 of 2 elements differ"),  # NaN payload
            (self.changed("w", w.astype(np.float64)), None, "tensor w: F32 [2,2] vs F64 [2,2]"),
            (self.changed("w", w.reshape(4)), None, "tensor w: F32 [2,2] vs F32 [4]"),
            ({k: v for k, v in self.TENSORS.items() if k != "n"}, None, "tensor n: only in A"),
            (self.changed("extra", np.zeros(0)), None, "tensor extra: only in B"),
            (None, {"step": "8", "saved_at": "monday"}, "metadata step: 7 vs 8"),
            (None, {"step": "7"}, "metadata saved_at: only in A"),
        ]
        for tensors, metadata, message in cases:
            with self.subTest(message=message):
                out = self.compare(a, self.save("b", tensors, metadata))
                self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
                self.assertIn(message, out.stdout)
        # Every difference is listed, not just the first.
        out = self.compare(a, self.save("b", self.changed("w", w * 2), {"step": "8"}))
        self.assertEqual(out.returncode, 1)
        self.assertEqual(len(out.stdout.splitlines()), 4, out.stdout)  # the title, w, saved_at, step

    def test_compare_ignores_metadata_keys(self):
        a, b = self.save("a"), self.save("b", None, {"step": "7", "saved_at": "tuesday", "host": "x"})
        self.assertEqual(self.compare(a, b).returncode, 1)
        self.assertEqual(self.compare(a, b, "--ignore-meta", "saved_at").returncode, 1)
        out = self.compare(a, b, "--ignore-meta", "saved_at", "--ignore-meta", "host")
        self.assertEqual(out.returncode, 0, out.stdout)
        self.assertIn("ignoring metadata saved_at, host", out.stdout)
        # Ignoring metadata never hides a tensor difference.
        c = self.save("c", self.changed("n", np.array(2, dtype=np.int64)))
        self.assertEqual(self.compare(a, c, "--ignore-meta", "step", "--ignore-meta", "saved_at").returncode, 1)

    def test_unreadable_files_exit_2(self):
        a = self.save("a")
        bad = self.write("bad", b"not a safetensors file")
        for args in [("compare", a, bad), ("compare", a, self.dir / "missing"), ("hash", bad), ("list", bad)]:
            with self.subTest(args=args[0]):
                out = cli(*args)
                self.assertEqual(out.returncode, 2, out.stdout)
                self.assertTrue(out.stderr.startswith("safetensors_np: "), out.stderr)


if __name__ == "__main__":
    unittest.main()
