"""Resource limits under hostile clients: connection caps, idle and slowloris
deadlines, and ten thousand idle connections plus a swarm of half-sent frames.
Each case checks that the limit bites and that a well-behaved client is still
served (raw wire or confluent-kafka over real sockets)."""

from __future__ import annotations

import resource
import socket
import struct
import threading
import time

import pytest

import kwire
from clients import consume_range, create_topic, produce_all, unique_topic
from floe_process import wait_until

CLOSES = "floe_connections_closed_on_error_total"


def open_connections(floe) -> int:
    return int(floe.metric("floe_connections"))


def produce_and_fetch_raw(conn: kwire.KafkaConn, topic: str, values: list[bytes]) -> None:
    """Produce `values` on `conn` (raw Produce v3) and fetch them back (Fetch v4)."""
    body = kwire.produce_v3(topic, 0, kwire.record_batch([kwire.Record(None, v) for v in values]))
    res = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, body))
    err, base = res[(topic, 0)]
    assert err == 0, res
    fetched = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, base, 1 << 20)])))
    records = [r.value for b in kwire.decode_batches(fetched[0].records) for r in b.records]
    assert records[: len(values)] == values, records


def connected_raw(floe) -> kwire.KafkaConn:
    """A raw connection proven admitted by an answered ApiVersions."""
    conn = kwire.KafkaConn(floe.host, floe.port)
    err, _ = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, b""))
    assert err == 0
    return conn


def test_max_connections_closes_the_next_and_the_others_keep_serving(floe_factory):
    floe = floe_factory(overrides={"max.connections": "3"})
    topic = unique_topic("limits")
    # Wait out the start-up probe's connection, so exactly our three count.
    wait_until(lambda: open_connections(floe) == 0, timeout=10, what="no open connections")
    conns = [connected_raw(floe) for _ in range(3)]
    try:
        conns[0].call(kwire.API_METADATA, 1, kwire.metadata_v1([topic]))  # auto-creates the topic
        with kwire.KafkaConn(floe.host, floe.port) as extra:
            assert extra.closed_by_peer(timeout=10), "connection beyond max.connections left open"
        assert floe.metric(CLOSES, reason="max_connections") >= 1
        # The admitted connections still produce and fetch.
        for i, conn in enumerate(conns):
            produce_and_fetch_raw(conn, topic, [f"v{i}-{j}".encode() for j in range(5)])
        # A freed place is taken by the next connection.
        conns.pop().close()
        wait_until(lambda: open_connections(floe) == 2, timeout=10, what="the closed connection released")
        conns.append(connected_raw(floe))
        produce_and_fetch_raw(conns[-1], topic, [b"after-release"])
    finally:
        for c in conns:
            c.close()
    assert "connection limit reached" in floe.stderr_text()


def test_max_connections_per_ip(floe_factory):
    floe = floe_factory(overrides={"max.connections.per.ip": "2"})
    wait_until(lambda: open_connections(floe) == 0, timeout=10, what="no open connections")
    conns = [connected_raw(floe) for _ in range(2)]
    try:
        with kwire.KafkaConn(floe.host, floe.port) as extra:
            assert extra.closed_by_peer(timeout=10), "connection beyond max.connections.per.ip left open"
        assert floe.metric(CLOSES, reason="max_connections_per_ip") >= 1
        topic = unique_topic("perip")
        conns[0].call(kwire.API_METADATA, 1, kwire.metadata_v1([topic]))
        produce_and_fetch_raw(conns[1], topic, [b"still", b"served"])
    finally:
        for c in conns:
            c.close()


def test_idle_connection_is_closed(floe_factory):
    floe = floe_factory(overrides={"connections.max.idle.ms": "500"})
    used = connected_raw(floe)  # answered one request, then idles
    silent = kwire.KafkaConn(floe.host, floe.port)  # never sends a byte
    try:
        assert used.closed_by_peer(timeout=10), "idle connection left open past connections.max.idle.ms"
        assert silent.closed_by_peer(timeout=10), "silent connection left open past connections.max.idle.ms"
    finally:
        used.close()
        silent.close()
    assert floe.metric(CLOSES, reason="idle") >= 2
    # A fresh connection is served as usual.
    with connected_raw(floe):
        pass


def test_slowloris_is_closed_while_a_real_client_keeps_producing_and_fetching(floe_factory):
    # Idle deadline far away, so only the request read deadline can close the slow clients.
    floe = floe_factory(overrides={"floe.request.read-timeout-ms": "1000", "connections.max.idle.ms": "600000"})
    topic = create_topic(floe.bootstrap, unique_topic("slow"))

    stop = threading.Event()
    produced: list[int] = []
    failures: list[BaseException] = []

    def keep_producing():
        try:
            while not stop.is_set():
                n = len(produced)
                produced.extend(produce_all(floe.bootstrap, topic, [{"value": f"m{n + i}".encode()} for i in range(20)]))
        except BaseException as e:  # reported by the main thread
            failures.append(e)

    worker = threading.Thread(target=keep_producing, daemon=True)
    worker.start()
    stalled = kwire.KafkaConn(floe.host, floe.port)
    dribbler = kwire.KafkaConn(floe.host, floe.port)
    try:
        stalled.send_raw(b"\x00\x00")  # two bytes of a size prefix, then nothing
        # A whole, valid request sent one byte every 300 ms: busy, but never finishing in time.
        frame = dribbler.request_frame(kwire.API_API_VERSIONS, 0, b"")
        dribble_closed = False
        for byte in frame:
            try:
                dribbler.send_raw(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                dribble_closed = True
                break
            time.sleep(0.3)
        assert dribble_closed or dribbler.closed_by_peer(timeout=10), "dribbling client left open"
        assert stalled.closed_by_peer(timeout=10), "client stalled mid-frame left open"
    finally:
        stop.set()
        worker.join(timeout=60)
        stalled.close()
        dribbler.close()
    assert not failures, failures
    assert floe.metric(CLOSES, reason="request_read_timeout") >= 2
    assert len(produced) >= 20 and produced == list(range(len(produced)))
    got = consume_range(floe.bootstrap, topic, 0, len(produced))
    assert [m.value() for m in got] == [f"m{i}".encode() for i in range(len(produced))]


IDLE = 10_000
SWARM = 1_000
# What each connection may add to the broker's RSS: its 4 KiB read buffer, its task and
# session, the runtime's share (measured ~16 KiB with a debug build, 2026-12-03). Bounded
# per connection, not as a total, so the process's own size (features, threads) does not
# move the bar.
PER_CONNECTION_KIB = 20


def vm_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


def connect_many(floe, n: int, batch: int = 100) -> list[socket.socket]:
    """`n` non-blocking raw connections, opened in batches the broker has accepted
    before the next one starts: a connection whose final ACK arrives while the
    listen backlog (128 here) is full is established on the client side only,
    and an idle client never finds out."""
    socks: list[socket.socket] = []
    # Counted by accepts, not by open connections: a client that closes meanwhile
    # (the admin client of create_topic) must not make the count fall short.
    base = floe.metric("floe_connections_accepted_total")
    while len(socks) < n:
        for _ in range(min(batch, n - len(socks))):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex((floe.host, floe.port))
            socks.append(s)
        want = base + len(socks)
        wait_until(lambda: floe.metric("floe_connections_accepted_total") >= want, timeout=30, interval=0.1,
                   what=f"{want:.0f} connections accepted")
    return socks


def test_ten_thousand_idle_connections_and_half_sent_frames_leave_the_broker_serving(floe_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE + SWARM + 500
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}: cannot open {IDLE + SWARM} sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    floe = floe_factory(overrides={
        "max.connections": str(IDLE + SWARM + 100),
        "floe.request.read-timeout-ms": "3000",
    })
    topic = create_topic(floe.bootstrap, unique_topic("swarm"))
    rss_before = vm_rss_mib(floe.proc.pid)
    idle = swarm = []
    try:
        idle = connect_many(floe, IDLE)
        swarm = connect_many(floe, SWARM)
        # Each announces a ~100 MB request and sends two bytes of its header.
        half_frame = struct.pack(">i", 100_000_000) + b"\x00\x03"
        for s in swarm:
            s.send(half_frame)
        time.sleep(0.5)  # let the broker read them
        rss_loaded = vm_rss_mib(floe.proc.pid)
        assert open_connections(floe) >= IDLE + SWARM

        # A real producer and consumer are served meanwhile.
        values = [f"swarm-{i}".encode() for i in range(200)]
        offsets = produce_all(floe.bootstrap, topic, [{"value": v} for v in values])
        assert offsets == list(range(200))
        assert [m.value() for m in consume_range(floe.bootstrap, topic, 0, 200)] == values

        # The half-sent frames are closed at their read deadline; the idle ones stay.
        wait_until(lambda: floe.metric(CLOSES, reason="request_read_timeout") >= SWARM, timeout=20,
                   what="the swarm closed by floe.request.read-timeout-ms")
        assert open_connections(floe) >= IDLE
        rss_after = vm_rss_mib(floe.proc.pid)
        print(f"broker VmRSS: {rss_before:.1f} MiB before, {rss_loaded:.1f} MiB with {IDLE} idle + "
              f"{SWARM} half-sent connections, {rss_after:.1f} MiB after the swarm was closed")
        per_connection_kib = (rss_loaded - rss_before) * 1024 / (IDLE + SWARM)
        print(f"{per_connection_kib:.1f} KiB per connection")
        assert per_connection_kib < PER_CONNECTION_KIB, f"broker RSS {rss_loaded:.1f} MiB with {IDLE + SWARM} connections"
        assert (rss_after - rss_before) * 1024 / (IDLE + SWARM) < PER_CONNECTION_KIB
        # Several hundred closes, a handful of log lines: the close log is rate-limited.
        assert floe.stderr_text(limit=10**8).count("read deadline passed") < 50
    finally:
        for s in idle + swarm:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_accept_loop_survives_running_out_of_file_descriptors(floe):
    keeper = connected_raw(floe)
    # Lower the running broker's open-files limit, then open more connections than it allows.
    resource.prlimit(floe.proc.pid, resource.RLIMIT_NOFILE, (256, 256))
    flood = []
    try:
        for _ in range(320):
            flood.append(socket.create_connection((floe.host, floe.port), timeout=10))
        wait_until(lambda: "accept failed" in floe.stderr_text(), timeout=15, what="an EMFILE accept failure logged")
        # Out of descriptors, the broker still answers on a connection it already has.
        err, _ = kwire.parse_api_versions_v0(keeper.call(kwire.API_API_VERSIONS, 0, b""))
        assert err == 0
    finally:
        for s in flood:
            s.close()
        keeper.close()
    # Descriptors freed: the accept loop is still alive and new connections are served.
    def served():
        try:
            with connected_raw(floe):
                return True
        except OSError:
            return False
    wait_until(served, timeout=20, interval=0.2, what="a new connection served after EMFILE")
    assert floe.running
