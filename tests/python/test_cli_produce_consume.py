"""`floe topic produce` and `floe topic consume` (issue #17 part 1), driven as a
user would from the shell and checked against an independent client
(confluent-kafka): what the CLI produces, confluent-kafka reads back; what
confluent-kafka produces, the CLI prints."""

from __future__ import annotations

import json
import subprocess
import time

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from cli import floe_cli, floe_json, floe_ok
from clients import consumer, create_topic, produce_all, producer, unique_topic
from floe_process import floe_bin


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, **conf) -> list:
    """Every record of every partition with confluent-kafka, from the beginning."""
    c = consumer(bootstrap, **conf)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + 20
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                out.append(m)
        assert len(out) == expected, f"read {len(out)} of {expected} records from {topic}"
        return out
    finally:
        c.close()


def java_partitions(bootstrap: str, keys: list[bytes], partitions: int) -> dict[bytes, int]:
    """Where librdkafka's murmur2_random partitioner (the Java client's placement)
    puts each key: produced to a topic of the same size, partition taken from the reports."""
    topic = create_topic(bootstrap, unique_topic("ref"), partitions=partitions)
    p = producer(bootstrap, partitioner="murmur2_random")
    placed: dict[bytes, int] = {}

    def report(err, msg):
        assert err is None, err
        placed[msg.key()] = msg.partition()

    for k in keys:
        p.produce(topic, key=k, value=b"x", on_delivery=report)
    assert p.flush(20) == 0
    return placed


def test_produce_keys_headers_and_every_codec_read_back_by_confluent(floe):
    topic = create_topic(floe.bootstrap, unique_topic("prod"), partitions=4)
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    keys = [f"key-{i}".encode() for i in range(12)]
    for codec in codecs:
        lines = "".join(f"{k.decode()}:{codec}-{i}:tail\n" for i, k in enumerate(keys))
        out = floe_ok(floe.bootstrap, "topic", "produce", topic, "-K", ":", "-H", "a=1", "-H", "b=2", "-H", "a=3",
                      "--compression", codec, input=lines)
        assert sum(int(line.split()[1]) for line in out.splitlines()) == len(keys), out
        assert all(line.startswith("produced ") and f" to {topic} [" in line for line in out.splitlines()), out

    got = read_all(floe.bootstrap, topic, 4, len(keys) * len(codecs))
    placed = java_partitions(floe.bootstrap, keys, 4)
    for m in got:
        assert m.partition() == placed[m.key()], f"{m.key()} in partition {m.partition()}, Java puts it in {placed[m.key()]}"
        assert m.headers() == [("a", b"1"), ("b", b"2"), ("a", b"3")], m.headers()
    values = sorted(m.value().decode() for m in got)
    # Split at the first delimiter only: the rest of the line is the value.
    assert values == sorted(f"{c}-{i}:tail" for c in codecs for i in range(len(keys)))
    assert len(set(placed.values())) > 1, "the keys should spread over partitions"

    # --value, --key, --partition, and the JSON answer.
    docs = floe_json(floe.bootstrap, "topic", "produce", topic, "--value", "one", "--value", "two", "--key", "K",
                     "--partition", "3", "--acks", "1")
    assert [(d["topic"], d["partition"], d["records"]) for d in docs] == [(topic, 3, 2)]
    c = consumer(floe.bootstrap)
    try:
        c.assign([TopicPartition(topic, 3, docs[0]["base_offset"])])
        ms = []
        while len(ms) < 2:
            ms += [m for m in c.consume(num_messages=2, timeout=1) if not m.error()]
        assert [(m.key(), m.value(), m.offset()) for m in ms] == \
            [(b"K", b"one", docs[0]["base_offset"]), (b"K", b"two", docs[0]["base_offset"] + 1)]
    finally:
        c.close()

    missing = floe_cli(floe.bootstrap, "topic", "produce", unique_topic("none"), "--value", "x")
    assert missing.returncode == 4 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr, missing.stderr
    bad_partition = floe_cli(floe.bootstrap, "topic", "produce", topic, "--value", "x", "--partition", "9")
    assert bad_partition.returncode == 4 and "no partition 9" in bad_partition.stderr, bad_partition.stderr
    assert "Examples:" in floe_ok(None, "topic", "produce", "--help")


def seed(bootstrap: str) -> tuple[str, int]:
    """A two-partition topic: ten records in partition 0 (timestamps base+i*1000,
    headers h=x,h=y on each), three in partition 1. Returns (topic, base timestamp)."""
    topic = create_topic(bootstrap, unique_topic("cons"), partitions=2)
    base = int(time.time() * 1000) - 60_000
    produce_all(bootstrap, topic, [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": base + i * 1000,
                                    "headers": [("h", b"x"), ("h", b"y")]} for i in range(10)], partition=0)
    produce_all(bootstrap, topic, [{"key": b"p1-%d" % i, "value": b"w%d" % i} for i in range(3)], partition=1,
                **{"compression.type": "lz4"})
    return topic, base


def test_consume_offsets_templates_and_json(floe):
    topic, base = seed(floe.bootstrap)
    every = floe_ok(floe.bootstrap, "topic", "consume", topic, "--offset", "beginning", "-e", "--format", "%k %v")
    assert sorted(every.splitlines()) == sorted([f"k{i} v{i}" for i in range(10)] + [f"p1-{i} w{i}" for i in range(3)])

    # The default offset is the beginning and the default format the value alone.
    default = floe_ok(floe.bootstrap, "topic", "consume", topic, "-p", "1", "-e")
    assert default.splitlines() == ["w0", "w1", "w2"]

    two = floe_ok(floe.bootstrap, "topic", "consume", topic, "--partition", "0", "--offset", "3", "--num", "2",
                  "--format", "%p %o %k %v %h")
    assert two.splitlines() == ["0 3 k3 v3 h=x,h=y", "0 4 k4 v4 h=x,h=y"]

    last = floe_ok(floe.bootstrap, "topic", "consume", topic, "--offset", "-2", "-e", "--format", "%p:%v")
    assert sorted(last.splitlines()) == ["0:v8", "0:v9", "1:w1", "1:w2"]

    assert floe_ok(floe.bootstrap, "topic", "consume", topic, "--offset", "end", "-e") == ""

    since = floe_ok(floe.bootstrap, "topic", "consume", topic, "-p", "0", "--offset", f"@{base + 6500}", "-e",
                    "--format", "%o %T")
    assert since.splitlines() == [f"{i} {base + i * 1000}" for i in range(7, 10)]

    lines = floe_ok(floe.bootstrap, "topic", "consume", topic, "-p", "0", "-e", "--num", "3", "--format", "json")
    docs = [json.loads(line) for line in lines.splitlines()]
    assert [d["offset"] for d in docs] == [0, 1, 2]
    assert docs[1] == {"topic": topic, "partition": 0, "offset": 1, "timestamp": base + 1000,
                       "timestamp_type": "CreateTime", "key": "k1", "value": "v1", "headers": [["h", "x"], ["h", "y"]]}

    beyond = floe_cli(floe.bootstrap, "topic", "consume", topic, "-p", "0", "--offset", "500", "-e")
    assert beyond.returncode == 1 and "OFFSET_OUT_OF_RANGE" in beyond.stderr and "0..10" in beyond.stderr, beyond.stderr
    usage = floe_cli(floe.bootstrap, "topic", "consume", topic, "--format", "%x")
    assert usage.returncode == 2 and "%x" in usage.stderr, usage.stderr
    assert "Examples:" in floe_ok(None, "topic", "consume", "--help")


def test_consume_follows_new_records_until_num(floe):
    topic = create_topic(floe.bootstrap, unique_topic("follow"), partitions=1)
    produce_all(floe.bootstrap, topic, [{"value": b"old"}])
    follower = subprocess.Popen([floe_bin(), "topic", "consume", topic, "--offset", "end", "--num", "2",
                                 "--brokers", floe.bootstrap], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)  # it is waiting at the end, not exited
        assert follower.poll() is None, follower.stderr.read() if follower.stderr else ""
        produce_all(floe.bootstrap, topic, [{"value": b"new-1"}, {"value": b"new-2"}, {"value": b"new-3"}])
        out, err = follower.communicate(timeout=20)
        assert follower.returncode == 0, err
        assert out.splitlines() == ["new-1", "new-2"]
    finally:
        if follower.poll() is None:
            follower.kill()


def test_read_committed_hides_an_aborted_transaction(floe):
    topic = create_topic(floe.bootstrap, unique_topic("txn"), partitions=1)
    p = Producer({"bootstrap.servers": floe.bootstrap, "transactional.id": unique_topic("cli-txn")})
    p.init_transactions(20)
    for values, commit in [([b"c1", b"c2"], True), ([b"a1", b"a2", b"a3"], False), ([b"c3"], True)]:
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v, partition=0)
        p.flush(20)
        (p.commit_transaction if commit else p.abort_transaction)(20)

    uncommitted = floe_ok(floe.bootstrap, "topic", "consume", topic, "-e")
    assert uncommitted.splitlines() == ["c1", "c2", "a1", "a2", "a3", "c3"], "read_uncommitted shows aborted records (never markers)"
    committed = floe_ok(floe.bootstrap, "topic", "consume", topic, "-e", "--isolation", "read_committed",
                        "--format", "%o %v")
    assert [line.split()[1] for line in committed.splitlines()] == ["c1", "c2", "c3"]
    # Cross-check with a read_committed confluent-kafka consumer.
    got = read_all(floe.bootstrap, topic, 1, 3, **{"isolation.level": "read_committed"})
    assert [m.value() for m in got] == [b"c1", b"c2", b"c3"]
    assert [int(line.split()[0]) for line in committed.splitlines()] == [m.offset() for m in got]


def test_schema_registry_avro_values_print_as_json(floe_factory):
    """--schema-registry: values an AvroSerializer wrote (Confluent wire format) print as JSON;
    plain values beside them print as they are."""
    import urllib.request

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from floe_process import free_port

    broker = floe_factory("floe", start=False)
    broker.schema_registry_port = free_port()
    broker.start()
    url = broker.schema_registry_url
    deadline = time.monotonic() + 20
    while True:
        try:
            if urllib.request.urlopen(url + "/subjects", timeout=2).status == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the schema registry did not answer"
        time.sleep(0.1)

    topic = create_topic(broker.bootstrap, unique_topic("avro"))
    schema = {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]}
    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))
    orders = [{"id": 1, "note": "first"}, {"id": 2, "note": None}]
    values = [serializer(o, SerializationContext(topic, MessageField.VALUE)) for o in orders]
    produce_all(broker.bootstrap, topic, [{"value": v} for v in values] + [{"value": b"plain text"}])

    out = floe_ok(broker.bootstrap, "topic", "consume", topic, "-e", "--schema-registry", url)
    lines = out.splitlines()
    assert [json.loads(line) for line in lines[:2]] == orders
    assert lines[2] == "plain text"
    via_x = floe_ok(broker.bootstrap, "topic", "consume", topic, "-e", "-X", f"schema.registry.url={url}", "--num", "1",
                    "--format", "json")
    assert json.loads(json.loads(via_x)["value"]) == orders[0]
    raw = floe_cli(broker.bootstrap, "topic", "consume", topic, "-e", "--num", "1", input=None)
    assert raw.returncode == 0 and "first" in raw.stdout and not raw.stdout.startswith("{")
