"""Admin APIs that tools call (issue 13 §3), against a real floe, with confluent-kafka's
AdminClient where it has the call and raw wire bytes (kwire) where it does not:
DescribeLogDirs, ElectLeaders, OffsetForLeaderEpoch through a librdkafka consumer,
DescribeClientQuotas/AlterClientQuotas with producer_byte_rate enforced, and dynamic
broker configs (IncrementalAlterConfigs/AlterConfigs/DescribeConfigs on BROKER resources).
"""

from __future__ import annotations

import struct
import time

import kwire
from clients import CLIENT_TIMEOUT_S, admin, consumer, create_topic, produce_all, producer, unique_topic
from confluent_kafka import ConsumerGroupTopicPartitions, ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

API_DESCRIBE_LOG_DIRS = 35
API_DESCRIBE_CLIENT_QUOTAS = 48
API_ALTER_CLIENT_QUOTAS = 49
ERR_INVALID_REQUEST = 42


# ------------------------------------------------------------- raw encoders (non-flexible versions)

def describe_log_dirs_v1(topics: list[tuple[str, list[int]]] | None) -> bytes:
    if topics is None:
        return struct.pack(">i", -1)
    return kwire.array([kwire.string(t) + kwire.array([struct.pack(">i", p) for p in ps]) for t, ps in topics])


def parse_describe_log_dirs_v1(body: bytes):
    r = kwire.Reader(body)
    r.i32()  # throttle_time_ms

    def partition(r):
        return {"partition": r.i32(), "size": r.i64(), "offset_lag": r.i64(), "is_future": r.i8() != 0}

    def topic(r):
        return (r.string(), r.array(partition))

    def result(r):
        return {"error": r.i16(), "log_dir": r.string(), "topics": dict(r.array(topic))}

    results = r.array(result)
    assert r.done()
    return results


def alter_client_quotas_v0(entries, validate_only: bool = False) -> bytes:
    """entries: [([(entity_type, name or None)], [(key, value or None for removal)])]."""
    def entry(e):
        entity, ops = e
        ent = kwire.array([kwire.string(t) + kwire.string(n) for t, n in entity])
        op = kwire.array([kwire.string(k) + struct.pack(">d?", v or 0.0, v is None) for k, v in ops])
        return ent + op
    return kwire.array([entry(e) for e in entries]) + struct.pack(">?", validate_only)


def parse_alter_client_quotas_v0(body: bytes):
    r = kwire.Reader(body)
    r.i32()

    def entry(r):
        code, msg = r.i16(), r.string()
        entity = r.array(lambda r: (r.string(), r.string()))
        return code, msg, entity

    out = r.array(entry)
    assert r.done()
    return out


def describe_client_quotas_v0(components, strict: bool = False) -> bytes:
    """components: [(entity_type, match_type, match or None)]."""
    comps = [kwire.string(t) + struct.pack(">b", m) + kwire.string(n) for t, m, n in components]
    return kwire.array(comps) + struct.pack(">?", strict)


def parse_describe_client_quotas_v0(body: bytes):
    r = kwire.Reader(body)
    r.i32()
    code, msg = r.i16(), r.string()

    def entry(r):
        entity = r.array(lambda r: (r.string(), r.string()))
        values = r.array(lambda r: (r.string(), struct.unpack(">d", r.take(8))[0]))
        return entity, dict(values)

    entries = r.array(entry)
    assert r.done()
    return code, msg, entries


API_INCREMENTAL_ALTER_CONFIGS = 44
BROKER = 4


def incremental_alter_configs_v0(resources) -> bytes:
    """resources: [(resource_type, name, [(config, op, value or None)])]; op 0 SET, 1 DELETE."""
    def resource(r):
        rtype, name, configs = r
        cfgs = [kwire.string(c) + struct.pack(">b", op) + kwire.string(v) for c, op, v in configs]
        return struct.pack(">b", rtype) + kwire.string(name) + kwire.array(cfgs)
    return kwire.array([resource(r) for r in resources]) + struct.pack(">?", False)


def parse_incremental_alter_configs_v0(body: bytes):
    r = kwire.Reader(body)
    r.i32()
    out = r.array(lambda r: (r.i16(), r.string(), r.i8(), r.string()))
    assert r.done()
    return out


def alter_cluster_default(floe, configs) -> None:
    """The cluster-wide default (BROKER resource ""), over the wire: librdkafka refuses an empty broker name."""
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        body = incremental_alter_configs_v0([(BROKER, "", configs)])
        ((code, msg, _, _),) = parse_incremental_alter_configs_v0(conn.call(API_INCREMENTAL_ALTER_CONFIGS, 0, body))
        assert code == 0, msg


# ------------------------------------------------------------- DescribeLogDirs, ElectLeaders

def test_describe_log_dirs_reports_partition_sizes(floe):
    topic = create_topic(floe.bootstrap, unique_topic("logdirs"), partitions=2)
    produce_all(floe.bootstrap, topic, [{"value": b"x" * 1000} for _ in range(20)], partition=1)
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        everything = parse_describe_log_dirs_v1(conn.call(API_DESCRIBE_LOG_DIRS, 1, describe_log_dirs_v1(None)))
        named = parse_describe_log_dirs_v1(conn.call(API_DESCRIBE_LOG_DIRS, 1, describe_log_dirs_v1([(topic, [0, 1, 9])])))
    for results in (everything, named):
        assert len(results) == 1, "one log dir: the data dir"
        d = results[0]
        assert d["error"] == 0
        assert d["log_dir"] == str(floe.data_dir.resolve())
        parts = {p["partition"]: p for p in d["topics"][topic]}
        assert sorted(parts) == [0, 1], "partition 9 does not exist and is left out"
        assert parts[0]["size"] == 0
        assert parts[1]["size"] > 20 * 1000, "sizes are the segments' bytes"
        assert all(p["offset_lag"] == 0 and not p["is_future"] for p in parts.values())


def error_name(err) -> str | None:
    if isinstance(err, KafkaException):
        err = err.args[0]
    return None if err is None else err.name()


def test_elect_leaders_needs_no_election_on_one_replica(floe):
    topic = create_topic(floe.bootstrap, unique_topic("elect"), partitions=2)
    a = admin(floe.bootstrap)
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        fut = a.elect_leaders(election, [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 7)])
        results = fut.result(timeout=CLIENT_TIMEOUT_S)
        by_partition = {tp.partition: error_name(err) for tp, err in results.items()}
        assert by_partition == {0: "ELECTION_NOT_NEEDED", 1: "ELECTION_NOT_NEEDED", 7: "UNKNOWN_TOPIC_OR_PART"}, by_partition


def test_a_restarted_group_consumer_validates_its_position_and_reads_on(floe):
    """librdkafka validates a committed position with OffsetForLeaderEpoch once the broker
    offers it; the consumer must carry on from the committed offset, losing nothing."""
    topic = create_topic(floe.bootstrap, unique_topic("epoch"))
    produce_all(floe.bootstrap, topic, [{"value": f"a{i}".encode()} for i in range(10)])
    group = unique_topic("g")
    seen = []
    c = consumer(floe.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.offset.store": True})
    c.subscribe([topic])
    deadline = time.time() + CLIENT_TIMEOUT_S
    while len(seen) < 10 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen.append(m.value())
            assert m.leader_epoch() == 0
    c.commit(asynchronous=False)
    c.close()
    produce_all(floe.bootstrap, topic, [{"value": f"b{i}".encode()} for i in range(5)])
    c = consumer(floe.bootstrap, **{"group.id": group, "auto.offset.reset": "error"})
    c.subscribe([topic])
    deadline = time.time() + CLIENT_TIMEOUT_S
    while len(seen) < 15 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert not m.error(), m.error()
            seen.append(m.value())
    # A seek that names the leader epoch of the position is validated with OffsetForLeaderEpoch.
    c.seek(TopicPartition(topic, 0, 12, leader_epoch=0))
    deadline = time.time() + CLIENT_TIMEOUT_S
    again = None
    while again is None and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert not m.error(), m.error()
            again = m
    c.close()
    assert (again.offset(), again.value()) == (12, b"b2")
    assert floe.metric("floe_requests_total", api="OffsetForLeaderEpoch") > 0, "librdkafka validated the position"
    assert seen == [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(5)]
    a = admin(floe.bootstrap)  # kept alive until the future resolves
    committed = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    assert committed[group].result(timeout=CLIENT_TIMEOUT_S).topic_partitions[0].offset == 10


# ------------------------------------------------------------- client quotas

def test_client_quotas_are_described_persisted_and_validated(floe):
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        alter = alter_client_quotas_v0([
            ([("user", "alice"), ("client-id", None)], [("producer_byte_rate", 1024.0), ("request_percentage", 12.5)]),
            ([("client-id", "app")], [("consumer_byte_rate", 2048.0)]),
            ([("client-id", "bad")], [("producer_byte_rate", 1.5)]),
            ([("client-id", "bad2")], [("no_such_quota", 1.0)]),
        ])
        results = parse_alter_client_quotas_v0(conn.call(API_ALTER_CLIENT_QUOTAS, 0, alter))
        assert [code for code, _, _ in results] == [0, 0, ERR_INVALID_REQUEST, ERR_INVALID_REQUEST], results
    floe.restart()
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        code, _, entries = parse_describe_client_quotas_v0(conn.call(API_DESCRIBE_CLIENT_QUOTAS, 0, describe_client_quotas_v0([])))
        assert code == 0
        got = {tuple(e): v for e, v in entries}
        assert got == {
            (("user", "alice"), ("client-id", None)): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
            (("client-id", "app"),): {"consumer_byte_rate": 2048.0},
        }, "survives a restart; refused entities were not written"
        # user=alice exactly, strict: only the entity with no other component would match.
        code, _, entries = parse_describe_client_quotas_v0(
            conn.call(API_DESCRIBE_CLIENT_QUOTAS, 0, describe_client_quotas_v0([("user", 0, "alice")], strict=True)))
        assert (code, entries) == (0, [])
        code, _, entries = parse_describe_client_quotas_v0(
            conn.call(API_DESCRIBE_CLIENT_QUOTAS, 0, describe_client_quotas_v0([("client-id", 1, None)])))
        assert [e for e, _ in entries] == [[("user", "alice"), ("client-id", None)]], "MATCH_DEFAULT on client-id"
        remove = alter_client_quotas_v0([([("client-id", "app")], [("consumer_byte_rate", None)])])
        assert parse_alter_client_quotas_v0(conn.call(API_ALTER_CLIENT_QUOTAS, 0, remove))[0][0] == 0
        _, _, entries = parse_describe_client_quotas_v0(conn.call(API_DESCRIBE_CLIENT_QUOTAS, 0, describe_client_quotas_v0([])))
        assert len(entries) == 1


def test_producer_byte_rate_throttles_the_client_it_names(floe):
    """50 KB/s for client id `throttled`; 1 MiB in small requests. Kafka's rate is taken over at
    least 10 s of windows, so about 10 × quota goes through at once and the rest at the quota:
    the whole takes about bytes/quota − 10 s. The bound checked is half of that."""
    quota = 50 * 1024
    total = 1024 * 1024
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        alter = alter_client_quotas_v0([([("client-id", "throttled")], [("producer_byte_rate", float(quota))])])
        assert parse_alter_client_quotas_v0(conn.call(API_ALTER_CLIENT_QUOTAS, 0, alter))[0][0] == 0
    topic = create_topic(floe.bootstrap, unique_topic("quota"))
    throttles = []
    p = producer(floe.bootstrap, **{"client.id": "throttled", "batch.size": 16384, "linger.ms": 1,
                                    "message.timeout.ms": 60000, "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    started = time.monotonic()
    errors = []
    value = b"q" * 1024
    for _ in range(total // len(value)):
        while True:
            try:
                p.produce(topic, value, on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    elapsed = time.monotonic() - started
    p.poll(0.5)
    assert not errors, errors[:3]
    assert throttles and max(throttles) > 0, "throttle_time_ms reached the client"
    expected = total / quota - 10
    assert elapsed >= 0.5 * expected, f"{total} bytes at {quota} B/s took only {elapsed:.1f} s"
    # Another client id has no quota and is not held back.
    throttles.clear()
    fast = producer(floe.bootstrap, **{"client.id": "free", "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    for _ in range(256):
        fast.produce(topic, value)
    assert fast.flush(30) == 0
    fast.poll(0.2)
    assert not [t for t in throttles if t > 0]


# ------------------------------------------------------------- dynamic broker configs

def broker_configs(a, name: str) -> dict:
    fut = a.describe_configs([ConfigResource(ConfigResource.Type.BROKER, name)])
    return next(iter(fut.values())).result(timeout=CLIENT_TIMEOUT_S)


def topic_configs(a, topic: str) -> dict:
    fut = a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    return next(iter(fut.values())).result(timeout=CLIENT_TIMEOUT_S)


def test_dynamic_broker_configs_apply_persist_and_show_their_source(floe):
    a = admin(floe.bootstrap)
    topic = create_topic(floe.bootstrap, unique_topic("dyn"))
    kept = create_topic(floe.bootstrap, unique_topic("dynkept"), config={"retention.ms": "5000"})
    before = broker_configs(a, "1")
    assert before["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not before["log.retention.ms"].is_read_only
    assert before["log.dirs"].is_read_only

    # The cluster-wide default, then this broker's own value over it.
    alter_cluster_default(floe, [("log.retention.ms", 0, "7200000")])
    entry = broker_configs(a, "1")["log.retention.ms"]
    assert (entry.value, entry.source) == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    own = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.connections", "5000", incremental_operation=AlterConfigOpType.SET)])
    next(iter(a.incremental_alter_configs([own]).values())).result(timeout=CLIENT_TIMEOUT_S)
    entry = broker_configs(a, "1")["log.retention.ms"]
    assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert topic_configs(a, topic)["retention.ms"].value == "3600000", "a topic without an override sees the new default"
    assert topic_configs(a, kept)["retention.ms"].value == "5000", "an override still wins"

    # A read-only setting refuses its resource only; the topic in the same request is altered.
    bad = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)])
    good = ConfigResource(ConfigResource.Type.TOPIC, kept, incremental_configs=[
        ConfigEntry("retention.ms", "6000", incremental_operation=AlterConfigOpType.SET)])
    futs = a.incremental_alter_configs([bad, good])
    results = {res.restype: fut for res, fut in futs.items()}
    try:
        results[ConfigResource.Type.BROKER].result(timeout=CLIENT_TIMEOUT_S)
        raise AssertionError("log.dirs must not change at run time")
    except KafkaException as e:
        assert e.args[0].name() == "INVALID_REQUEST"
        assert "Cannot update these configs dynamically" in e.args[0].str()
    results[ConfigResource.Type.TOPIC].result(timeout=CLIENT_TIMEOUT_S)
    assert topic_configs(a, kept)["retention.ms"].value == "6000"

    # Persisted: the same after a restart; AlterConfigs replaces the set, DELETE removes a key.
    floe.restart()
    a = admin(floe.bootstrap)
    after = broker_configs(a, "1")
    assert (after["log.retention.ms"].value, after["max.connections"].value) == ("3600000", "5000")
    assert topic_configs(a, topic)["retention.ms"].value == "3600000"
    replace = ConfigResource(ConfigResource.Type.BROKER, "1", set_config={"log.segment.bytes": "1048576"})
    next(iter(a.alter_configs([replace]).values())).result(timeout=CLIENT_TIMEOUT_S)
    after = broker_configs(a, "1")
    assert after["log.segment.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert after["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, "the broker's set was replaced"
    assert after["max.connections"].source == ConfigSource.DEFAULT_CONFIG.value
    alter_cluster_default(floe, [("log.retention.ms", 1, None)])
    assert topic_configs(a, topic)["retention.ms"].value == str(7 * 24 * 3600 * 1000), "back to the static default"
