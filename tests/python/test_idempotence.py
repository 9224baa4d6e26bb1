"""Idempotent producers: a batch whose acknowledgement was lost is stored once.

Goal: when a Produce response never reaches an idempotent producer, the producer sends the
same batch again (same producer id, epoch and base sequence), and headway must answer it
with the original offset instead of appending it a second time: every record is in the
log exactly once, at the offset its delivery report gave. This must also hold when the
broker was SIGKILLed between the lost answer and the retry (producer state rebuilt from
the log), and a producer that goes on with its sequence after the restart is accepted.
Method: a Kafka-aware TCP proxy on loopback sits between librdkafka and headway; headway
advertises the proxy's address, so every connection of the client goes through it. The
proxy reads the 4-byte length-prefixed frames both ways, remembers each request's api key
by correlation id, and after N Produce requests lets the broker answer request N+1 and
then drops that answer and closes both sockets: the batch was appended (acks=all, so it
is durable too) but the client never learned. The proxy also decodes the batch headers
of every Produce request, so the test can show that the client really sent the dropped
batches again. For the crash variant the proxy holds new connections after the drop
until the broker has been SIGKILLed and restarted. A third test does the same at the
protocol level with hand-built requests: replays of old batches after a SIGKILL get their
original offsets, the sequence continues, a gap is refused. Records are support.py's test
records, read back with librdkafka and checked byte for byte.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from kafka.record.default_records import DefaultRecordBatchBuilder

from support import (Delivery, ErrorLog, check_all_present, check_records, consume_all,
                     create_topic, make_record, produce_records, rdkafka_base)

PRODUCE = 0
API_VERSIONS = 18
INIT_PRODUCER_ID = 22
OUT_OF_ORDER_SEQUENCE_NUMBER = 45

PARTITIONS = 3
RECORDS = 3_000
MORE_RECORDS = 1_000
# Small batches, so that the records travel in many Produce requests.
BATCH_MESSAGES = 50
DROP_AFTER_PRODUCE_REQUESTS = 5

FRAME_BYTES_MAX = 100 * 1024 * 1024
ACCEPT_POLL_S = 0.2
# How long a new connection waits for the proxy to forward again (crash test), and for
# the broker to accept the proxy's connection. Generous: two busy cores.
GATE_DEADLINE_S = 120.0
CONNECT_TIMEOUT_S = 30.0
DROP_DEADLINE_S = 120.0
PRODUCER_JOIN_S = 240.0
RAW_CALL_TIMEOUT_S = 30.0


# -- reading the Kafka wire format (only what the proxy needs) ------------------------------

class WireReader:
    """Reads Kafka protocol primitives from a frame; `flexible` selects the compact
    encodings of KIP-482 (request versions marked flexible in the Kafka schemas)."""

    def __init__(self, data: bytes, pos: int = 0):
        self.data = data
        self.pos = pos

    def _unpack(self, fmt: str):
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def int16(self) -> int:
        return self._unpack(">h")

    def int32(self) -> int:
        return self._unpack(">i")

    def int64(self) -> int:
        return self._unpack(">q")

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"{n} bytes at {self.pos} overrun a {len(self.data)}-byte frame")
        value = self.data[self.pos:self.pos + n]
        self.pos += n
        return value

    def length(self, flexible: bool, classic_fmt: str) -> int:
        """Length of a string, bytes or array; -1 for null."""
        return self.uvarint() - 1 if flexible else self._unpack(classic_fmt)

    def nullable_string(self, flexible: bool) -> str | None:
        n = self.length(flexible, ">h")
        return None if n < 0 else self.raw(n).decode()

    def nullable_bytes(self, flexible: bool) -> bytes | None:
        n = self.length(flexible, ">i")
        return None if n < 0 else self.raw(n)

    def array_len(self, flexible: bool) -> int:
        return max(0, self.length(flexible, ">i"))

    def topic(self, flexible: bool, version: int) -> str:
        # Produce v13 names topics by id (KIP-516).
        return self.raw(16).hex() if version >= 13 else self.nullable_string(flexible)

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.raw(self.uvarint())


@dataclass(frozen=True)
class BatchId:
    """What identifies a record batch to the broker's duplicate check."""
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


# base offset, length, leader epoch, magic, crc, attributes, last offset delta, first and
# max timestamp, producer id, producer epoch, base sequence, record count.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


def batch_ids(topic: str, partition: int, records: bytes | None) -> list[BatchId]:
    ids = []
    pos = 0
    while records is not None and pos + BATCH_HEADER.size <= len(records):
        (_base, length, _epoch, magic, _crc, _attrs, _delta, _t0, _t1, producer_id,
         producer_epoch, base_sequence, count) = BATCH_HEADER.unpack_from(records, pos)
        if magic != 2:
            raise ValueError(f"record batch magic {magic}")
        ids.append(BatchId(topic, partition, producer_id, producer_epoch, base_sequence, count))
        pos += 12 + length
    return ids


def parse_produce_request(frame: bytes, version: int) -> list[BatchId]:
    """The batches of a Produce request (v3 and later), in request order."""
    flexible = version >= 9
    r = WireReader(frame, 8)  # api key, api version, correlation id
    r.nullable_string(False)  # client id: a classic string even in header v2
    if flexible:
        r.tagged_fields()
    r.nullable_string(flexible)  # transactional id
    r.int16()  # acks
    r.int32()  # timeout
    ids = []
    for _ in range(r.array_len(flexible)):
        topic = r.topic(flexible, version)
        for _ in range(r.array_len(flexible)):
            partition = r.int32()
            ids.extend(batch_ids(topic, partition, r.nullable_bytes(flexible)))
            if flexible:
                r.tagged_fields()
        if flexible:
            r.tagged_fields()
    return ids


def parse_produce_response(frame: bytes, version: int) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (error code, base offset) of a Produce response (v3 and later)."""
    flexible = version >= 9
    r = WireReader(frame, 4)  # correlation id
    if flexible:
        r.tagged_fields()
    answers = {}
    for _ in range(r.array_len(flexible)):
        topic = r.topic(flexible, version)
        for _ in range(r.array_len(flexible)):
            partition, error_code, base_offset = r.int32(), r.int16(), r.int64()
            r.int64()  # log append time
            if version >= 5:
                r.int64()  # log start offset
            if version >= 8:
                for _ in range(r.array_len(flexible)):  # record errors
                    r.int32()
                    r.nullable_string(flexible)
                    if flexible:
                        r.tagged_fields()
                r.nullable_string(flexible)  # error message
            if flexible:
                r.tagged_fields()
            answers[(topic, partition)] = (error_code, base_offset)
        if flexible:
            r.tagged_fields()
    return answers


def read_frame(sock: socket.socket) -> bytes | None:
    """One length-prefixed frame, without its prefix; None at end of stream or on error."""
    header = recv_exact(sock, 4)
    if header is None:
        return None
    (size,) = struct.unpack(">i", header)
    if not 0 <= size <= FRAME_BYTES_MAX:
        return None
    return recv_exact(sock, size)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < n:
        try:
            chunk = sock.recv(n - len(chunks))
        except OSError:
            return None
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


# -- the proxy ----------------------------------------------------------------------------

class _Link:
    """One client connection and the proxy's connection to the broker for it."""

    def __init__(self, client: socket.socket, server: socket.socket, generation: int):
        self.client = client
        self.server = server
        self.generation = generation
        # correlation id -> (api key, api version, produce ordinal or None)
        self.pending: dict[int, tuple[int, int, int | None]] = {}
        self._closed = False
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for s in (self.client, self.server):
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes the other pump's recv
            except OSError:
                pass
            s.close()


class DroppingProxy:
    """Loopback proxy that forwards Kafka frames both ways and loses exactly one Produce
    answer: the one to the (drop_after + 1)-th Produce request it forwarded. With
    hold_after_drop, connections made after the drop wait until forward_to() is called
    again (the test restarts the broker in between)."""

    def __init__(self, drop_after: int, hold_after_drop: bool = False):
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(ACCEPT_POLL_S)
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.drop_ordinal = drop_after + 1
        self._hold_after_drop = hold_after_drop
        self._lock = threading.Lock()
        self._gate = threading.Event()  # set while new connections may be forwarded
        self._upstream: tuple[str, int] | None = None
        self._closed = False
        self._links: list[_Link] = []
        self._threads: list[threading.Thread] = []
        # What the test asserts on; written under _lock.
        self.generation = 0  # how many times forward_to() was called
        self.produce_requests = 0
        self.produce_versions: set[int] = set()
        self.produce_responses_dropped = 0
        self.dropped = threading.Event()
        self.dropped_answer: dict[tuple[str, int], tuple[int, int]] = {}
        self.dropped_batches: list[BatchId] = []
        # (produce ordinal, generation, batch) for every batch forwarded, in order.
        self.forwarded_batches: list[tuple[int, int, BatchId]] = []
        self.problems: list[str] = []
        self._spawn(self._accept_loop, "proxy-accept")

    def forward_to(self, upstream: str) -> None:
        """Forwards new connections to `upstream` (HOST:PORT) from now on."""
        host, port = upstream.rsplit(":", 1)
        with self._lock:
            self._upstream = (host, int(port))
            self.generation += 1
        self._gate.set()

    def resent_batches(self) -> list[tuple[int, BatchId]]:
        """(generation, batch) of each dropped batch forwarded again after the drop."""
        with self._lock:
            dropped = set(self.dropped_batches)
            return [(g, b) for o, g, b in self.forwarded_batches
                    if o > self.drop_ordinal and b in dropped]

    def producers(self) -> set[tuple[int, int]]:
        """(producer id, epoch) of every batch forwarded."""
        with self._lock:
            return {(b.producer_id, b.producer_epoch) for _o, _g, b in self.forwarded_batches}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            links = list(self._links)
        self._gate.set()  # release connections still waiting
        for link in links:
            link.close()
        for t in self._threads:
            t.join(timeout=10)
        self._listener.close()

    # -- internals ----------------------------------------------------------------------

    def _spawn(self, target, name: str, *args) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            self._spawn(self._connect, "proxy-connect", client)

    def _connect(self, client: socket.socket) -> None:
        if not self._gate.wait(GATE_DEADLINE_S) or self._closed:
            client.close()
            return
        with self._lock:
            upstream, generation = self._upstream, self.generation
        try:
            server = socket.create_connection(upstream, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            client.close()  # the client reconnects and tries again
            return
        server.settimeout(None)
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(client, server, generation)
        with self._lock:
            if self._closed:
                link.close()
                return
            self._links.append(link)
        self._spawn(self._requests, "proxy-requests", link)
        self._spawn(self._responses, "proxy-responses", link)

    def _requests(self, link: _Link) -> None:
        """Client to broker: notes each request's api key, and each Produce's batches."""
        while (frame := read_frame(link.client)) is not None:
            api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
            ordinal = None
            if api_key == PRODUCE:
                try:
                    batches = parse_produce_request(frame, api_version)
                except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
                    batches = []
                    with self._lock:
                        self.problems.append(f"unreadable Produce v{api_version} request: {e!r}")
                with self._lock:
                    self.produce_requests += 1
                    ordinal = self.produce_requests
                    self.produce_versions.add(api_version)
                    self.forwarded_batches.extend((ordinal, link.generation, b) for b in batches)
            link.pending[correlation_id] = (api_key, api_version, ordinal)
            try:
                link.server.sendall(struct.pack(">i", len(frame)) + frame)
            except OSError:
                break
        link.close()

    def _responses(self, link: _Link) -> None:
        """Broker to client: forwards every answer but the one chosen to be lost."""
        while (frame := read_frame(link.server)) is not None:
            (correlation_id,) = struct.unpack_from(">i", frame, 0)
            api_key, api_version, ordinal = link.pending.pop(correlation_id, (None, None, None))
            if api_key == PRODUCE and ordinal == self.drop_ordinal:
                self._drop(link, frame, api_version)
                return
            try:
                link.client.sendall(struct.pack(">i", len(frame)) + frame)
            except OSError:
                break
        link.close()

    def _drop(self, link: _Link, frame: bytes, api_version: int) -> None:
        try:
            answer = parse_produce_response(frame, api_version)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
            answer = {}
            with self._lock:
                self.problems.append(f"unreadable Produce v{api_version} response: {e!r}")
        with self._lock:
            self.produce_responses_dropped += 1
            self.dropped_answer = answer
            self.dropped_batches = [b for o, _g, b in self.forwarded_batches
                                    if o == self.drop_ordinal]
            if self._hold_after_drop:
                self._gate.clear()  # before the close: the reconnect must wait
        link.close()
        self.dropped.set()


@pytest.fixture
def make_proxy():
    proxies: list[DroppingProxy] = []

    def factory(drop_after: int, hold_after_drop: bool = False) -> DroppingProxy:
        proxy = DroppingProxy(drop_after, hold_after_drop)
        proxies.append(proxy)
        return proxy

    yield factory
    for proxy in proxies:
        proxy.close()


def start_behind_proxy(make_broker, proxy: DroppingProxy):
    """A broker that tells clients to connect to the proxy, and the proxy forwarding to
    it."""
    broker = make_broker("--advertised-listener", proxy.address)
    assert broker.bootstrap != proxy.address
    proxy.forward_to(broker.bootstrap)
    return broker


def idempotent_producer(bootstrap: str, errors: ErrorLog) -> Producer:
    return Producer({
        **rdkafka_base(bootstrap),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": BATCH_MESSAGES,
        "error_cb": errors,
    })


def check_drop(proxy: DroppingProxy) -> None:
    """The proxy lost exactly one Produce answer, a successful one, and the client sent
    every batch of that request again."""
    assert not proxy.problems, proxy.problems
    assert proxy.produce_responses_dropped == 1, (
        f"the proxy dropped {proxy.produce_responses_dropped} Produce answers "
        f"({proxy.produce_requests} Produce requests forwarded)")
    assert proxy.dropped_batches, "the dropped request carried no record batch"
    assert proxy.dropped_answer and all(
        err == 0 for err, _ in proxy.dropped_answer.values()), (
        f"the lost answer was not a success: {proxy.dropped_answer}")
    assert all(b.producer_id >= 0 and b.base_sequence >= 0 for b in proxy.dropped_batches), (
        f"not idempotent batches: {proxy.dropped_batches}")
    resent = {b for _g, b in proxy.resent_batches()}
    assert resent == set(proxy.dropped_batches), (
        f"batches of the lost answer {proxy.dropped_batches}, sent again: {resent}")
    # One producer id and epoch throughout: the broker never made the client start over
    # (e.g. with UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE_NUMBER, which would make
    # librdkafka bump its epoch and renumber the retried batches).
    check_one_producer(proxy)


def check_one_producer(proxy: DroppingProxy) -> None:
    producers = proxy.producers()
    assert len(producers) == 1, f"batches were sent as several producers: {producers}"


def check_log(bootstrap: str, topic: str, count: int, delivery: Delivery) -> None:
    """Every record once, byte for byte, at the partition and offset it was acknowledged
    with (so the retried batch was answered with its original offset)."""
    records = consume_all(bootstrap, topic, PARTITIONS, expected=count)
    verdict = check_records(records, PARTITIONS)
    check_all_present(verdict, count)
    verdict.assert_ok(f"topic {topic}")
    misplaced = [(seq_pos, delivery.acked.get(seq)) for seq, seq_pos in
                 ((int(r.value[4:14]), (r.partition, r.offset)) for r in records)
                 if delivery.acked.get(seq) != seq_pos]
    assert not misplaced, (f"{len(misplaced)} records not where their delivery report put "
                           f"them, (log position, acknowledged position): {misplaced[:10]}")


def check_delivery(delivery: Delivery, count: int, errors: ErrorLog) -> None:
    assert not delivery.failed, (f"{len(delivery.failed)} deliveries failed, e.g. "
                                 f"{list(delivery.failed.items())[:5]}; client errors: "
                                 f"{errors.summary()}")
    assert len(delivery.acked) == count, (len(delivery.acked), count)


def test_lost_produce_answer_is_not_appended_twice(make_broker, make_proxy):
    proxy = make_proxy(DROP_AFTER_PRODUCE_REQUESTS)
    broker = start_behind_proxy(make_broker, proxy)
    topic = "idem-drop"
    create_topic(proxy.address, topic, PARTITIONS)

    errors = ErrorLog()
    producer = idempotent_producer(proxy.address, errors)
    delivery = Delivery()
    produce_records(producer, topic, range(RECORDS), delivery)
    check_delivery(delivery, RECORDS, errors)
    check_drop(proxy)
    check_log(proxy.address, topic, RECORDS, delivery)
    broker.check_alive()


def test_lost_answer_then_sigkill_retry_is_a_duplicate(make_broker, make_proxy):
    proxy = make_proxy(DROP_AFTER_PRODUCE_REQUESTS, hold_after_drop=True)
    broker = start_behind_proxy(make_broker, proxy)
    topic = "idem-crash"
    create_topic(proxy.address, topic, PARTITIONS)

    errors = ErrorLog()
    producer = idempotent_producer(proxy.address, errors)
    delivery = Delivery()
    failure: list[BaseException] = []

    def produce_first_wave() -> None:
        try:
            produce_records(producer, topic, range(RECORDS), delivery)
        except BaseException as e:  # reported by the test thread
            failure.append(e)

    thread = threading.Thread(target=produce_first_wave, name="idem-producer", daemon=True)
    thread.start()
    assert proxy.dropped.wait(DROP_DEADLINE_S), (
        f"no Produce answer dropped within {DROP_DEADLINE_S:.0f} s "
        f"({proxy.produce_requests} Produce requests forwarded)")
    # The proxy holds every new connection: nothing reaches the broker until it restarts.
    broker.kill()
    broker.start()
    proxy.forward_to(broker.bootstrap)
    thread.join(PRODUCER_JOIN_S)
    assert not thread.is_alive(), f"the producer did not finish within {PRODUCER_JOIN_S:.0f} s"
    if failure:
        raise failure[0]
    check_delivery(delivery, RECORDS, errors)
    check_drop(proxy)
    generations = {g for g, _b in proxy.resent_batches()}
    assert generations == {2}, f"batches were sent again to broker instances {generations}"

    # The same producer goes on with its sequences on the restarted broker.
    produce_records(producer, topic, range(RECORDS, RECORDS + MORE_RECORDS), delivery)
    check_delivery(delivery, RECORDS + MORE_RECORDS, errors)
    check_one_producer(proxy)
    check_log(proxy.address, topic, RECORDS + MORE_RECORDS, delivery)
    broker.check_alive()


# -- the same at the protocol level -------------------------------------------------------

class RawClient:
    """Hand-built requests on one connection, in non-flexible versions (header v1)."""

    CLIENT_ID = b"headway-idempotence-test"

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=RAW_CALL_TIMEOUT_S)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, api_key: int, version: int, body: bytes) -> WireReader:
        self.correlation_id += 1
        header = struct.pack(">hhih", api_key, version, self.correlation_id,
                             len(self.CLIENT_ID)) + self.CLIENT_ID
        self.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        frame = read_frame(self.sock)
        assert frame is not None, f"connection closed instead of answering api key {api_key}"
        r = WireReader(frame)
        assert r.int32() == self.correlation_id
        return r

    def api_versions(self) -> dict[int, tuple[int, int]]:
        r = self.call(API_VERSIONS, 0, b"")
        assert r.int16() == 0
        return {r.int16(): (r.int16(), r.int16()) for _ in range(r.int32())}

    def init_producer_id(self, version: int) -> tuple[int, int, int]:
        """(error code, producer id, epoch) for a non-transactional producer."""
        r = self.call(INIT_PRODUCER_ID, version, struct.pack(">hi", -1, 60_000))
        r.int32()  # throttle time
        return r.int16(), r.int64(), r.int16()

    def produce(self, version: int, topic: str, partition: int, batch: bytes) -> tuple[int, int]:
        """(error code, base offset) of an acks=all Produce of one batch."""
        name = topic.encode()
        body = (struct.pack(">hhii", -1, -1, 30_000, 1) + struct.pack(">h", len(name)) + name
                + struct.pack(">iii", 1, partition, len(batch)) + batch)
        r = self.call(PRODUCE, version, body)
        answers = parse_produce_response(struct.pack(">i", 0) + r.data[r.pos:], version)
        return answers[(topic, partition)]


def pick_version(versions: dict[int, tuple[int, int]], api_key: int, lowest: int,
                 highest: int) -> int:
    """The highest version both sides speak within [lowest, highest] (non-flexible)."""
    low, high = versions[api_key]
    chosen = min(high, highest)
    if chosen < max(low, lowest):
        pytest.fail(f"api key {api_key}: broker speaks v{low}-v{high}, this test "
                    f"v{lowest}-v{highest}", pytrace=False)
    return chosen


def idempotent_batch(producer_id: int, epoch: int, first_seq: int, count: int) -> bytes:
    """Test records first_seq..first_seq+count-1, as one batch whose base sequence is
    first_seq."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=epoch,
                                        base_sequence=first_seq, batch_size=1 << 20)
    for i, seq in enumerate(range(first_seq, first_seq + count)):
        r = make_record(seq)
        builder.append(i, int(time.time() * 1000), r.key, r.value, r.headers)
    return bytes(builder.build())


def test_replays_after_sigkill_at_protocol_level(broker):
    topic = "idem-raw"
    create_topic(broker.bootstrap, topic, 1)
    client = RawClient(broker.bootstrap)
    versions = client.api_versions()
    produce_v = pick_version(versions, PRODUCE, 3, 8)
    init_v = pick_version(versions, INIT_PRODUCER_ID, 0, 1)
    error, pid, epoch = client.init_producer_id(init_v)
    assert (error, pid >= 0, epoch >= 0) == (0, True, True), (error, pid, epoch)

    batches = [idempotent_batch(pid, epoch, 0, 3), idempotent_batch(pid, epoch, 3, 2),
               idempotent_batch(pid, epoch, 5, 1)]
    assert [client.produce(produce_v, topic, 0, b) for b in batches] == [(0, 0), (0, 3), (0, 5)]
    client.close()

    broker.kill()
    broker.start()
    client = RawClient(broker.bootstrap)
    # Newest first: the last batch, then older ones still within the window Kafka keeps.
    for batch, offset in ((batches[2], 5), (batches[1], 3), (batches[0], 0)):
        assert client.produce(produce_v, topic, 0, batch) == (0, offset), (
            f"replayed batch at offset {offset} after the restart")
    assert client.produce(produce_v, topic, 0, idempotent_batch(pid, epoch, 6, 2)) == (0, 6), (
        "the sequence continues after the restart")
    error, _ = client.produce(produce_v, topic, 0, idempotent_batch(pid, epoch, 10, 1))
    assert error == OUT_OF_ORDER_SEQUENCE_NUMBER, f"a sequence gap was answered {error}"
    client.close()

    records = consume_all(broker.bootstrap, topic, 1, expected=8)
    verdict = check_records(records, 1)
    check_all_present(verdict, 8)
    verdict.assert_ok("replayed batches")
    broker.check_alive()
