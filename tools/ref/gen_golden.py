#!/usr/bin/python3
"""gen_golden.py: writes tests/data/golden_blocks.bin from the NumPy reference (ggml_formats.py).

What it is: the generator of the golden blocks that tests/test_quant.c compares spex's C
reference against, bit for bit. Deterministic (fixed seed): running it again with the same
numpy gives the same file. What it is not: a test by itself (it only runs a few
self-consistency checks of the Python side before writing).

Usage (from the repository root):  /usr/bin/python3 tools/ref/gen_golden.py [OUT]
OUT defaults to tests/data/golden_blocks.bin.

File format (little-endian), documented in tools/ref/README.md:
  header  : char magic[8] = "SPEXGLD1", u32 version = 1, u32 n_records
  record  : u32 kind, u32 type (ggml id), u32 n (elements), u32 nbytes, char name[24]
            kind 1 (DEQUANT): u8 raw[nbytes], then f32 expected[n]  = dequantize(raw)
            kind 2 (QUANT)  : f32 input[n],  then u8 expected[nbytes] = quantize(input)
            kind 3 (QUANT_GEN): u64 seed, u64 fnv1a64(quantize(gen_input(seed, n)))
                   (nbytes = size of the quantized bytes, which are not stored)
Kind 3 covers many blocks in 16 bytes: it catches choices that are taken in a few blocks
in a hundred (the last trials of the K-quant scale searches). gen_input is specified in
its docstring and reproduced by tests/test_quant.c.
"""

import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ggml_formats as gf  # noqa: E402

F32 = np.float32
KIND_DEQUANT, KIND_QUANT, KIND_QUANT_GEN = 1, 2, 3
SEED = 20250601
BLOCK_TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q4_K", "q5_K", "q6_K", "q8_K"]


class Writer:
    def __init__(self):
        self.records = []
        self.size = 16

    def add(self, kind, name, label, raw, values):
        tid, qk, tsize = gf.TYPES[name]
        values = np.asarray(values, dtype="<f4").reshape(-1)
        raw = bytes(raw)
        assert values.size % qk == 0 and len(raw) == values.size // qk * tsize, (name, label)
        lab = label.encode()[:23].ljust(24, b"\0")
        head = struct.pack("<4I", kind, tid, values.size, len(raw)) + lab
        body = raw + values.tobytes() if kind == KIND_DEQUANT else values.tobytes() + raw
        self.records.append(head + body)
        self.size += len(head) + len(body)

    def dequant(self, name, label, raw):
        self.add(KIND_DEQUANT, name, label, raw, gf.dequantize(name, raw))

    def quant(self, name, label, x):
        x = np.asarray(x, dtype=F32)
        self.add(KIND_QUANT, name, label, gf.quantize(name, x), x)

    def quant_gen(self, name, label, seed, n):
        tid, qk, tsize = gf.TYPES[name]
        raw = gf.quantize(name, gen_input(seed, n))
        assert n % qk == 0 and len(raw) == n // qk * tsize
        lab = label.encode()[:23].ljust(24, b"\0")
        rec = struct.pack("<4I", KIND_QUANT_GEN, tid, n, len(raw)) + lab
        rec += struct.pack("<2Q", seed, fnv1a64(raw))
        self.records.append(rec)
        self.size += len(rec)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(b"SPEXGLD1" + struct.pack("<2I", 1, len(self.records)))
            for r in self.records:
                f.write(r)


# --------------------------------------------------------------------------------------
# generated inputs (shared with the C test) and the hash of the expected bytes
# --------------------------------------------------------------------------------------

_GOLD = 0x9E3779B97F4A7C15


def splitmix64(seed, k):
    """Call k (0-based, array) of the splitmix64 stream started at seed: with
    z = seed + (k+1)*0x9E3779B97F4A7C15 (mod 2^64), z ^= z>>30, z *= 0xBF58476D1CE4E5B9,
    z ^= z>>27, z *= 0x94D049BB133111EB, z ^= z>>31."""
    u = np.uint64
    z = u(seed) + (k.astype(u) + u(1)) * u(_GOLD)
    z = (z ^ (z >> u(30))) * u(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> u(27))) * u(0x94D049BB133111EB)
    return z ^ (z >> u(31))


def gen_input(seed, n):
    """n float32 values, exactly reproducible in C (every step is exact in float32):
    element i: r = call 2i, r2 = call 2i+1 of stream seed; t = sum of the four 16-bit
    fields of r; v = (t - 131070) * 2^-16 (about N(0, 0.58)); v *= 8 when r2 % 64 == 0
    (outliers); then v *= 2^(s % 5 - 2) with s = call i//32 of stream seed ^ 0x5DEECE66D
    (sub-blocks of different scales)."""
    u = np.uint64
    i = np.arange(n, dtype=u)
    with np.errstate(over="ignore"):
        r = splitmix64(seed, u(2) * i)
        r2 = splitmix64(seed, u(2) * i + u(1))
        sub = splitmix64(seed ^ 0x5DEECE66D, np.arange((n + 31) // 32, dtype=u))
    m = u(0xFFFF)
    t = (r & m) + ((r >> u(16)) & m) + ((r >> u(32)) & m) + (r >> u(48))
    v = (t.astype(np.int64) - 131070).astype(F32) * F32(2.0 ** -16)
    v = np.where((r2 & u(63)) == 0, v * F32(8), v)
    f = np.ldexp(F32(1), (sub % u(5)).astype(np.int32) - 2).astype(F32)
    return (v * f[np.arange(n) // 32]).astype(F32)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# --------------------------------------------------------------------------------------
# raw blocks for the dequantization records
# --------------------------------------------------------------------------------------

def f16(v):
    return gf.f32_to_f16_bits(np.atleast_1d(np.asarray(v, dtype=F32))).astype("<u2").view(np.uint8)


def random_blocks(rng, name, nb, scale_kind="normal"):
    """Random bytes for the quant fields, with sane f16 (f32 for q8_K) scales put in."""
    _, _, size = gf.TYPES[name]
    b = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)

    def scales(k):
        if scale_kind == "normal":
            v = rng.normal(0, 0.05, size=(nb, k))
        elif scale_kind == "negative":
            v = -np.abs(rng.normal(0, 0.05, size=(nb, k)))
        elif scale_kind == "subnormal":
            v = rng.integers(1, 1024, size=(nb, k)) * 2.0 ** -24 * rng.choice([-1, 1], size=(nb, k))
        else:
            raise ValueError(scale_kind)
        return f16(v).reshape(nb, 2 * k)

    if name in ("q4_0", "q5_0", "q8_0"):
        b[:, 0:2] = scales(1)
    elif name in ("q4_1", "q5_1", "q8_1", "q4_K", "q5_K"):
        b[:, 0:4] = scales(2)
    elif name == "q6_K":
        b[:, 208:210] = scales(1)
    elif name == "q8_K":
        d = rng.normal(0, 0.01, size=nb).astype("<f4")
        if scale_kind == "negative":
            d = -np.abs(d)
        b[:, 0:4] = d.view(np.uint8).reshape(nb, 4)
        # bsums are not read by the dequantizer; keep them consistent all the same
        q = b[:, 4:260].view(np.int8).astype(np.int32)
        b[:, 260:292] = q.reshape(nb, 16, 16).sum(axis=2).astype("<i2").view(np.uint8)
    return b


def extreme_blocks(name):
    """Largest scales with all-ones and all-zeros quant bits; and one all-zero block."""
    _, _, size = gf.TYPES[name]
    top = np.full(size, 0xFF, dtype=np.uint8)
    bottom = np.zeros(size, dtype=np.uint8)
    big, nbig = f16(65504.0), f16(-65504.0)
    if name == "q6_K":
        top[208:210], bottom[208:210] = big, nbig
    elif name == "q8_K":
        top[0:4] = np.array([3.0e38], dtype="<f4").view(np.uint8)
        bottom[0:4] = np.array([-1.0e-30], dtype="<f4").view(np.uint8)
        top[260:292] = np.full(16, -16, dtype="<i2").view(np.uint8)   # 16 * (int8)0xFF
    else:
        top[0:2], bottom[0:2] = big, nbig
        if name in ("q4_1", "q5_1", "q8_1", "q4_K", "q5_K"):
            top[2:4], bottom[2:4] = nbig, big
    return np.stack([top, bottom, np.zeros(size, dtype=np.uint8)])


def float_bits(rng, n):
    """Random finite f16/bf16 bit patterns plus the special ones (no NaN)."""
    h = rng.integers(0, 65536, size=n, dtype=np.uint32).astype(np.uint16)
    special = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00,
                        0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7F80, 0xFF80, 0x0080, 0x007F],
                       dtype=np.uint16)
    return np.concatenate([special, h])


# --------------------------------------------------------------------------------------
# inputs for the quantization records
# --------------------------------------------------------------------------------------

def quant_inputs(rng, name):
    """(label, values) pairs: random data at a few block counts and the edge cases."""
    qk = gf.TYPES[name][1]
    kq = qk == 256
    cases = []
    nb_rand = 2 if kq else 6
    cases.append(("gauss", rng.normal(0, 1, nb_rand * qk)))
    cases.append(("gauss_1block", rng.normal(0, 0.02, qk)))
    cases.append(("uniform_pos", rng.uniform(2.0, 3.0, qk)))        # min > 0
    cases.append(("uniform_neg", rng.uniform(-3.0, -2.0, qk)))      # max < 0
    heavy = rng.standard_t(3, qk) * 0.1
    cases.append(("heavy_tail", heavy))
    cases.append(("zero", np.zeros(qk)))
    cases.append(("const_pos", np.full(qk, 0.75)))
    cases.append(("const_neg", np.full(qk, -1.5)))
    onehot = np.zeros(qk)
    onehot[qk // 3] = -2.5
    cases.append(("onehot", onehot))
    # two elements of equal magnitude and opposite sign: the first one sets the sign of d
    tie = rng.normal(0, 0.1, qk)
    tie[3], tie[qk - 2] = 1.0, -1.0
    cases.append(("abs_tie_pos_first", tie))
    tie2 = tie.copy()
    tie2[3], tie2[qk - 2] = -1.0, 1.0
    cases.append(("abs_tie_neg_first", tie2))
    # exact rounding boundaries: amax 127 (Q8 scale 1), 8 or 16 (Q4/Q5 scale 1), halves
    halves = (rng.integers(-254, 255, qk) / 2.0)
    halves[0] = 127.0
    cases.append(("halves_127", halves))
    h8 = rng.integers(-16, 16, qk) / 2.0
    h8[1] = -8.0
    cases.append(("halves_8", h8))
    h16 = rng.integers(-32, 32, qk) / 2.0
    h16[2] = -16.0
    cases.append(("halves_16", h16))
    sparse = np.where(rng.random(qk) < 0.1, rng.normal(0, 3, qk), 0.0)
    cases.append(("sparse", sparse))
    cases.append(("tiny", rng.normal(0, 1e-30, qk)))
    if kq:
        cases.append(("large", rng.normal(0, 3e3, qk)))
        # one sub-block much larger than the rest: the others get small 6-bit scales
        mixed = rng.normal(0, 0.01, qk)
        mixed[32:64] *= 300.0
        cases.append(("mixed_subblocks", mixed))
        half_zero = rng.normal(0, 1, qk)
        half_zero[: qk // 2] = 0.0
        cases.append(("half_zero", half_zero))
    else:
        cases.append(("huge", rng.normal(0, 1e30, qk)))             # d overflows f16
        cases.append(("large", rng.normal(0, 6e4, 2 * qk)))
    if kq:   # 1 KiB of input per super-block: keep the file small (< 200 KB in all)
        skip = {"uniform_neg", "const_neg", "abs_tie_neg_first", "halves_8", "halves_16"}
        cases = [c for c in cases if c[0] not in skip]
    return [(label, np.asarray(v, dtype=F32)) for label, v in cases]


# --------------------------------------------------------------------------------------
# self-consistency of the Python side (cheap; the real check is the C comparison)
# --------------------------------------------------------------------------------------

def self_check(rng):
    sc = rng.integers(0, 64, size=(50, 8))
    m = rng.integers(0, 64, size=(50, 8))
    s2, m2 = gf.unpack_k_scales(gf.pack_k_scales(sc, m))
    assert (s2 == sc).all() and (m2 == m).all(), "K scale packing"
    x = rng.normal(0, 1, 4096).astype(F32)
    limits = {"q4_0": 0.12, "q4_1": 0.12, "q5_0": 0.06, "q5_1": 0.06, "q8_0": 0.01,
              "q8_1": 0.01, "q4_K": 0.10, "q5_K": 0.05, "q6_K": 0.025, "q8_K": 0.01,
              "f16": 1e-3, "bf16": 5e-3}
    for name, lim in limits.items():
        y = gf.dequantize(name, gf.quantize(name, x))
        rel = float(np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2)))
        assert rel < lim, (name, rel)
        print(f"  {name:5s} round-trip relative RMS error {rel:.5f}")
    q = np.frombuffer(gf.quantize("q8_K", x), dtype=np.uint8).reshape(-1, 292)
    qs = q[:, 4:260].view(np.int8).astype(np.int32).reshape(-1, 16, 16).sum(axis=2)
    assert (q[:, 260:292].copy().view("<i2") == qs).all(), "q8_K bsums"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/golden_blocks.bin"
    rng = np.random.default_rng(SEED)
    self_check(np.random.default_rng(SEED + 1))
    w = Writer()
    for name in BLOCK_TYPES:
        nb = 2 if gf.TYPES[name][1] == 256 else 12
        w.dequant(name, "random", random_blocks(rng, name, nb))
        w.dequant(name, "random_negative", random_blocks(rng, name, 1 if nb == 3 else 4, "negative"))
        if name != "q8_K":
            w.dequant(name, "subnormal_scale", random_blocks(rng, name, 1, "subnormal"))
        w.dequant(name, "extremes", extreme_blocks(name))
    for name in ("f16", "bf16"):
        bits = float_bits(rng, 240)
        if name == "bf16":   # keep bf16 NaN-free too: exponent all-ones with mantissa != 0
            bits = bits[~(((bits & 0x7F80) == 0x7F80) & ((bits & 0x7F) != 0))]
        else:
            bits = bits[~(((bits & 0x7C00) == 0x7C00) & ((bits & 0x3FF) != 0))]
        w.dequant(name, "bits", bits.astype("<u2").tobytes())
    for name in BLOCK_TYPES:
        for label, x in quant_inputs(rng, name):
            w.quant(name, label, x)
    for k, name in enumerate(BLOCK_TYPES + ["f16", "bf16"]):
        w.quant_gen(name, "generated", 1000 + k, 1024 * 256)
    for name in ("f16", "bf16"):
        x = np.concatenate([
            rng.normal(0, 1, 200), rng.normal(0, 1e-6, 50), rng.normal(0, 3e4, 50),
            [0.0, -0.0, 65504.0, 65519.0, 65520.0, -65520.0, 1e-8, -3e-8, 5.9604645e-08,
             2.98e-08, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, np.inf, -np.inf, 3.0e38, 1e-40,
             1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8]]).astype(F32)
        x = np.concatenate([x, (rng.integers(0, 2 ** 32, 200, dtype=np.uint64).astype(np.uint32)
                                & 0xFF7FFFFF).view(F32)])   # random bits, exponent never all-ones
        w.quant(name, "values", x)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    w.write(out)
    print(f"wrote {out}: {len(w.records)} records, {w.size} bytes")


if __name__ == "__main__":
    main()
