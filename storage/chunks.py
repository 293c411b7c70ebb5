"""The chunk codec: one series' sealed samples (timestamps + columns of values) as one BLOB, lossless.

In the spirit of Prometheus / Gorilla, vectorised with numpy instead of bit-packed one sample at a time:

- timestamps: whole milliseconds (when every one is exactly ms / 1000, as the collectors stamp them)
  or else the float64 bit patterns as int64 (for times within one binade, as Unix seconds are for
  decades, the bit pattern is linear in the value), delta-of-delta encoded (a steady 1 Hz gives a run of
  zeros, a jittery one small numbers), zigzagged;
- float columns: each value's 64 bits XOR'd with the previous value's (an unchanged value is 0, a small
  change leaves the sign, exponent and top mantissa bytes 0);
- integer columns (counters, bitmasks, flags): deltas of the int64 values, zigzagged;
- a constant column is its one value; a column that is all NULL is nothing; NULLs otherwise are a
  packed bitmap, their slots repeating the previous value (so they cost a 0 word);
- every section's 64-bit words are byte-shuffled (all first bytes, then all second bytes, ...) so the
  zero bytes those encodings produce lie in long runs, then deflated (zlib, raw) on its own, so a
  reader of one column inflates the timestamps and that column only.

All arithmetic is on 64-bit integers with wrap-around, so every bit pattern comes back as it went in:
NaN payloads, infinities, -0.0, irregular timestamps, gaps, one-sample chunks.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

FORMAT_VERSION = 1
ZLIB_LEVEL = 6
ColumnKind = Literal["float", "int"]

_HEADER = struct.Struct("<BHI")  # format version, columns, samples
_SECTION = struct.Struct("<BI")  # section code, deflated bytes
# section codes
_ALL_NULL, _CONSTANT, _WORDS = 0, 1, 2
_MILLIS = 3  # timestamps only: whole milliseconds, delta-of-delta of the integers
_HAS_NULLS = 0x80  # flag: a packed NULL bitmap precedes the words
_INT = 0x40  # flag: the column holds int64 values (deltas), else float64 bit patterns (XOR)


class ChunkError(ValueError):
    """A BLOB that is not a chunk this codec wrote (truncated, another format version, corrupt)."""


@dataclass(frozen=True)
class ChunkColumn:
    """One column of a chunk: ``values`` (float64 or int64, one per sample) and ``present`` (False where
    the sample has no value, SQL NULL; None: every sample has one)."""

    values: npt.NDArray[np.float64] | npt.NDArray[np.int64]
    present: npt.NDArray[np.bool_] | None = None


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(ZLIB_LEVEL, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def _inflate(data: bytes) -> bytes:
    try:
        return zlib.decompress(data, -15)
    except zlib.error as exc:
        raise ChunkError(f"chunk: a section does not inflate ({exc})") from None


def _shuffle(words: npt.NDArray[np.uint64]) -> bytes:
    return np.ascontiguousarray(words.view(np.uint8).reshape(-1, 8).T).tobytes()


def _unshuffle(data: bytes, n: int) -> npt.NDArray[np.uint64]:
    if len(data) != 8 * n:
        raise ChunkError(f"chunk: a section holds {len(data)} bytes, expected {8 * n}")
    planes = np.frombuffer(data, dtype=np.uint8).reshape(8, n)
    return np.ascontiguousarray(planes.T).view(np.uint64).reshape(n)


def _zigzag(x: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    return ((x << 1) ^ (x >> 63)).view(np.uint64)


def _unzigzag(u: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    return ((u >> np.uint64(1)).view(np.int64)) ^ -((u & np.uint64(1)).view(np.int64))


def _deltas(x: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """x[0], x[1]-x[0], x[2]-x[1], ... (wrapping)."""
    out = np.empty_like(x)
    out[:1] = x[:1]
    with np.errstate(over="ignore"):
        np.subtract(x[1:], x[:-1], out=out[1:])
    return out


def _whole_millis(ts: npt.NDArray[np.float64]) -> npt.NDArray[np.int64] | None:
    """``ts`` as integer milliseconds when every one of them is exactly ``ms / 1000`` (bit for bit, as the
    decoder computes it: collectors stamp samples to the millisecond, as Prometheus does), else None."""
    if not np.isfinite(ts).all() or np.abs(ts).max() >= 2.0**52 / 1000:
        return None
    ms = np.round(ts * 1000.0).astype(np.int64)
    if not np.array_equal((ms.astype(np.float64) / 1000.0).view(np.uint64), ts.view(np.uint64)):
        return None  # -0.0 included: it comes back as 0.0
    return ms


def _encode_timestamps(ts: npt.NDArray[np.float64]) -> tuple[int, bytes]:
    ts = np.ascontiguousarray(ts, dtype=np.float64)
    ms = _whole_millis(ts)
    if ms is not None:  # a steady 1 Hz is then a run of zeros, a jitter of a few ms a byte
        return _MILLIS, _deflate(_shuffle(_zigzag(_deltas(_deltas(ms)))))
    return _WORDS, _deflate(_shuffle(_zigzag(_deltas(_deltas(ts.view(np.int64))))))


def _decode_timestamps(code: int, data: bytes, n: int) -> npt.NDArray[np.float64]:
    dod = _unzigzag(_unshuffle(_inflate(data), n))
    values = np.cumsum(np.cumsum(dod, dtype=np.int64), dtype=np.int64)
    if code == _MILLIS:
        return values.astype(np.float64) / 1000.0
    if code == _WORDS:
        return values.view(np.float64)
    raise ChunkError(f"chunk: unknown timestamp code {code}")


def _words(column: ChunkColumn) -> tuple[npt.NDArray[np.uint64], ColumnKind]:
    if column.values.dtype == np.float64:
        return np.ascontiguousarray(column.values).view(np.uint64), "float"
    if column.values.dtype == np.int64:
        return np.ascontiguousarray(column.values).view(np.uint64), "int"
    raise TypeError(f"chunk column: values must be float64 or int64, not {column.values.dtype}")


def _fill_forward(words: npt.NDArray[np.uint64], present: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint64]:
    """NULL slots take the previous present word (the first present one before any): XOR / delta 0."""
    idx = np.where(present, np.arange(len(words)), 0)
    np.maximum.accumulate(idx, out=idx)
    first = int(np.argmax(present))
    idx[: first + 1] = first
    return words[idx]


def _encode_column(column: ChunkColumn, n: int) -> tuple[int, bytes]:
    words, kind = _words(column)
    if len(words) != n:
        raise ValueError(f"chunk column: {len(words)} values for {n} timestamps")
    present = column.present
    if present is not None and bool(present.all()):
        present = None
    int_flag = _INT if kind == "int" else 0
    if present is not None and not present.any():
        return _ALL_NULL | int_flag, b""
    if present is not None:
        words = _fill_forward(words, np.asarray(present, dtype=np.bool_))
    bitmap = b"" if present is None else np.packbits(present).tobytes()
    flag = int_flag | (0 if present is None else _HAS_NULLS)
    if bool((words == words[0]).all()):
        return _CONSTANT | flag, _deflate(bitmap + words[:1].tobytes())
    if kind == "float":
        encoded = words.copy()
        encoded[1:] ^= words[:-1]
    else:
        encoded = _zigzag(_deltas(words.view(np.int64)))
    return _WORDS | flag, _deflate(bitmap + _shuffle(encoded))


def encode(ts: npt.NDArray[np.float64], columns: Sequence[ChunkColumn]) -> bytes:
    """One chunk: ``n`` timestamps (any order; kept as given) and, per column, ``n`` values."""
    n = len(ts)
    if n < 1:
        raise ValueError("chunk: needs at least one sample")
    sections = [_encode_timestamps(np.asarray(ts, dtype=np.float64))]
    sections += [_encode_column(c, n) for c in columns]
    head = _HEADER.pack(FORMAT_VERSION, len(columns), n)
    table = b"".join(_SECTION.pack(code, len(body)) for code, body in sections)
    return head + table + b"".join(body for _, body in sections)


@dataclass(frozen=True)
class Chunk:
    """A chunk's layout, read from its header; ``timestamps()`` and ``column(k)`` inflate what is asked."""

    blob: bytes
    n: int
    codes: tuple[int, ...]  # per section: timestamps, then each column
    offsets: tuple[int, ...]  # per section: where its bytes start; offsets[-1] is the end

    @classmethod
    def parse(cls, blob: bytes) -> Chunk:
        blob = bytes(blob)
        if len(blob) < _HEADER.size:
            raise ChunkError("chunk: shorter than its header")
        version, ncols, n = _HEADER.unpack_from(blob)
        if version != FORMAT_VERSION:
            raise ChunkError(f"chunk: format version {version}, this spectower reads {FORMAT_VERSION}")
        pos = _HEADER.size + _SECTION.size * (ncols + 1)
        if len(blob) < pos:
            raise ChunkError("chunk: its section table is cut short")
        codes, offsets = [], [pos]
        for k in range(ncols + 1):
            code, size = _SECTION.unpack_from(blob, _HEADER.size + _SECTION.size * k)
            codes.append(code)
            offsets.append(offsets[-1] + size)
        if offsets[-1] != len(blob):
            raise ChunkError(f"chunk: {len(blob)} bytes, its sections add up to {offsets[-1]}")
        return cls(blob, n, tuple(codes), tuple(offsets))

    def _section(self, k: int) -> bytes:
        return self.blob[self.offsets[k] : self.offsets[k + 1]]

    def timestamps(self) -> npt.NDArray[np.float64]:
        return _decode_timestamps(self.codes[0], self._section(0), self.n)

    def column(self, k: int) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        """Column ``k``'s values (float64 or int64, as they were given) and where they are present."""
        n, code = self.n, self.codes[k + 1]
        kind: ColumnKind = "int" if code & _INT else "float"
        dtype = np.float64 if kind == "float" else np.int64
        if code & ~_INT == _ALL_NULL:
            return np.zeros(n, dtype=dtype), np.zeros(n, dtype=np.bool_)
        data = _inflate(self._section(k + 1))
        present = np.ones(n, dtype=np.bool_)
        if code & _HAS_NULLS:
            nbitmap = (n + 7) // 8
            present = np.unpackbits(np.frombuffer(data[:nbitmap], dtype=np.uint8), count=n).astype(np.bool_)
            data = data[nbitmap:]
        base = code & ~(_HAS_NULLS | _INT)
        if base == _CONSTANT:
            if len(data) != 8:
                raise ChunkError("chunk: a constant column is not one word")
            words = np.full(n, np.frombuffer(data, dtype=np.uint64)[0], dtype=np.uint64)
        elif base == _WORDS:
            encoded = _unshuffle(data, n)
            if kind == "float":
                words = np.bitwise_xor.accumulate(encoded)
            else:
                words = np.cumsum(_unzigzag(encoded), dtype=np.int64).view(np.uint64)
        else:
            raise ChunkError(f"chunk: unknown section code {code}")
        return words.view(dtype), present
