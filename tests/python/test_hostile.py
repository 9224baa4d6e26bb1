"""Hostile clients beside well-behaved ones, against the real broker.

Goal: no client can crash, freeze or bloat the broker by what it sends. While raw-socket
clients send requests with impossible counts, random frames, length prefixes with nothing
behind them, bodies that trickle in, and more connections than `connections_max`, a
librdkafka producer (idempotent, acks=all, paced) and a librdkafka consumer keep working:
no delivery error and no client error, acknowledgements keep coming (no gap longer than
ACK_GAP_MAX_S), the consumer reads every acknowledged record exactly once, in order, at
the offset it was acknowledged with. At the end the broker is alive, its /metrics counts
exactly the refusals and body timeouts the hostile clients caused, and its peak resident
memory (VmHWM) stayed under RSS_MAX_BYTES, the bound docs/isolation.md states.

Method: one broker with a config file: a short request_body_timeout_ms, a small
connections_max and metrics on an ephemeral port. The legit clients connect first (the
flood would otherwise keep them in the accept backlog), then the phases run one after
another, each waiting for fresh acknowledgements before it ends:

  a. every API and version the broker advertises, a valid request (kafka_frames.py) with
     each of its lengths and counts in turn overwritten by the largest value its encoding
     allows, one connection per frame: each must be closed unanswered and counted;
  b. random frames after a real header (seeded; HEADWAY_HOSTILE_SEED replays one), and
     two random frames of 40 MiB at once: refused, none timing out;
  c. connections that announce a 100 MiB frame and send nothing: closed at the timeout,
     holding one body step of the budget meanwhile;
  d. slowloris: connections that trickle a frame one byte at a time: closed at the timeout;
  e. a connection flood above connections_max: the broker holds exactly connections_max.
"""

from __future__ import annotations

import os
import random
import select
import socket
import struct
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

import kafka_frames as kf
from support import (BackgroundProducer, Consumed, Delivery, ErrorLog, RecordChecker,
                     create_topic, new_consumer)

SEED = int(os.environ.get("HEADWAY_HOSTILE_SEED") or random.SystemRandom().randrange(2**32))
TOPIC, PARTITIONS = "legit", 2
PRODUCE_RATE_PER_S = 800
# The bound on the broker's resident memory that docs/isolation.md derives.
RSS_MAX_BYTES = 256 * 1024 * 1024
# Acknowledgements arrive every few ms at the paced rate; a gap this long is a stall.
ACK_GAP_MAX_S = 5.0
# Acknowledgements each phase waits for after its hostile work, so that every phase ends
# with the producer demonstrably served.
ACKS_PER_PHASE = 400
BODY_TIMEOUT_MS = 3_000
CONNECTIONS_MAX = 64
HOSTILE_THREADS = 8
RANDOM_FRAMES = 5_000
RANDOM_BODY_BYTES_MAX = 200
# Large random frames, together less than the request budget (128 MiB by default) with
# room for what decoding them reserves: frames that together exceed it can currently
# each hold part of it and wait for their next step, which stalls every client until
# the body timeout (see test_budget_hogs_do_not_hold_up_others).
LARGE_FRAMES = 2
LARGE_FRAME_BYTES = 40 * 1024 * 1024
# How long a hostile connection waits for an answer or a close before giving up: a
# damaged request can be a valid long poll, which the broker rightly holds.
ANSWER_WAIT_S = 2.0
STALLED = 8
STALLED_FRAME_BYTES = 100 * 1024 * 1024
SLOWLORIS = 8
SLOWLORIS_FRAME_BYTES = 2_000
SLOWLORIS_BYTE_INTERVAL_S = 0.2
FLOOD = 160
# Generous deadlines: two cores are shared with the broker and the clients.
CLOSE_DEADLINE_S = BODY_TIMEOUT_MS / 1000 + 30
PHASE_DEADLINE_S = 60.0
DRAIN_S = 60.0
BUDGET_STEP_BYTES = 64 * 1024


class TimedDelivery(Delivery):
    """Delivery reports with the longest gap between two acknowledgements, and a
    condition to wait on for new ones."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()
        self.last_ack_at: float | None = None
        self.gap_max_s = 0.0
        self.gap_max_after = 0

    def callback(self, err, msg) -> None:
        now = time.monotonic()
        with self.changed:
            super().callback(err, msg)
            if err is None:
                if self.last_ack_at is not None and now - self.last_ack_at > self.gap_max_s:
                    self.gap_max_s = now - self.last_ack_at
                    self.gap_max_after = len(self.acked) - 1
                self.last_ack_at = now
            self.changed.notify_all()

    def wait_for(self, count: int, broker, what: str) -> None:
        """Waits until `count` records are acknowledged; fails as soon as no ack came
        for ACK_GAP_MAX_S, a delivery failed, or the broker died."""
        deadline = time.monotonic() + PHASE_DEADLINE_S
        with self.changed:
            while len(self.acked) < count:
                broker.check_alive()
                assert not self.failed, f"{what}: delivery failed: {list(self.failed.items())[:3]}"
                now = time.monotonic()
                silent_s = now - (self.last_ack_at or now)
                assert silent_s < ACK_GAP_MAX_S, (
                    f"{what}: no acknowledgement for {silent_s:.1f} s "
                    f"({len(self.acked)} acknowledged)")
                assert now < deadline, f"{what}: {len(self.acked)} of {count} acknowledged"
                self.changed.wait(0.1)


class BackgroundConsumer:
    """A librdkafka consumer on its own thread, reading every partition from offset 0 and
    checking each record as it comes (RecordChecker)."""

    def __init__(self, bootstrap: str):
        self.errors = ErrorLog()
        self.checker = RecordChecker(PARTITIONS)
        self.read: dict[tuple[int, int], int] = {}  # (partition, offset) -> seq
        self.seq_counts: Counter[int] = Counter()
        self.error: BaseException | None = None
        self._consumer = new_consumer(bootstrap, self.errors)
        self._consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING)
                               for p in range(PARTITIONS)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="consumer", daemon=True)

    def start(self) -> "BackgroundConsumer":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for msg in self._consumer.consume(num_messages=500, timeout=0.2):
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            self.checker.problems.append(f"consume error: {err.name()}: "
                                                         f"{err.str()}")
                        continue
                    r = Consumed(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                 list(msg.headers() or []))
                    seq = self.checker.check(r)
                    if seq is not None:
                        self.read[(r.partition, r.offset)] = seq
                        self.seq_counts[seq] += 1
        except BaseException as e:  # reported by stop()
            self.error = e
        finally:
            self._consumer.close()

    def wait_until(self, ends: list[int]) -> None:
        deadline = time.monotonic() + DRAIN_S
        while any(n < end for n, end in zip(self.checker.next_offset, ends)):
            assert self.error is None, f"consumer failed: {self.error!r}"
            assert time.monotonic() < deadline, (
                f"consumer at offsets {self.checker.next_offset}, log ends {ends}, "
                f"{DRAIN_S:.0f} s after the producer stopped")
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "consumer thread did not finish"
        if self.error is not None:
            raise self.error


class Metrics:
    def __init__(self, address: str):
        self.url = f"http://{address}/metrics"

    def scrape(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url, timeout=10) as response:
            text = response.read().decode()
        values = {}
        for line in text.splitlines():
            if line.startswith("#") or "{" in line or not line.strip():
                continue
            name, value = line.split()[:2]
            values[name.removeprefix("headway_").removesuffix("_total")] = float(value)
        return values

    def wait_for(self, what: str, condition) -> dict[str, float]:
        deadline = time.monotonic() + PHASE_DEADLINE_S
        while True:
            m = self.scrape()
            if condition(m):
                return m
            assert time.monotonic() < deadline, f"metrics never showed {what}: {m}"
            time.sleep(0.05)


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
    return values


# -- hostile clients -----------------------------------------------------------------------

def send_and_watch(address: tuple[str, int], data: bytes) -> str:
    """Sends `data` on a new connection; "closed" if the broker closes it without an
    answer, "answered" if an answer arrives, "held" if neither within ANSWER_WAIT_S."""
    with socket.create_connection(address, timeout=30) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return "closed"  # refused before the whole frame was sent
        sock.settimeout(ANSWER_WAIT_S)
        try:
            return "answered" if sock.recv(1) else "closed"
        except TimeoutError:
            return "held"
        except ConnectionResetError:
            return "closed"


def damaged_frames(address: tuple[str, int]) -> tuple[list[bytes], int]:
    """Every length and count of a valid request of every advertised API and version,
    overwritten in turn; and the number of (API, version) pairs. Produce v0-v2 are left
    out: the broker advertises them for old clients' version probes but refuses them."""
    frames = []
    pairs = 0
    for key, low, high in kf.api_versions(address, timeout_s=30):
        # kafka-python has no schema for the share group APIs; the shape walk's own
        # tests (crates/protocol/src/shape_tests.rs) damage their bodies instead.
        if key not in kf.REQUESTS:
            continue
        for version in range(low, high + 1):
            if key == 0 and version < 3:
                continue
            body, lengths = kf.sample_request(key, version)
            pairs += 1
            frames.extend(kf.frame(key, version, kf.damaged(body, at)) for at in lengths)
    return frames, pairs


def samples_answered(address: tuple[str, int]) -> None:
    """The undamaged samples are valid requests: each is answered on one connection."""
    with socket.create_connection(address, timeout=30) as sock:
        for i, (key, low, high) in enumerate(kf.api_versions(address, timeout_s=30)):
            if key not in kf.REQUESTS:
                continue  # no schema in kafka-python (share groups)
            for version in range(max(low, 3) if key == 0 else low, high + 1):
                body, _ = kf.sample_request(key, version)
                correlation_id = i * 1000 + version
                sock.sendall(kf.frame(key, version, body, correlation_id))
                response = kf.read_response(sock)
                assert response is not None, f"API {key} v{version}: the valid sample was refused"
                assert struct.unpack_from(">i", response)[0] == correlation_id


def random_frames(address: tuple[str, int], rng: random.Random) -> list[bytes]:
    """Random bodies behind real headers of advertised APIs and versions. Every fourth body
    is dense with 0xff and 0x7f, which read as huge counts wherever they land."""
    apis = kf.api_versions(address, timeout_s=30)
    frames = []
    for i in range(RANDOM_FRAMES):
        key, low, high = rng.choice(apis)
        version = rng.randint(low, high)
        body = rng.randbytes(rng.randrange(RANDOM_BODY_BYTES_MAX))
        if i % 4 == 0:
            body = bytes(rng.choice((0xff, 0x7f, b)) for b in body)
        frames.append(kf.frame(key, version, body))
    return frames


def closed_by_broker(sock: socket.socket, deadline: float) -> bool:
    """Waits until the broker closes `sock` (anything it sends is read and dropped)."""
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], 0.1)
        if readable:
            try:
                if not sock.recv(65536):
                    return True
            except ConnectionResetError:
                return True
    return False


def slowloris(address: tuple[str, int], stop: threading.Event) -> list[bool]:
    """SLOWLORIS connections, each sending a frame one byte at a time (the length prefix
    too) until the broker closes it; which of them the broker closed."""
    body = b"\x00" * (SLOWLORIS_FRAME_BYTES - len(kf.header(0, 9, 7)))
    data = kf.frame(0, 9, body)
    socks = [socket.create_connection(address, timeout=30) for _ in range(SLOWLORIS)]
    sent = [0] * SLOWLORIS
    closed = [False] * SLOWLORIS
    deadline = time.monotonic() + CLOSE_DEADLINE_S
    try:
        while not all(closed) and time.monotonic() < deadline and not stop.is_set():
            for i, sock in enumerate(socks):
                if closed[i]:
                    continue
                readable, _, _ = select.select([sock], [], [], 0)
                try:
                    if readable and not sock.recv(65536):
                        closed[i] = True
                    elif sent[i] < len(data):
                        sock.send(data[sent[i]:sent[i] + 1])
                        sent[i] += 1
                except (BrokenPipeError, ConnectionResetError):
                    closed[i] = True
            stop.wait(SLOWLORIS_BYTE_INTERVAL_S)
    finally:
        for sock in socks:
            sock.close()
    return closed


def start_broker(make_broker, tmp_path, body_timeout_ms: int):
    """A broker with a config file: body timeout, connections_max, metrics on an
    ephemeral port. Returns it, its address and its metrics."""
    config = tmp_path / "headway.toml"
    config.write_text(f"request_body_timeout_ms = {body_timeout_ms}\n"
                      f"connections_max = {CONNECTIONS_MAX}\n"
                      f'metrics_listen = "127.0.0.1:0"\n')
    broker = make_broker("--config", str(config))
    host, port = broker.bootstrap.rsplit(":", 1)
    return broker, (host, int(port)), Metrics(broker.metrics_address())


# -- the tests -----------------------------------------------------------------------------

def test_hostile_clients_beside_well_behaved_ones(make_broker, tmp_path):
    print(f"hostile clients: seed {SEED} (replay with HEADWAY_HOSTILE_SEED={SEED})")
    rng = random.Random(SEED)
    broker, address, metrics = start_broker(make_broker, tmp_path, BODY_TIMEOUT_MS)
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)

    producer = BackgroundProducer(broker.bootstrap, TOPIC, rate_per_s=PRODUCE_RATE_PER_S,
                                  records_max=10**9, config={"enable.idempotence": True})
    delivery = producer.delivery = TimedDelivery()
    consumer = BackgroundConsumer(broker.bootstrap)
    stop_hostile = threading.Event()
    peaks: list[str] = []

    def phase_done(name: str, started: float) -> None:
        delivery.wait_for(len(delivery.acked) + ACKS_PER_PHASE, broker, name)
        memory = memory_kib(broker.pid)
        peaks.append(f"{name}: {time.monotonic() - started:.1f} s, VmHWM "
                     f"{memory['VmHWM'] / 1024:.0f} MiB, VmRSS {memory['VmRSS'] / 1024:.0f} MiB")
        print(peaks[-1])

    try:
        producer.start()
        consumer.start()
        delivery.wait_for(ACKS_PER_PHASE, broker, "before the hostile clients")
        while len(consumer.read) < ACKS_PER_PHASE // 2:
            assert consumer.error is None, f"consumer failed: {consumer.error!r}"
            delivery.wait_for(len(delivery.acked) + 10, broker, "the consumer's first reads")
        legit = metrics.scrape()
        print(f"legit clients connected: {legit['connections']:.0f} connections")

        # a. Oversized counts in every request type and version.
        started = time.monotonic()
        samples_answered(address)
        frames, pairs = damaged_frames(address)
        before = metrics.scrape()
        with ThreadPoolExecutor(HOSTILE_THREADS) as pool:
            watched = list(pool.map(lambda f: (f, send_and_watch(address, f)), frames))
        after = metrics.scrape()
        refused_a = after["requests_refused"] - before["requests_refused"]
        outcomes = Counter(outcome for _, outcome in watched)
        print(f"oversized counts: {len(frames)} frames over {pairs} API versions: "
              f"{dict(outcomes)}, refused {refused_a:.0f}")
        # ApiVersions answers a malformed body with INVALID_REQUEST, as Kafka does;
        # every other damaged request closes its connection unanswered.
        answered = [f for f, outcome in watched if outcome != "closed"]
        assert all(struct.unpack(">h", f[4:6])[0] == kf.API_VERSIONS_KEY for f in answered), (
            f"every damaged request but ApiVersions is closed unanswered: {dict(outcomes)}")
        assert refused_a == outcomes["closed"], (
            f"{refused_a} refusals for {outcomes['closed']} closed connections")
        phase_done("oversized counts", started)

        # b. Random frames after real headers, and two large ones at once.
        started = time.monotonic()
        frames = random_frames(address, rng)
        large_body = rng.randbytes(LARGE_FRAME_BYTES)
        large = [kf.frame(key, version, large_body)
                 for key, version in [(0, 9), (1, 12)][:LARGE_FRAMES]]
        before = metrics.scrape()
        with ThreadPoolExecutor(HOSTILE_THREADS) as pool:
            large_outcomes = pool.map(lambda f: send_and_watch(address, f), large)
            outcomes = Counter(pool.map(lambda f: send_and_watch(address, f), frames))
            outcomes.update(f"large {o}" for o in large_outcomes)
        del large, large_body
        after = metrics.scrape()
        refused_b = after["requests_refused"] - before["requests_refused"]
        waits_b = after["request_budget_waits"] - before["request_budget_waits"]
        print(f"random frames: {len(frames)} small and {LARGE_FRAMES} of "
              f"{LARGE_FRAME_BYTES >> 20} MiB: {dict(outcomes)}, refused {refused_b:.0f}, "
              f"request budget waits {waits_b:.0f}")
        assert refused_b >= outcomes["closed"] // 2, "random frames are refused"
        assert outcomes["large closed"] == LARGE_FRAMES, "large random frames are refused"
        assert after["request_body_timeouts"] == before["request_body_timeouts"], (
            "frames sent at full speed are read, not timed out")
        phase_done("random frames", started)

        # c. Stalled bodies: 100 MiB announced, nothing sent.
        started = time.monotonic()
        before = metrics.scrape()
        stalled = [socket.create_connection(address, timeout=30) for _ in range(STALLED)]
        try:
            for sock in stalled:
                sock.sendall(struct.pack(">i", STALLED_FRAME_BYTES))
            held = metrics.wait_for(
                "the stalled connections accepted",
                lambda m: m["connections_accepted"] >= before["connections_accepted"] + STALLED)
            # Each holds one step of the budget, not its 100 MiB; the legit clients'
            # requests come and go beside them.
            assert held["request_bytes_held"] <= STALLED * BUDGET_STEP_BYTES + (8 << 20), (
                f"stalled prefixes hold {held['request_bytes_held']:.0f} bytes of the budget")
            delivery.wait_for(len(delivery.acked) + ACKS_PER_PHASE, broker, "beside stalls")
            deadline = time.monotonic() + CLOSE_DEADLINE_S
            closed = [closed_by_broker(sock, deadline) for sock in stalled]
        finally:
            for sock in stalled:
                sock.close()
        print(f"stalled bodies: {sum(closed)} of {STALLED} closed by the broker, "
              f"request_bytes_held while stalled {held['request_bytes_held']:.0f}")
        assert all(closed), f"stalled connections closed by the broker: {closed}"
        phase_done("stalled bodies", started)

        # d. Slowloris: frames trickling in a byte at a time.
        started = time.monotonic()
        closed = slowloris(address, stop_hostile)
        print(f"slowloris: {sum(closed)} of {SLOWLORIS} closed by the broker")
        assert all(closed), f"slowloris connections closed by the broker: {closed}"
        after = metrics.scrape()
        timeouts = after["request_body_timeouts"] - before["request_body_timeouts"]
        assert timeouts == STALLED + SLOWLORIS, (
            f"{timeouts:.0f} body timeouts for {STALLED} stalled and {SLOWLORIS} slowloris")
        phase_done("slowloris", started)

        # e. A connection flood above connections_max.
        started = time.monotonic()
        flood = []
        try:
            for _ in range(FLOOD):
                flood.append(socket.create_connection(address, timeout=30))
            full = metrics.wait_for("connections_max reached",
                                    lambda m: m["connections"] >= CONNECTIONS_MAX)
            delivery.wait_for(len(delivery.acked) + ACKS_PER_PHASE, broker, "in the flood")
            still = metrics.scrape()
        finally:
            for sock in flood:
                sock.close()
        print(f"flood: {FLOOD} connections beside {legit['connections']:.0f} legit ones: "
              f"the broker held {full['connections']:.0f}, then {still['connections']:.0f}")
        assert full["connections"] == still["connections"] == CONNECTIONS_MAX
        metrics.wait_for("the flood gone",
                         lambda m: m["connections"] <= legit["connections"] + 1)
        phase_done("flood", started)

        producer.stop(purge=False, drain_s=DRAIN_S)
        assert not delivery.failed, f"deliveries failed: {list(delivery.failed.items())[:5]}"
        ends = [0] * PARTITIONS
        for p, o in delivery.acked.values():
            ends[p] = max(ends[p], o + 1)
        consumer.wait_until(ends)
        broker.check_alive()
        final = metrics.wait_for("the request budget free",
                                 lambda m: m["request_bytes_held"] == 0)
        memory = memory_kib(broker.pid)
    finally:
        stop_hostile.set()
        producer.stop(purge=True, drain_s=5)
        consumer.stop()

    print(f"legit producer: {len(delivery.acked)} acknowledged, {len(delivery.failed)} "
          f"failed, longest gap between acknowledgements {delivery.gap_max_s:.2f} s "
          f"(after ack {delivery.gap_max_after}); consumer read {len(consumer.read)}")
    print(f"broker: requests_refused {final['requests_refused']:.0f}, request_body_timeouts "
          f"{final['request_body_timeouts']:.0f}, request_budget_waits "
          f"{final['request_budget_waits']:.0f}, peak RSS (VmHWM) "
          f"{memory['VmHWM'] / 1024:.0f} MiB, bound {RSS_MAX_BYTES >> 20} MiB")
    problems = list(consumer.checker.problems[:20])
    problems += [f"producer error: {e}" for e in producer.errors.errors[:5]]
    problems += [f"consumer error: {e}" for e in consumer.errors.errors[:5]]
    for seq, (p, o) in delivery.acked.items():
        if consumer.read.get((p, o)) != seq:
            problems.append(f"seq {seq} acknowledged at {TOPIC}/{p} offset {o}, "
                            f"read {consumer.read.get((p, o))} there")
            if len(problems) > 40:
                break
    dups = [seq for seq, n in consumer.seq_counts.items() if n > 1]
    if dups or len(consumer.read) != len(delivery.acked):
        problems.append(f"read {len(consumer.read)} records for {len(delivery.acked)} "
                        f"acknowledged; read more than once: {dups[:10]}")
    assert not problems, f"seed {SEED}:\n  " + "\n  ".join(problems)
    assert delivery.gap_max_s < ACK_GAP_MAX_S, (
        f"acknowledgements stalled for {delivery.gap_max_s:.1f} s")
    assert memory["VmHWM"] * 1024 < RSS_MAX_BYTES, "\n".join(peaks)


HOG_BODY_TIMEOUT_MS = 20_000


def send_quietly(sock: socket.socket, payload: bytes) -> None:
    """Sends `payload`; the test closing the socket first ends it quietly."""
    try:
        sock.sendall(payload)
    except OSError:
        pass
MIB = 1024 * 1024


def test_budget_hogs_do_not_hold_up_others(make_broker, tmp_path):
    """Goal: connections that send large bodies cannot hold up other clients' requests
    (a fair request budget). Method: A announces 100 MiB and sends 64 MiB, so it holds
    100 MiB of the 128 MiB budget, and stalls; B announces 100 MiB and sends 16 MiB, so
    it waits for the budget. A fresh client's ApiVersions must then be answered while A
    still stalls, not only once A's body times out and is closed. (Three large frames
    sent together, which once held parts of the budget and waited on each other, are
    tested in crates/server/tests/hostile.rs.)"""
    broker, address, metrics = start_broker(make_broker, tmp_path, HOG_BODY_TIMEOUT_MS)
    budget = metrics.scrape()["request_bytes_max"]
    hogs = []
    try:
        for sent in (64 * MIB, 16 * MIB):
            sock = socket.create_connection(address, timeout=30)
            head = kf.frame(0, 9, b"")[4:]
            payload = struct.pack(">i", 100 * MIB) + head + bytes(sent - len(head))
            # From a thread: the broker reads B only once it has budget for B's frame,
            # so B's send stays blocked until then.
            threading.Thread(target=send_quietly, args=(sock, payload), daemon=True).start()
            hogs.append(sock)
            # The first, having sent 64 MiB, reserves the rest of its 100 MiB frame.
            metrics.wait_for("the first hog holding 100 MiB",
                             lambda m: m["request_bytes_held"] >= 100 * MIB)
        waiting = metrics.wait_for("the second hog waiting for the budget",
                                   lambda m: m["request_budget_waits"] >= 1)
        print(f"hogs hold {waiting['request_bytes_held'] / MIB:.0f} MiB of "
              f"{budget / MIB:.0f} MiB")
        with socket.create_connection(address, timeout=30) as sock:
            sock.sendall(kf.frame(kf.API_VERSIONS_KEY, 0, b""))
            deadline = time.monotonic() + HOG_BODY_TIMEOUT_MS / 1000 + 30
            answered = False
            while not answered and time.monotonic() < deadline:
                readable, _, _ = select.select([sock], [], [], 0.1)
                answered = bool(readable)
            readable, _, _ = select.select([hogs[0]], [], [], 0)
            first_hog_open = not readable
            assert answered, "ApiVersions not answered at all"
            assert first_hog_open, (
                "ApiVersions was answered only after the stalled hog timed out: every "
                "request waited behind the hogs for request_body_timeout_ms")
    finally:
        for sock in hogs:
            sock.close()
