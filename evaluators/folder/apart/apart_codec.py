"""Plain data between an evolve program and its evaluator, which run apart (docs/security.md).

Both sides import this file by path: the program host (apart_host.py, in the program's sandbox)
and the evaluator's stand-in (apart_standin.py). Stdlib only; numpy when it is importable.

A value is encoded as a tagged tree, never with pickle or marshal: None, bool, int, float (nan and
inf included), str, bytes, list, tuple, dict, numpy arrays of bool and numeric dtypes and numpy
scalars. Anything else raises NotData naming its type. Decoding builds only those types, within
MAX_MESSAGE bytes and MAX_DEPTH levels, so what one side sends cannot run code on the other.
Messages cross a stream socket as an 8-byte length and the encoded value.
"""

from __future__ import annotations

import importlib
import socket
import struct
import sys
from typing import Any

MAX_MESSAGE = 256 << 20  # bytes in one message, either way
MAX_DEPTH = 200  # nesting of lists, tuples and dicts
ARRAY_KINDS = "biufc"  # bool, signed and unsigned integers, floats, complex
_LENGTH = struct.Struct("<Q")
_FLOAT = struct.Struct("<d")
_COUNT = struct.Struct("<I")


class NotData(TypeError):
    """A value that is not plain data; `kind` names its type, `where` its place in the value."""

    def __init__(self, kind: str, where: str = "") -> None:
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        super().__init__(f"{article} {kind}" + (f" (at value{where})" if where else ""))
        self.kind, self.where = kind, where


class Broken(ConnectionError):
    """The other side closed the connection, or sent what is not a message."""


def encode(value: Any) -> bytes:
    out: list[bytes] = []
    _encode(value, out, 0)
    return b"".join(out)


def _numpy() -> Any:
    return sys.modules.get("numpy")  # only if the side already imported it: a value can hold no array otherwise


def _encode(value: Any, out: list[bytes], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise NotData(f"value nested more than {MAX_DEPTH} levels deep")
    np = _numpy()
    if np is not None and isinstance(value, (np.ndarray, np.generic)):
        _encode_numpy(np, value, out)
    elif value is None:
        out.append(b"N")
    elif isinstance(value, bool):
        out.append(b"T" if value else b"F")
    elif isinstance(value, int):
        raw = int.to_bytes(value, (int.bit_length(value) + 8) // 8, "little", signed=True)
        out += [b"I", _COUNT.pack(len(raw)), raw]
    elif isinstance(value, float):
        out += [b"D", _FLOAT.pack(value)]
    elif isinstance(value, (str, bytes, bytearray)):
        raw = str.encode(value, "utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
        out += [b"S" if isinstance(value, str) else b"B", _COUNT.pack(len(raw)), raw]
    elif isinstance(value, (list, tuple)):
        out += [b"L" if isinstance(value, list) else b"U", _COUNT.pack(len(value))]
        for i, item in enumerate(value):
            _inside(item, out, depth, f"[{i}]")
    elif isinstance(value, dict):
        out += [b"M", _COUNT.pack(len(value))]
        for key, item in dict.items(value):
            _inside(key, out, depth, " (a key)")
            _inside(item, out, depth, f"[{_short(key)}]")
    else:
        raise NotData(type(value).__name__)


def _inside(item: Any, out: list[bytes], depth: int, step: str) -> None:
    """An item of a list, tuple or dict; a refusal names where in the value it was."""
    try:
        _encode(item, out, depth + 1)
    except NotData as err:
        raise NotData(err.kind, step + err.where) from None


def _short(key: Any) -> str:
    return repr(key)[:40] if isinstance(key, (str, int, float, bool, type(None))) else type(key).__name__


def _encode_numpy(np: Any, value: Any, out: list[bytes]) -> None:
    if value.dtype.kind not in ARRAY_KINDS:
        raise NotData(f"numpy {'array' if isinstance(value, np.ndarray) else 'scalar'} of dtype {value.dtype}")
    dtype = value.dtype.str.encode()
    if isinstance(value, np.generic):
        raw = value.tobytes()
        out += [b"G", _COUNT.pack(len(dtype)), dtype, _COUNT.pack(len(raw)), raw]
        return
    raw = np.ascontiguousarray(value).tobytes()
    out += [b"A", _COUNT.pack(len(dtype)), dtype, _COUNT.pack(value.ndim)]
    out += [_LENGTH.pack(n) for n in value.shape]
    out += [_LENGTH.pack(len(raw)), raw]


def decode(raw: bytes) -> Any:
    reader = _Reader(memoryview(raw))
    try:
        value = reader.value(0)
    except (ValueError, TypeError, struct.error) as err:  # text that is not UTF-8, a dtype numpy does not know
        raise Broken(f"a message that does not decode ({type(err).__name__}: {err})") from None
    if reader.at != len(raw):
        raise Broken("a message with bytes after its value")
    return value


class _Reader:
    def __init__(self, raw: memoryview) -> None:
        self.raw, self.at = raw, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.raw):
            raise Broken("a message shorter than its contents say")
        self.at += n
        return bytes(self.raw[self.at - n : self.at])

    def count(self) -> int:
        return int(_COUNT.unpack(self.take(4))[0])

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise Broken(f"a message nested more than {MAX_DEPTH} levels deep")
        tag = self.take(1)
        simple = {b"N": None, b"T": True, b"F": False}
        if tag in simple:
            return simple[tag]
        if tag == b"I":
            return int.from_bytes(self.take(self.count()), "little", signed=True)
        if tag == b"D":
            return float(_FLOAT.unpack(self.take(8))[0])
        if tag == b"S":
            return self.take(self.count()).decode("utf-8", "surrogatepass")
        if tag == b"B":
            return self.take(self.count())
        if tag in (b"L", b"U"):
            items = [self.value(depth + 1) for _ in range(self.count())]
            return items if tag == b"L" else tuple(items)
        if tag == b"M":
            return self.mapping(depth)
        if tag in (b"A", b"G"):
            return self.numpy(tag)
        raise Broken(f"a message with an unknown tag {tag!r}")

    def mapping(self, depth: int) -> dict[Any, Any]:
        found: dict[Any, Any] = {}
        for _ in range(self.count()):
            key = self.value(depth + 1)
            try:
                found[key] = self.value(depth + 1)
            except TypeError:  # a list as a key: not hashable
                raise Broken(f"a dict key of type {type(key).__name__}") from None
        return found

    def numpy(self, tag: bytes) -> Any:
        np: Any = sys.modules.get("numpy") or importlib.import_module("numpy")  # an array came: numpy holds it
        dtype = np.dtype(self.take(self.count()).decode("ascii"))
        if dtype.kind not in ARRAY_KINDS or dtype.hasobject:
            raise Broken(f"an array of dtype {dtype}")
        if tag == b"G":
            return np.frombuffer(self.take(self.count()), dtype=dtype)[0]
        shape = tuple(int(_LENGTH.unpack(self.take(8))[0]) for _ in range(self.count()))
        data = self.take(int(_LENGTH.unpack(self.take(8))[0]))
        size = 1
        for n in shape:
            size *= n
        if size * dtype.itemsize != len(data):
            raise Broken(f"an array whose {len(data)} bytes do not fill its shape {shape}")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def send(sock: socket.socket, value: Any) -> None:
    raw = encode(value)
    if len(raw) > MAX_MESSAGE:
        raise NotData(f"value of {len(raw):,} bytes, more than the {MAX_MESSAGE:,} that may cross")
    sock.sendall(_LENGTH.pack(len(raw)) + raw)


def receive(sock: socket.socket) -> Any:
    (length,) = _LENGTH.unpack(_exactly(sock, _LENGTH.size))
    if length > MAX_MESSAGE:
        raise Broken(f"a message of {length:,} bytes, more than the {MAX_MESSAGE:,} allowed")
    return decode(_exactly(sock, length))


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise Broken("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
