"""gguf_io.py -- a minimal GGUF v3 reader and writer in pure Python + NumPy.

What it is: the file access of the NumPy reference (model_ref.py) and of the fixture
generator (make_fixtures.py). It reads and writes every metadata value type (nested
arrays included) and F32 / F16 tensors; tensors of any other ggml type are read as raw
bytes (model_ref.py dequantizes them with ggml_formats.py when asked to).

What it is not: a validator. It trusts its input far more than spex's C reader does
(src/gguf/reader.c, which is the one that must survive hostile files); a malformed file
here raises whatever Python raises. It is also independent of the C code on purpose:
it is written from the format description, so that the two can check each other.

Format (GGUF v3, little-endian; spex's docs/gguf.md and src/gguf/gguf.h summarise it):

    header   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    kv       n_kv x ( string key | u32 value_type | value )
    tinfo    n_tensors x ( string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset )
    padding  zeros up to a multiple of the alignment (general.alignment, default 32)
    data     tensor bytes; offsets are relative to the start of the data section

    string   u64 length | bytes
    array    u32 elem_type | u64 n | n x element (elements of type ARRAY nest)

Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array,
10 u64, 11 i64, 12 f64. Shapes are ggml `ne` order (ne[0] contiguous); the NumPy arrays
this module hands out have the reversed shape, so an `ne = {E, V}` matrix is a (V, E)
array whose row r is ne[1]-index r.

The writer lays files out as llama.cpp does (kvs in insertion order, tensor data in
insertion order, every tensor padded to the alignment, the last one too), so a file read
and written back is byte-identical to the original (checked on stories260K by
make_fixtures.py --check).
"""

import struct

import numpy as np

# value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)

VTYPE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
               "u64", "i64", "f64"]

# fixed-size value types: struct code (little-endian)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
           BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ... and the numpy dtype used for arrays of them
_NP = {U8: "<u1", I8: "<i1", U16: "<u2", I16: "<i2", U32: "<u4", I32: "<i4", F32: "<f4",
       BOOL: "<u1", U64: "<u8", I64: "<i8", F64: "<f8"}

# ggml tensor types this module converts to numpy; others stay raw bytes
GGML_F32, GGML_F16 = 0, 1
_GGML_NP = {GGML_F32: "<f4", GGML_F16: "<f2"}

# bytes per block and elements per block of the ggml types, for sizing raw tensors
_GGML_BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
               8: (32, 34), 9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144),
               13: (256, 176), 14: (256, 210), 15: (256, 292), 24: (1, 1), 25: (1, 2),
               26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2)}

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32


def _align(x, a):
    return (x + a - 1) // a * a


def ggml_nbytes(ggml_type, ne):
    """Bytes of a tensor of this type and shape (ne[0] must be a multiple of the block)."""
    qk, size = _GGML_BLOCK[ggml_type]
    n = int(np.prod(ne, dtype=np.int64))
    if ne[0] % qk:
        raise ValueError(f"ne[0] = {ne[0]} is not a multiple of the block size {qk}")
    return n // qk * size


class Value:
    """A typed metadata value. For arrays, `elem` is the element type and `value` a list
    (or, for numeric elements, a 1-D numpy array); nested arrays hold Values."""

    __slots__ = ("type", "value", "elem")

    def __init__(self, vtype, value, elem=None):
        self.type = vtype
        self.value = value
        self.elem = elem

    def __repr__(self):
        if self.type == ARRAY:
            return f"Value(array<{VTYPE_NAMES[self.elem]}>[{len(self.value)}])"
        return f"Value({VTYPE_NAMES[self.type]}, {self.value!r})"

    def __eq__(self, other):
        if not isinstance(other, Value) or self.type != other.type:
            return False
        if self.type != ARRAY:
            if self.type in (F32, F64):   # compare bits: NaN == NaN, -0 != +0
                code = _SCALAR[self.type]
                return struct.pack(code, self.value) == struct.pack(code, other.value)
            return self.value == other.value
        if self.elem != other.elem or len(self.value) != len(other.value):
            return False
        if self.elem in _NP:
            a = np.asarray(self.value, dtype=_NP[self.elem])
            b = np.asarray(other.value, dtype=_NP[other.elem])
            return a.tobytes() == b.tobytes()
        return all(x == y for x, y in zip(self.value, other.value))


# ------------------------------------------------------------------------------------
# reader
# ------------------------------------------------------------------------------------

class Tensor:
    """A tensor of a read file: name, ne (ggml order), ggml type, offset in the data
    section, and `data`: a read-only numpy view for F32/F16 (shape = reversed ne), the
    raw bytes (a uint8 view) for any other type."""

    __slots__ = ("name", "ne", "type", "offset", "nbytes", "data")

    def __repr__(self):
        return f"Tensor({self.name!r}, ne={self.ne}, type={self.type})"


class GGUFFile:
    """The parsed contents of one GGUF file: version, kv (dict key -> Value, in file
    order), tensors (dict name -> Tensor, in file order), alignment, data_offset."""

    def __init__(self, path_or_bytes):
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            self.buf = memoryview(bytes(path_or_bytes))
            self.path = "<memory>"
        else:
            with open(path_or_bytes, "rb") as f:
                self.buf = memoryview(f.read())
            self.path = str(path_or_bytes)
        self.pos = 0
        self._parse()

    # -- primitive readers ------------------------------------------------------------

    def _take(self, n):
        if self.pos + n > len(self.buf):
            raise ValueError(f"{self.path}: needs {n} bytes at offset {self.pos}, file has {len(self.buf)}")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def _scalar(self, vtype):
        code = _SCALAR[vtype]
        return struct.unpack(code, self._take(struct.calcsize(code)))[0]

    def _string(self):
        n = self._scalar(U64)
        return bytes(self._take(n)).decode("utf-8", errors="surrogateescape")

    def _value(self, vtype):
        if vtype == STRING:
            return Value(STRING, self._string())
        if vtype == ARRAY:
            elem = self._scalar(U32)
            n = self._scalar(U64)
            if elem in _NP:
                size = np.dtype(_NP[elem]).itemsize
                a = np.frombuffer(self._take(n * size), dtype=_NP[elem])
                if elem == BOOL:
                    a = a.astype(bool)
                return Value(ARRAY, a, elem)
            if elem == STRING:
                return Value(ARRAY, [self._string() for _ in range(n)], elem)
            if elem == ARRAY:
                items = []
                for _ in range(n):
                    items.append(self._value(ARRAY))
                return Value(ARRAY, items, elem)
            raise ValueError(f"{self.path}: unknown array element type {elem}")
        if vtype in _SCALAR:
            return Value(vtype, self._scalar(vtype))
        raise ValueError(f"{self.path}: unknown value type {vtype}")

    # -- the file -----------------------------------------------------------------------

    def _parse(self):
        if bytes(self._take(4)) != MAGIC:
            raise ValueError(f"{self.path}: not a GGUF file")
        self.version = self._scalar(U32)
        if self.version not in (2, 3):
            raise ValueError(f"{self.path}: GGUF version {self.version} not supported")
        n_tensors = self._scalar(U64)
        n_kv = self._scalar(U64)
        self.kv = {}
        for _ in range(n_kv):
            key = self._string()
            vtype = self._scalar(U32)
            self.kv[key] = self._value(vtype)
        self.alignment = DEFAULT_ALIGNMENT
        if "general.alignment" in self.kv:
            self.alignment = int(self.kv["general.alignment"].value)
        infos = []
        for _ in range(n_tensors):
            t = Tensor()
            t.name = self._string()
            n_dims = self._scalar(U32)
            t.ne = [self._scalar(U64) for _ in range(n_dims)]
            t.type = self._scalar(U32)
            t.offset = self._scalar(U64)
            t.nbytes = ggml_nbytes(t.type, t.ne)
            infos.append(t)
        self.data_offset = _align(self.pos, self.alignment)
        self.tensors = {}
        for t in infos:
            start = self.data_offset + t.offset
            if start + t.nbytes > len(self.buf):
                raise ValueError(f"{self.path}: tensor {t.name} runs past the end of the file")
            raw = self.buf[start:start + t.nbytes]
            if t.type in _GGML_NP:
                t.data = np.frombuffer(raw, dtype=_GGML_NP[t.type]).reshape(tuple(reversed(t.ne)))
            else:
                t.data = np.frombuffer(raw, dtype=np.uint8)
            self.tensors[t.name] = t

    # -- conveniences ---------------------------------------------------------------------

    def get(self, key, default=None):
        """The plain Python / numpy value of a key, or default."""
        v = self.kv.get(key)
        return default if v is None else v.value

    def tensor(self, name):
        """The numpy data of a tensor (see Tensor.data)."""
        return self.tensors[name].data


def read(path_or_bytes):
    return GGUFFile(path_or_bytes)


# ------------------------------------------------------------------------------------
# writer
# ------------------------------------------------------------------------------------

def _pack_string(s):
    b = s.encode("utf-8", errors="surrogateescape") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _pack_payload(v):
    """Bytes of a Value without its leading type."""
    if v.type == STRING:
        return _pack_string(v.value)
    if v.type == ARRAY:
        out = [struct.pack("<IQ", v.elem, len(v.value))]
        if v.elem in _NP:
            a = np.asarray(v.value)
            if v.elem == BOOL:
                a = a.astype(bool)
            out.append(np.ascontiguousarray(a, dtype=_NP[v.elem]).tobytes())
        elif v.elem == STRING:
            out.extend(_pack_string(s) for s in v.value)
        elif v.elem == ARRAY:
            for item in v.value:
                if not isinstance(item, Value) or item.type != ARRAY:
                    raise TypeError("elements of an array of arrays must be array Values")
                out.append(_pack_payload(item))
        else:
            raise ValueError(f"unknown array element type {v.elem}")
        return b"".join(out)
    return struct.pack(_SCALAR[v.type], v.value)


class Writer:
    """Collects kvs and tensors, then writes a GGUF v3 file.

        w = Writer()
        w.add("general.architecture", STRING, "qwen3")
        w.add("qwen3.block_count", U32, 3)
        w.add_array("tokenizer.ggml.tokens", STRING, ["a", "b"])
        w.add_tensor("token_embd.weight", np_array)   # shape (V, E) -> ne {E, V}
        w.write("model.gguf")
    """

    def __init__(self, alignment=DEFAULT_ALIGNMENT):
        self.kv = {}          # key -> Value, insertion order kept (setting again replaces in place)
        self.tensors = []     # (name, ne, ggml type, bytes)
        self.alignment = alignment
        if alignment != DEFAULT_ALIGNMENT:
            self.add("general.alignment", U32, alignment)

    def add(self, key, vtype, value):
        if vtype == ARRAY:
            raise ValueError("use add_array for arrays")
        self.kv[key] = Value(vtype, value)

    def add_array(self, key, elem, values):
        self.kv[key] = Value(ARRAY, values, elem)

    def add_value(self, key, value):
        self.kv[key] = value

    def add_tensor(self, name, data, ggml_type=GGML_F32, ne=None):
        """data: a numpy array (converted to F32 or F16; ne = reversed shape) or, for any
        other ggml type, raw bytes with ne given explicitly."""
        if ggml_type in _GGML_NP:
            a = np.ascontiguousarray(np.asarray(data), dtype=_GGML_NP[ggml_type])
            shape_ne = list(reversed(a.shape)) if a.ndim else [1]
            if ne is not None and list(ne) != shape_ne:
                raise ValueError(f"{name}: ne {ne} does not match the array's {shape_ne}")
            ne = shape_ne
            raw = a.tobytes()
        else:
            if ne is None:
                raise ValueError(f"{name}: raw tensors need ne")
            raw = bytes(data)
        if not 1 <= len(ne) <= 4:
            raise ValueError(f"{name}: {len(ne)} dimensions (GGUF tensors have 1..4)")
        if len(raw) != ggml_nbytes(ggml_type, ne):
            raise ValueError(f"{name}: {len(raw)} bytes for ne {ne} of type {ggml_type}")
        if any(t[0] == name for t in self.tensors):
            raise ValueError(f"duplicate tensor {name}")
        self.tensors.append((name, [int(x) for x in ne], ggml_type, raw))

    def to_bytes(self):
        out = [MAGIC, struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))]
        for key, v in self.kv.items():
            out.append(_pack_string(key))
            out.append(struct.pack("<I", v.type))
            out.append(_pack_payload(v))
        offset = 0
        offsets = []
        for name, ne, gtype, raw in self.tensors:
            out.append(_pack_string(name))
            out.append(struct.pack("<I", len(ne)))
            out.append(struct.pack(f"<{len(ne)}Q", *ne))
            out.append(struct.pack("<IQ", gtype, offset))
            offsets.append(offset)
            offset = _align(offset + len(raw), self.alignment)
        head = b"".join(out)
        body = [head, b"\0" * (_align(len(head), self.alignment) - len(head))]
        for (name, ne, gtype, raw) in self.tensors:
            body.append(raw)
            body.append(b"\0" * (_align(len(raw), self.alignment) - len(raw)))
        return b"".join(body)

    def write(self, path):
        data = self.to_bytes()
        with open(path, "wb") as f:
            f.write(data)
        return len(data)


def copy_writer(g):
    """A Writer holding everything of a read file (kvs, tensors as their bytes)."""
    w = Writer()
    w.kv = dict(g.kv)
    w.alignment = g.alignment
    for t in g.tensors.values():
        raw = t.data.tobytes()
        w.tensors.append((t.name, list(t.ne), t.type, raw))
    return w
