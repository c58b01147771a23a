"""The wire protocol's encodings (docs/protocol.md, version 5): a frame's
header, a `Writer` and a `Reader` of the body's types, and the layouts of
the structures every operation shares. No I/O here."""

from __future__ import annotations

import struct
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

from .errors import ProtocolError

VERSION = 6
HEADER = struct.Struct(">IBBHQ")  # length, version, opcode, flags, request id
FLAG_RESPONSE = 0x1
FLAG_ERROR = 0x2
FLAG_FIELDS = 0x4
FRAME_MAX = 64 << 20
BATCH_MAX = 20

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_ID_SEQ = struct.Struct(">QQQ")  # u128 id (two halves), u64 seq
_TIMES = struct.Struct(">QQQ")

T = TypeVar("T")
# The builtins, for annotations inside classes whose methods take their names.
_Str = str
_Bytes = bytes


def frame(opcode: int, request_id: int, body: bytes) -> bytes:
    """A request frame of version 5."""
    return HEADER.pack(12 + len(body), VERSION, opcode, 0, request_id) + body


class Writer:
    """Writes a body's values, big-endian."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: List[_Bytes] = []

    def raw(self, b: _Bytes) -> "Writer":
        self.parts.append(b)
        return self

    def u8(self, v: int) -> "Writer":
        self.parts.append(bytes((v,)))
        return self

    def u16(self, v: int) -> "Writer":
        self.parts.append(_U16.pack(v))
        return self

    def u32(self, v: int) -> "Writer":
        self.parts.append(_U32.pack(v))
        return self

    def u64(self, v: int) -> "Writer":
        self.parts.append(_U64.pack(v))
        return self

    def boolean(self, v: bool) -> "Writer":
        return self.u8(1 if v else 0)

    def str(self, s: _Str) -> "Writer":
        b = s.encode()
        if len(b) > 0xFFFF:
            raise ValueError(f"a string of {len(b)} bytes: at most 65535")
        self.parts.append(_U16.pack(len(b)) + b)
        return self

    def bytes(self, b: _Bytes) -> "Writer":
        self.parts.append(_U32.pack(len(b)))
        self.parts.append(b)
        return self

    def count(self, n: int) -> "Writer":
        if n > 0xFFFF:
            raise ValueError(f"a list of {n} items: at most 65535")
        return self.u16(n)

    def opt(self, v: Optional[T], put: Callable[[T], object]) -> "Writer":
        if v is None:
            return self.u8(0)
        self.u8(1)
        put(v)
        return self

    def queue_ref(self, name: _Str, dlq: bool) -> "Writer":
        return self.str(name).boolean(dlq)

    def pairs(self, items: Dict[_Str, _Str]) -> "Writer":
        self.count(len(items))
        for k, v in items.items():
            self.str(k).str(v)
        return self

    def receipt(self, r: _Bytes) -> "Writer":
        if len(r) != 32:
            raise ValueError(f"a receipt is 32 bytes, not {len(r)}")
        self.parts.append(r)
        return self

    def done(self) -> _Bytes:
        return b"".join(self.parts)


class Reader:
    """Reads a body's values; a body must be read to its end."""

    __slots__ = ("buf", "at")

    def __init__(self, buf: _Bytes) -> None:
        self.buf = buf
        self.at = 0

    def _take(self, n: int) -> _Bytes:
        at = self.at
        if at + n > len(self.buf):
            raise ProtocolError("an answer ended before its fields did")
        self.at = at + n
        return self.buf[at : at + n]

    def u8(self) -> int:
        at = self.at
        if at >= len(self.buf):
            raise ProtocolError("an answer ended before its fields did")
        self.at = at + 1
        return self.buf[at]

    def u16(self) -> int:
        return _U16.unpack(self._take(2))[0]

    def u32(self) -> int:
        return _U32.unpack(self._take(4))[0]

    def u64(self) -> int:
        return _U64.unpack(self._take(8))[0]

    def u128(self) -> int:
        hi, lo = struct.unpack(">QQ", self._take(16))
        return (hi << 64) | lo

    def boolean(self) -> bool:
        v = self.u8()
        if v > 1:
            raise ProtocolError(f"a bool of {v}")
        return v == 1

    def str(self) -> _Str:
        n = self.u16()
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as e:
            raise ProtocolError(f"a string not UTF-8: {e}") from None

    def bytes(self) -> _Bytes:
        return self._take(self.u32())

    def opt(self, get: Callable[[], T]) -> Optional[T]:
        flag = self.u8()
        if flag == 0:
            return None
        if flag != 1:
            raise ProtocolError(f"an option flag of {flag}")
        return get()

    def list(self, get: Callable[[], T]) -> List[T]:
        return [get() for _ in range(self.u16())]

    def pairs(self) -> Dict[_Str, _Str]:
        out = {}
        for _ in range(self.u16()):
            k = self.str()
            out[k] = self.str()
        return out

    def receipt(self) -> _Bytes:
        return self._take(32)

    def error(self) -> Tuple[int, _Str]:
        code = self.u16()
        return code, self.str()

    def end(self) -> None:
        if self.at != len(self.buf):
            raise ProtocolError(f"{len(self.buf) - self.at} bytes left after an answer's fields")

    def left(self) -> int:
        return len(self.buf) - self.at
