"""ggml_formats.py: an independent NumPy implementation of the ggml tensor formats spex uses.

What it is: the second implementation that spex's C reference (src/tensor/quant_ref*.c) is
checked against, bit for bit. It is written from the format descriptions below (byte
layouts, value equations, rounding rules), vectorised over blocks, and is deliberately not a
line-by-line translation of the C. It dequantizes every type (F16, BF16, Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, Q8_1, Q4_K, Q5_K, Q6_K, Q8_K) and quantizes all of them too: the simple types
by their closed-form rules, the K-quants by the scale searches of ggml's reference quantizer
(what llama.cpp runs without an importance matrix).
What it is not: fast, or a GGUF reader (gen_golden.py writes its own small container).

Every computation is done in float32 with numpy's IEEE operations, in the order the format
specifies; a float64 intermediate would change last bits. Inputs must be finite (NaN
handling is left to each implementation).

Formats (all little-endian; "f16" is IEEE binary16; offsets in bytes):

  type  id  QK  bytes  layout                                   value of element e
  f16    1   1    2    binary16                                 exact widening
  bf16  30   1    2    top 16 bits of binary32                  exact widening
  q4_0   2  32   18    d f16 @0, qs[16] @2                       d*(c-8)
  q4_1   3  32   20    d @0, m f16 @2, qs[16] @4                 d*c + m
  q5_0   6  32   22    d @0, qh u32 @2, qs[16] @6                d*(c-16)
  q5_1   7  32   24    d @0, m @2, qh u32 @4, qs[16] @8          d*c + m
  q8_0   8  32   34    d @0, q i8[32] @2                         d*q
  q8_1   9  32   36    d @0, s f16 @2, q i8[32] @4               d*q   (s = d*sum(q))
  q4_K  12 256  144    d @0, dmin @2, scales[12] @4, qs[128] @16                 (d*sc_j)*c - dmin*m_j
  q5_K  13 256  176    d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48     (d*sc_j)*c - dmin*m_j
  q6_K  14 256  210    ql[128] @0, qh[64] @128, scales i8[16] @192, d f16 @208   (d*sc_k)*(c-32)
  q8_K  15 256  292    d f32 @0, q i8[256] @4, bsums i16[16] @260                d*q

Code c of element e:
  q4_0/q4_1: e < 16: low nibble of qs[e]; e >= 16: high nibble of qs[e-16].
  q5_0/q5_1: the same 4 bits, plus bit e of qh as bit 4.
  q4_K: sub-block j = e // 32 (8 of them), l = e % 32: nibble (j % 2) of qs[32*(j//2) + l].
  q5_K: as q4_K, plus bit j of qh[l] as bit 4.
  q6_K: half h = e // 128, r = e % 128, g = r // 32, l = r % 32: the low 4 bits are nibble
        (g // 2) of ql[64h + 32*(g % 2) + l], the high 2 bits are bits 2g..2g+1 of
        qh[32h + l]; the scale is scales[e // 16].
  K_SCALE packing (q4_K, q5_K): 8 six-bit scales sc_j and mins m_j in 12 bytes; for
        j = 0..3: sc_j = bits 0-5 of byte j, m_j = bits 0-5 of byte 4+j,
        sc_{j+4} = low nibble of byte 8+j | (bits 6-7 of byte j) << 4,
        m_{j+4} = high nibble of byte 8+j | (bits 6-7 of byte 4+j) << 4.

Quantization rules (simple types): the block scale is computed in float32 and stored
rounded to f16 (nearest even), but codes use the unrounded float32 inverse id = 1/d
(0 when d == 0).
  q4_0: mx = first element of largest |x| (sign kept); d = mx / -8; c = min(15, trunc(x*id + 8.5))
  q5_0: d = mx / -16; c = min(31, trunc(x*id + 16.5))
  q4_1: lo = min, hi = max; d = (hi-lo)/15; m = lo; c = min(15, trunc((x-lo)*id + 0.5))
  q5_1: d = (hi-lo)/31; c = min(31, trunc((x-lo)*id + 0.5))
  q8_0: d = max|x| / 127; q = round-half-away-from-zero(x*id); q8_1 adds s = f16(d*sum(q))
  q8_K: mx as q4_0; iscale = -127/mx; q = min(127, round-half-even(iscale*x)); d = 1/iscale
  (every "x*id + 8.5" is a float32 multiply, then a float32 add, then truncation.)
"""

import numpy as np

F32 = np.float32

# name -> (ggml type id, elements per block, bytes per block)
TYPES = {
    "f32": (0, 1, 4),
    "f16": (1, 1, 2),
    "q4_0": (2, 32, 18),
    "q4_1": (3, 32, 20),
    "q5_0": (6, 32, 22),
    "q5_1": (7, 32, 24),
    "q8_0": (8, 32, 34),
    "q8_1": (9, 32, 36),
    "q4_K": (12, 256, 144),
    "q5_K": (13, 256, 176),
    "q6_K": (14, 256, 210),
    "q8_K": (15, 256, 292),
    "bf16": (30, 1, 2),
}
TYPE_BY_ID = {v[0]: k for k, v in TYPES.items()}


# --------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------

def _blocks(raw, name):
    _, qk, size = TYPES[name]
    a = np.frombuffer(bytes(raw), dtype=np.uint8)
    if a.size % size:
        raise ValueError(f"{name}: {a.size} bytes is not a whole number of {size}-byte blocks")
    return a.reshape(-1, size)


def _f16_field(b, off):
    """float32 values of the f16 at byte offset `off` of every block row."""
    return np.ascontiguousarray(b[:, off:off + 2]).view("<f2")[:, 0].astype(F32)


def _u32_field(b, off):
    return np.ascontiguousarray(b[:, off:off + 4]).view("<u4")[:, 0]


def f32_to_f16_bits(x):
    """IEEE binary16 bits, round to nearest even (numpy's float32 -> float16 cast)."""
    with np.errstate(over="ignore"):   # overflow to +-inf is the defined result
        return np.asarray(x, dtype=F32).astype(np.float16).view(np.uint16)


def f16_bits_to_f32(h):
    return np.asarray(h, dtype=np.uint16).view(np.float16).astype(F32)


def _f16_round(x):
    """float32 value of x after a trip through f16 (what a dequantizer will read back)."""
    return f16_bits_to_f32(f32_to_f16_bits(x))


def f32_to_bf16_bits(x):
    """bfloat16 bits: keep the top half of the binary32, round to nearest even on the rest.
    NaN becomes a quiet NaN of the same sign (the top half with bit 6 set)."""
    u = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    top, rest = u >> 16, u & 0xFFFF
    up = (rest > 0x8000) | ((rest == 0x8000) & ((top & 1) == 1))
    out = (top + up) & 0xFFFF
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    out = np.where(nan, top | 0x40, out)
    return out.astype(np.uint16)


def bf16_bits_to_f32(h):
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << 16).view(F32)


def _round_half_away(v):
    """C roundf on float32 values (done in float64, where |v| + 0.5 is exact)."""
    v = v.astype(np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _signed_absmax(xb):
    """Per row: the first element of largest magnitude, with its sign."""
    idx = np.argmax(np.abs(xb), axis=1)
    mx = xb[np.arange(xb.shape[0]), idx]
    return np.where(mx == 0, F32(0), mx).astype(F32)   # +0 when nothing is larger than 0


def _seq_sum(terms):
    """Left-to-right float32 sum along axis 1 (the C loops' order; np.sum pairs terms)."""
    acc = np.zeros(terms.shape[0], dtype=F32)
    for i in range(terms.shape[1]):
        acc = acc + terms[:, i]
    return acc


def _nibbles_32(qs):
    """(nb, 16) bytes -> (nb, 32) codes: low nibbles are elements 0..15, high 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)


def _bits_32(qh):
    """(nb,) uint32 -> (nb, 32) bit e of each."""
    return ((qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)


# --------------------------------------------------------------------------------------
# dequantization
# --------------------------------------------------------------------------------------

def _deq_q4_0(b):
    d = _f16_field(b, 0)
    c = _nibbles_32(b[:, 2:18])
    return (c - 8).astype(F32) * d[:, None]


def _deq_q4_1(b):
    d, m = _f16_field(b, 0), _f16_field(b, 2)
    c = _nibbles_32(b[:, 4:20])
    return c.astype(F32) * d[:, None] + m[:, None]


def _deq_q5_0(b):
    d = _f16_field(b, 0)
    c = _nibbles_32(b[:, 6:22]) | (_bits_32(_u32_field(b, 2)) << 4)
    return (c - 16).astype(F32) * d[:, None]


def _deq_q5_1(b):
    d, m = _f16_field(b, 0), _f16_field(b, 2)
    c = _nibbles_32(b[:, 8:24]) | (_bits_32(_u32_field(b, 4)) << 4)
    return c.astype(F32) * d[:, None] + m[:, None]


def _deq_q8_0(b):
    d = _f16_field(b, 0)
    q = b[:, 2:34].view(np.int8).astype(F32)
    return q * d[:, None]


def _deq_q8_1(b):
    d = _f16_field(b, 0)
    q = b[:, 4:36].view(np.int8).astype(F32)
    return q * d[:, None]


def unpack_k_scales(s):
    """(nb, 12) packed bytes -> (sc, m), each (nb, 8) ints in 0..63."""
    s = s.astype(np.int32)
    sc = np.empty((s.shape[0], 8), dtype=np.int32)
    m = np.empty_like(sc)
    for j in range(4):
        sc[:, j] = s[:, j] & 0x3F
        m[:, j] = s[:, 4 + j] & 0x3F
        sc[:, 4 + j] = (s[:, 8 + j] & 0x0F) | ((s[:, j] >> 6) << 4)
        m[:, 4 + j] = (s[:, 8 + j] >> 4) | ((s[:, 4 + j] >> 6) << 4)
    return sc, m


def pack_k_scales(sc, m):
    """Inverse of unpack_k_scales: (nb, 8) values in 0..63 -> (nb, 12) bytes."""
    sc = np.asarray(sc, dtype=np.int32)
    m = np.asarray(m, dtype=np.int32)
    out = np.zeros((sc.shape[0], 12), dtype=np.int32)
    for j in range(4):
        out[:, j] = sc[:, j] | ((sc[:, 4 + j] >> 4) << 6)
        out[:, 4 + j] = m[:, j] | ((m[:, 4 + j] >> 4) << 6)
        out[:, 8 + j] = (sc[:, 4 + j] & 0x0F) | ((m[:, 4 + j] & 0x0F) << 4)
    return out.astype(np.uint8)


_E = np.arange(256)
_KJ, _KL = _E // 32, _E % 32                     # q4_K/q5_K: sub-block, lane
_K4_BYTE = 32 * (_KJ // 2) + _KL                 # byte of qs holding element e
_K4_SHIFT = 4 * (_KJ % 2)                        # nibble of that byte
_6H, _6R = _E // 128, _E % 128                   # q6_K: half, rest
_6G, _6L = _6R // 32, _6R % 32
_6QL_BYTE = 64 * _6H + 32 * (_6G % 2) + _6L
_6QL_SHIFT = 4 * (_6G // 2)
_6QH_BYTE = 32 * _6H + _6L
_6QH_SHIFT = 2 * _6G


def k4_codes(qs):
    """(nb, 128) bytes -> (nb, 256) 4-bit codes in element order (q4_K/q5_K low bits)."""
    return ((qs[:, _K4_BYTE] >> _K4_SHIFT) & 0x0F).astype(np.int32)


def _deq_kq(b, with_qh):
    d, dmin = _f16_field(b, 0), _f16_field(b, 2)
    sc, m = unpack_k_scales(b[:, 4:16])
    if with_qh:
        qh, qs = b[:, 16:48], b[:, 48:176]
        c = k4_codes(qs) | (((qh[:, _KL] >> _KJ) & 1).astype(np.int32) << 4)
    else:
        c = k4_codes(b[:, 16:144])
    dj = d[:, None] * sc.astype(F32)          # (nb, 8): exact products
    mj = dmin[:, None] * m.astype(F32)
    return dj[:, _KJ] * c.astype(F32) - mj[:, _KJ]


def _deq_q6_K(b):
    ql, qh = b[:, 0:128], b[:, 128:192]
    sc = b[:, 192:208].view(np.int8).astype(F32)
    d = _f16_field(b, 208)
    lo = (ql[:, _6QL_BYTE] >> _6QL_SHIFT) & 0x0F
    hi = (qh[:, _6QH_BYTE] >> _6QH_SHIFT) & 0x03
    c = (lo.astype(np.int32) | (hi.astype(np.int32) << 4)) - 32
    dk = d[:, None] * sc                       # (nb, 16)
    return dk[:, _E // 16] * c.astype(F32)


def _deq_q8_K(b):
    d = np.ascontiguousarray(b[:, 0:4]).view("<f4")[:, 0].astype(F32)
    q = b[:, 4:260].view(np.int8).astype(F32)
    return d[:, None] * q


_DEQ = {
    "q4_0": _deq_q4_0, "q4_1": _deq_q4_1, "q5_0": _deq_q5_0, "q5_1": _deq_q5_1,
    "q8_0": _deq_q8_0, "q8_1": _deq_q8_1,
    "q4_K": lambda b: _deq_kq(b, False), "q5_K": lambda b: _deq_kq(b, True),
    "q6_K": _deq_q6_K, "q8_K": _deq_q8_K,
}


def dequantize(name, raw):
    """Raw bytes of whole blocks -> float32 array of their values."""
    if name == "f32":
        return np.frombuffer(bytes(raw), dtype="<f4").astype(F32)
    if name == "f16":
        return f16_bits_to_f32(np.frombuffer(bytes(raw), dtype="<u2"))
    if name == "bf16":
        return bf16_bits_to_f32(np.frombuffer(bytes(raw), dtype="<u2"))
    b = _blocks(raw, name)
    with np.errstate(all="ignore"):
        return _DEQ[name](b).astype(F32).reshape(-1)


# --------------------------------------------------------------------------------------
# quantization: simple types
# --------------------------------------------------------------------------------------

def _inverse(d):
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)


def _pack_nibbles_32(c):
    return (c[:, :16] | (c[:, 16:] << 4)).astype(np.uint8)


def _pack_qh(c):
    bits = ((c >> 4) & 1).astype(np.uint64) << np.arange(32, dtype=np.uint64)
    return bits.sum(axis=1).astype("<u4").view(np.uint8).reshape(-1, 4)


def _f16_bytes(v):
    return f32_to_f16_bits(v).astype("<u2").view(np.uint8).reshape(-1, 2)


def _q_signed(xb, div, top):
    """div = -8 or -16 (the extreme element gets code 0), top = 15 or 31."""
    d = (_signed_absmax(xb) / F32(div)).astype(F32)
    v = xb * _inverse(d)[:, None] + F32(-div + 0.5)   # float32 multiply, then add
    c = np.minimum(top, np.trunc(v)).astype(np.int32)
    return d, c


def _q_minmax(xb, top):
    lo, hi = xb.min(axis=1), xb.max(axis=1)
    d = ((hi - lo) / F32(top)).astype(F32)
    v = (xb - lo[:, None]) * _inverse(d)[:, None] + F32(0.5)
    c = np.minimum(top, np.trunc(v)).astype(np.int32)
    return d, lo, c


def _quant_q4_0(xb):
    d, c = _q_signed(xb, -8, 15)
    return np.hstack([_f16_bytes(d), _pack_nibbles_32(c & 0x0F)])


def _quant_q5_0(xb):
    d, c = _q_signed(xb, -16, 31)
    return np.hstack([_f16_bytes(d), _pack_qh(c), _pack_nibbles_32(c & 0x0F)])


def _quant_q4_1(xb):
    d, lo, c = _q_minmax(xb, 15)
    return np.hstack([_f16_bytes(d), _f16_bytes(lo), _pack_nibbles_32(c)])


def _quant_q5_1(xb):
    d, lo, c = _q_minmax(xb, 31)
    return np.hstack([_f16_bytes(d), _f16_bytes(lo), _pack_qh(c), _pack_nibbles_32(c & 0x0F)])


def _q8(xb):
    d = (np.abs(xb).max(axis=1) / F32(127)).astype(F32)
    q = _round_half_away(xb * _inverse(d)[:, None]).astype(np.int32)
    return d, q


def _quant_q8_0(xb):
    d, q = _q8(xb)
    return np.hstack([_f16_bytes(d), q.astype(np.int8).view(np.uint8)])


def _quant_q8_1(xb):
    d, q = _q8(xb)
    s = q.sum(axis=1).astype(F32) * d
    return np.hstack([_f16_bytes(d), _f16_bytes(s), q.astype(np.int8).view(np.uint8)])


def _quant_q8_K(xb):
    mx = _signed_absmax(xb)
    zero = mx == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = (F32(-127) / np.where(zero, F32(1), mx)).astype(F32)
        q = np.minimum(127, np.rint(iscale[:, None] * xb)).astype(np.int32)
        d = (F32(1) / iscale).astype(F32)
    q[zero] = 0
    d[zero] = 0
    bsums = q.reshape(-1, 16, 16).sum(axis=2).astype("<i2").view(np.uint8)
    return np.hstack([d.astype("<f4").view(np.uint8).reshape(-1, 4),
                      q.astype(np.int8).view(np.uint8), bsums.reshape(-1, 32)])


# --------------------------------------------------------------------------------------
# quantization: K-quants (ggml's reference scale searches, vectorised over sub-blocks)
# --------------------------------------------------------------------------------------

def _fit_asym(x, w, nmax, rmin, rdelta, nstep):
    """Asymmetric fit of rows x (R, n): x ~ scale*L + mn with L in 0..nmax, mn <= 0.

    Start from the min/max grid (mn = min(0, min x)); then for each trial inverse scale
    (nmax + rmin + rdelta*k) / (max - mn), k = 0..nstep, round (x - mn) to that grid and
    solve the weighted least squares for (scale, mn) given those codes (if the solved mn
    would be positive, mn = 0 and scale = sum w*l*x / sum w*l^2). Keep the codes with the
    smallest weighted squared error (strictly smaller than the best so far). Note that mn
    is the current best one: a trial that wins moves the grid of the trials after it.
    Returns (scale, -mn, L)."""
    R, n = x.shape
    lo = np.minimum(x.min(axis=1), F32(0))
    hi = x.max(axis=1)
    sum_w = _seq_sum(w)
    sum_x = _seq_sum(w * x)
    flat = hi == lo
    span = np.where(flat, F32(1), hi - lo).astype(F32)

    def grid(inv, mn):
        return np.clip(np.rint(inv[:, None] * (x - mn[:, None])), 0, nmax).astype(F32)

    def err(s, m, L):
        diff = s[:, None] * L + m[:, None] - x
        return _seq_sum(w * (diff * diff))

    inv = (F32(nmax) / span).astype(F32)
    scale = (F32(1) / inv).astype(F32)
    mn = lo.copy()
    L = grid(inv, mn)
    best = err(scale, mn, L)
    for k in range(nstep + 1):
        span = np.where(flat, F32(1), hi - mn).astype(F32)
        inv = ((F32(rmin) + F32(rdelta) * F32(k) + F32(nmax)) / span).astype(F32)
        La = grid(inv, mn)
        sum_l = _seq_sum(w * La)
        sum_l2 = _seq_sum(w * La * La)
        sum_xl = _seq_sum(w * La * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        ok = D > 0
        Ds = np.where(ok, D, F32(1))
        s = (sum_w * sum_xl - sum_x * sum_l) / Ds
        m = (sum_l2 * sum_x - sum_l * sum_xl) / Ds
        pos = m > 0
        s = np.where(pos, sum_xl / np.where(pos, sum_l2, F32(1)), s).astype(F32)
        m = np.where(pos, F32(0), m).astype(F32)
        e = err(s, m, La)
        take = ok & (e < best) & ~flat
        L[take] = La[take]
        best = np.where(take, e, best)
        scale = np.where(take, s, scale)
        mn = np.where(take, m, mn)
    scale = np.where(flat, F32(0), scale).astype(F32)
    L[flat] = 0
    return scale, (-mn).astype(F32), L.astype(np.int32)


def _fit_sym(x, nmax):
    """Symmetric fit of rows x (R, n): x ~ scale*l with l in -nmax..nmax-1, weights x^2.

    The trial inverse scales are -(nmax + k/10)/mx (mx: first element of largest |x|, sign
    kept), first k = 0, then k = -9..9 without 0; a trial replaces the current codes when
    (sum w*x*l)^2 / sum w*l^2 is larger. Returns (scale, L + nmax)."""
    mx = _signed_absmax(x)
    amax = np.abs(mx)
    zero = amax < F32(1e-15)
    mxs = np.where(zero, F32(1), mx).astype(F32)
    w = x * x

    def trial(inv):
        l = np.clip(np.rint(inv[:, None] * x), -nmax, nmax - 1).astype(F32)
        return l, _seq_sum(w * x * l), _seq_sum(w * l * l)

    l, sumlx, suml2 = trial((F32(-nmax) / mxs).astype(F32))
    L = l.copy()
    with np.errstate(all="ignore"):
        scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, F32(1)), F32(0)).astype(F32)
        best = scale * sumlx
        for k in range(-9, 10):
            if k == 0:
                continue
            inv = (-(F32(nmax) + F32(0.1) * F32(k)) / mxs).astype(F32)
            l, sumlx, suml2 = trial(inv)
            take = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            L[take] = l[take]
            s = (sumlx / np.where(suml2 > 0, suml2, F32(1))).astype(F32)
            scale = np.where(take, s, scale)
            best = np.where(take, s * sumlx, best).astype(F32)
    scale = np.where(zero, F32(0), scale).astype(F32)
    L = L.astype(np.int32) + nmax
    L[zero] = 0
    return scale, L


def _quant_kq(xb, nmax, rmin, rdelta, nstep):
    """q4_K / q5_K: returns (d bits, dmin bits, packed scales (nb,12), codes (nb,256))."""
    nb = xb.shape[0]
    xs = xb.reshape(nb * 8, 32)
    av = np.sqrt(_seq_sum(xs * xs) / F32(32)).astype(F32)
    w = (av[:, None] + np.abs(xs)).astype(F32)
    sc, mins, L = _fit_asym(xs, w, nmax, rmin, rdelta, nstep)
    sc, mins, L = sc.reshape(nb, 8), mins.reshape(nb, 8), L.reshape(nb, 256)
    max_sc = np.maximum(sc.max(axis=1), F32(0))
    max_mn = np.maximum(mins.max(axis=1), F32(0))
    inv_sc = np.where(max_sc > 0, F32(63) / np.where(max_sc > 0, max_sc, F32(1)), F32(0)).astype(F32)
    inv_mn = np.where(max_mn > 0, F32(63) / np.where(max_mn > 0, max_mn, F32(1)), F32(0)).astype(F32)
    ls = np.minimum(63, np.rint(inv_sc[:, None] * sc).astype(np.int64) & 0xFF)
    lm = np.minimum(63, np.rint(inv_mn[:, None] * mins).astype(np.int64) & 0xFF)
    d_bits = f32_to_f16_bits((max_sc / F32(63)).astype(F32))
    m_bits = f32_to_f16_bits((max_mn / F32(63)).astype(F32))
    # re-quantize every element against the rounded sub-block scale and min
    dj = f16_bits_to_f32(d_bits)[:, None] * ls.astype(F32)
    mj = f16_bits_to_f32(m_bits)[:, None] * lm.astype(F32)
    de, me = dj[:, _KJ], mj[:, _KJ]
    live = de != 0
    with np.errstate(all="ignore"):
        req = np.clip(np.rint((xb + me) / np.where(live, de, F32(1))), 0, nmax).astype(np.int32)
    L = np.where(live, req, L)
    return d_bits, m_bits, pack_k_scales(ls, lm), L


def _k4_pack(c):
    """(nb, 256) 4-bit codes -> (nb, 128) bytes (inverse of k4_codes)."""
    qs = np.zeros((c.shape[0], 128), dtype=np.int32)
    np.add.at(qs, (slice(None), _K4_BYTE), (c & 0x0F) << _K4_SHIFT)
    return qs.astype(np.uint8)


def _u16_bytes(bits):
    return bits.astype("<u2").view(np.uint8).reshape(-1, 2)


def _quant_q4_K(xb):
    d, m, s, L = _quant_kq(xb, 15, -1.0, 0.1, 20)
    return np.hstack([_u16_bytes(d), _u16_bytes(m), s, _k4_pack(L)])


def _quant_q5_K(xb):
    d, m, s, L = _quant_kq(xb, 31, -0.5, 0.1, 15)
    qh = np.zeros((xb.shape[0], 32), dtype=np.int32)
    np.add.at(qh, (slice(None), _KL), ((L >> 4) & 1) << _KJ)
    return np.hstack([_u16_bytes(d), _u16_bytes(m), s, qh.astype(np.uint8), _k4_pack(L)])


def _quant_q6_K(xb):
    nb = xb.shape[0]
    sc, L = _fit_sym(xb.reshape(nb * 16, 16), 32)
    sc, L = sc.reshape(nb, 16), L.reshape(nb, 256)
    mx = _signed_absmax(sc)
    zero = np.abs(mx) < F32(1e-15)
    with np.errstate(all="ignore"):
        iscale = (F32(-128) / np.where(zero, F32(1), mx)).astype(F32)
        d_bits = f32_to_f16_bits((F32(1) / iscale).astype(F32))
        isc = np.clip(np.rint(iscale[:, None] * sc), -128, 127).astype(np.int32)
        dk = f16_bits_to_f32(d_bits)[:, None] * isc.astype(F32)
        de = dk[:, _E // 16]
        live = de != 0
        req = np.clip(np.rint(xb / np.where(live, de, F32(1))), -32, 31).astype(np.int32) + 32
    L = np.where(live, req, L)
    ql = np.zeros((nb, 128), dtype=np.int32)
    qh = np.zeros((nb, 64), dtype=np.int32)
    np.add.at(ql, (slice(None), _6QL_BYTE), (L & 0x0F) << _6QL_SHIFT)
    np.add.at(qh, (slice(None), _6QH_BYTE), (L >> 4) << _6QH_SHIFT)
    out = np.hstack([ql.astype(np.uint8), qh.astype(np.uint8),
                     isc.astype(np.int8).view(np.uint8), _u16_bytes(d_bits)])
    out[zero] = 0
    return out


_QUANT = {
    "q4_0": _quant_q4_0, "q4_1": _quant_q4_1, "q5_0": _quant_q5_0, "q5_1": _quant_q5_1,
    "q8_0": _quant_q8_0, "q8_1": _quant_q8_1, "q8_K": _quant_q8_K,
    "q4_K": _quant_q4_K, "q5_K": _quant_q5_K, "q6_K": _quant_q6_K,
}


def quantize(name, x):
    """float32 values (a whole number of blocks, finite) -> raw bytes of the blocks."""
    x = np.ascontiguousarray(np.asarray(x, dtype=F32).reshape(-1))
    if name == "f32":
        return x.astype("<f4").tobytes()
    if name == "f16":
        return f32_to_f16_bits(x).astype("<u2").tobytes()
    if name == "bf16":
        return f32_to_bf16_bits(x).astype("<u2").tobytes()
    _, qk, size = TYPES[name]
    if x.size % qk:
        raise ValueError(f"{name}: {x.size} values is not a whole number of {qk}-blocks")
    with np.errstate(all="ignore"):
        out = _QUANT[name](x.reshape(-1, qk))
    assert out.shape[1] == size and out.dtype == np.uint8, (name, out.shape, out.dtype)
    return out.tobytes()
