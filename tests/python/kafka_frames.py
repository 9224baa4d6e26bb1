"""Raw Kafka request frames for the hostile-client test: valid requests of every API and
version, built from the message schemas kafka-python ships (Apache Kafka's own JSON
schemas), with the position of every length and count recorded so that each can be
overwritten with a huge value.

`sample_request(key, version)` fills every field a version has: one element in every
array, a short string in every string, the schema default elsewhere; tagged fields are
left out. It encodes the body itself, noting where each length or count sits (array
counts, string and bytes lengths, tagged-field counts), and checks the bytes against
kafka-python's own encoder, so a mistake here cannot pass as a broker refusal.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

# Importing these registers every request class kafka-python has.
import kafka.protocol.admin  # noqa: F401
import kafka.protocol.consumer  # noqa: F401
import kafka.protocol.metadata  # noqa: F401
import kafka.protocol.producer  # noqa: F401
from kafka.protocol.api_message import ApiMessage

CLIENT_ID = b"hostile-test"
SAMPLE_STRING = "hw"
# Fields whose default would make a sample unanswered: a produce with acks=0 gets none.
FIELD_VALUES = {"acks": 1}
API_VERSIONS_KEY = 18


def _request_classes() -> dict[int, type]:
    found: dict[int, type] = {}

    def walk(cls: type) -> None:
        for sub in cls.__subclasses__():
            if (getattr(sub, "_class_version", None) is None and sub._json is not None
                    and sub.is_request()):
                found[sub.API_KEY] = sub
            walk(sub)

    walk(ApiMessage)
    return found


REQUESTS = _request_classes()


@dataclass(frozen=True)
class Length:
    """A length or count in an encoded body: its offset and how it is encoded
    ("int16", "int32" or "uvarint", the last `size` bytes long)."""
    offset: int
    kind: str
    size: int


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _Encoder:
    def __init__(self, version: int, flexible: bool):
        self.version = version
        self.flexible = flexible
        self.out = bytearray()
        self.lengths: list[Length] = []

    def length(self, n: int, fixed: str) -> None:
        """A length or count: compact (unsigned varint of n + 1) in flexible versions,
        else `fixed` ("int16" for strings, "int32" for arrays and bytes)."""
        if self.flexible:
            data = _uvarint(n + 1)
            kind = "uvarint"
        else:
            data = struct.pack(">h" if fixed == "int16" else ">i", n)
            kind = fixed
        self.lengths.append(Length(len(self.out), kind, len(data)))
        self.out += data

    def struct(self, field, container_cls) -> object:
        """Encodes one struct with every field of this version filled; returns the
        kafka-python value holding the same data."""
        values = {}
        for f in field.untagged_fields(self.version):
            values[f.name] = self.field(f)
        if self.flexible:
            # No tagged fields: the count is 0, and a count all the same.
            self.length(-1, "int32")
        return container_cls(version=self.version, **values)

    def field(self, f) -> object:
        if f.is_struct_array():
            self.length(1, "int32")
            return [self.struct(f.array_of, f.data_class)]
        if f.is_struct():
            if f.nullable_for_version_q(self.version):
                self.out += b"\x01"
            return self.struct(f, f.data_class)
        if f.is_array():
            self.length(1, "int32")
            return [self.simple(f.array_of)]
        return self.simple(f)

    def simple(self, f) -> object:
        kind = f.type_str
        if kind == "string":
            data = SAMPLE_STRING.encode()
            self.length(len(data), "int16")
            self.out += data
            return SAMPLE_STRING
        if kind in ("bytes", "records"):
            self.length(0, "int32")
            return b""
        value = FIELD_VALUES.get(f.name, f.default)
        self.out += f._type.encode(value)
        return value


def sample_request(key: int, version: int) -> tuple[bytes, list[Length]]:
    """The body of a valid request of API `key` at `version`, and where its lengths and
    counts are. Raises KeyError when kafka-python has no schema for the API."""
    cls = REQUESTS[key]
    flexible = cls.flexible_version_q(version)
    enc = _Encoder(version, flexible)
    request = enc.struct(cls._struct, cls)
    body = bytes(enc.out)
    reference = bytes(request.encode(version=version))
    assert body == reference, (f"{cls.__name__} v{version}: own encoding {body.hex()} "
                               f"differs from kafka-python's {reference.hex()}")
    return body, enc.lengths


def header(key: int, version: int, correlation_id: int) -> bytes:
    """A request header as the broker reads it for `key`/`version` (v2 with a tagged-
    field count in flexible versions, else v1)."""
    data = struct.pack(">hhih", key, version, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    cls = REQUESTS.get(key)
    if cls is not None and cls.flexible_version_q(version):
        data += b"\x00"
    return data


def frame(key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    payload = header(key, version, correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


def damaged(body: bytes, length: Length) -> bytes:
    """`body` with the length or count at `length` overwritten by the largest value its
    encoding can say: 2^15-1, 2^31-1, or 2^32-1 as an unsigned varint (longer than the
    one it replaces, so the rest of the body shifts)."""
    huge = {"int16": b"\x7f\xff", "int32": b"\x7f\xff\xff\xff",
            "uvarint": b"\xff\xff\xff\xff\x0f"}[length.kind]
    return body[:length.offset] + huge + body[length.offset + length.size:]


def read_response(sock: socket.socket) -> bytes | None:
    """One response frame (without its size), or None when the connection closed."""
    size = _read_exactly(sock, 4)
    if size is None:
        return None
    (n,) = struct.unpack(">i", size)
    return _read_exactly(sock, n)


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def api_versions(address: tuple[str, int], timeout_s: float) -> list[tuple[int, int, int]]:
    """(key, min_version, max_version) of every API the broker advertises (ApiVersions v0)."""
    with socket.create_connection(address, timeout=timeout_s) as sock:
        sock.sendall(frame(API_VERSIONS_KEY, 0, b"", correlation_id=1))
        response = read_response(sock)
    assert response is not None, "ApiVersions v0: connection closed without an answer"
    correlation_id, error_code, count = struct.unpack_from(">ihi", response)
    assert (correlation_id, error_code) == (1, 0), f"ApiVersions v0 answer {response.hex()}"
    return [struct.unpack_from(">hhh", response, 10 + 6 * i) for i in range(count)]
