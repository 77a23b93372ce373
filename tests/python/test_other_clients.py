"""kafka-python, aiokafka and kcat against floe (no consumer groups: assign only)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import pytest

from clients import assert_contiguous, consume_range, create_topic, produce_all, unique_topic

N = 300


def expected(i: int):
    key = None if i % 4 == 1 else f"key-{i}".encode()
    # (kafka-python and aiokafka refuse a record with neither key nor value)
    value = None if i % 9 == 8 and key is not None else f"value-{i}".encode() * (1 + i % 5)
    headers = [("idx", str(i).encode()), ("kind", b"test")] if i % 3 == 0 else []
    return key, value, headers


# ---------------------------------------------------------------- kafka-python

@pytest.mark.parametrize("compression", [None, "gzip"])
def test_kafka_python_produce_and_assign_consume(floe, compression):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = create_topic(floe.bootstrap, unique_topic("kpy"))
    # Idempotence off: kafka-python 3 turns it on by default, which needs InitProducerId
    # (see test_kafka_python_default_idempotent_producer).
    producer = KafkaProducer(bootstrap_servers=floe.bootstrap, acks="all", compression_type=compression,
                             linger_ms=5, request_timeout_ms=20000, enable_idempotence=False)
    futures = []
    for i in range(N):
        k, v, h = expected(i)
        futures.append(producer.send(topic, key=k, value=v, headers=h, partition=0))
    producer.flush(timeout=30)
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close(timeout=10)
    assert offsets == list(range(N)), f"kafka-python acked offsets: {offsets[:10]}…"

    consumer = KafkaConsumer(bootstrap_servers=floe.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        for _ in range(200):
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
            if len(got) >= N:
                break
        assert len(got) == N, f"kafka-python consumed {len(got)}/{N}"
        assert [r.offset for r in got] == list(range(N))
        for i, r in enumerate(got):
            k, v, h = expected(i)
            assert (r.key, r.value, list(r.headers)) == (k, v, h), f"record {i}"
        # seek to the middle
        consumer.seek(tp, 250)
        again = []
        for _ in range(100):
            for records in consumer.poll(timeout_ms=200).values():
                again.extend(records)
            if len(again) >= 50:
                break
        assert [r.offset for r in again] == list(range(250, 300))
        assert consumer.end_offsets([tp])[tp] == N
        assert consumer.beginning_offsets([tp])[tp] == 0
    finally:
        consumer.close()

    # And librdkafka reads what kafka-python wrote.
    msgs = consume_range(floe.bootstrap, topic, 0, N)
    assert_contiguous(msgs)
    assert [(m.key(), m.value()) for m in msgs] == [expected(i)[:2] for i in range(N)]


def test_kafka_python_default_idempotent_producer(floe):
    from kafka import KafkaProducer

    topic = create_topic(floe.bootstrap, unique_topic("kpy-idem"))
    producer = KafkaProducer(bootstrap_servers=floe.bootstrap, request_timeout_ms=10000, max_block_ms=10000)
    try:
        offsets = [producer.send(topic, value=f"v{i}".encode(), partition=0).get(timeout=20).offset
                   for i in range(20)]
    finally:
        producer.close(timeout=5)
    assert offsets == list(range(20))
    assert [m.value() for m in consume_range(floe.bootstrap, topic, 0, 20)] == [f"v{i}".encode() for i in range(20)]


# ---------------------------------------------------------------- aiokafka

def test_aiokafka_produce_and_assign_consume(floe):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    topic = create_topic(floe.bootstrap, unique_topic("aio"))

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=floe.bootstrap, acks="all",
                                    compression_type="gzip", linger_ms=5)
        await producer.start()
        try:
            futs = []
            for i in range(N):
                k, v, h = expected(i)
                futs.append(await producer.send(topic, key=k, value=v, headers=h, partition=0))
            metas = await asyncio.gather(*futs)
        finally:
            await producer.stop()
        assert [m.offset for m in metas] == list(range(N))

        consumer = AIOKafkaConsumer(bootstrap_servers=floe.bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            for _ in range(200):
                batch = await consumer.getmany(tp, timeout_ms=200)
                got.extend(batch.get(tp, []))
                if len(got) >= N:
                    break
            assert len(got) == N, f"aiokafka consumed {len(got)}/{N}"
            assert [r.offset for r in got] == list(range(N))
            for i, r in enumerate(got):
                k, v, h = expected(i)
                assert (r.key, r.value, list(r.headers)) == (k, v, h), f"record {i}"
            ends = await consumer.end_offsets([tp])
            assert ends[tp] == N
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(run(), timeout=120))


# ---------------------------------------------------------------- kcat

def kcat(*args, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    exe = shutil.which("kcat")
    assert exe, "kcat not installed (tests/run-all.sh installs it)"
    return subprocess.run([exe, *args], input=input, capture_output=True, timeout=timeout)


def test_kcat_metadata_produce_consume(floe):
    topic = create_topic(floe.bootstrap, unique_topic("kcat"))

    md = kcat("-b", floe.bootstrap, "-L", "-J")
    assert md.returncode == 0, md.stderr.decode()
    meta = json.loads(md.stdout)
    assert [b["id"] for b in meta["brokers"]], meta
    assert any(b["name"] == floe.bootstrap or b["name"].endswith(f":{floe.port}") for b in meta["brokers"]), meta
    names = {t["topic"]: t for t in meta["topics"]}
    assert topic in names, f"kcat -L does not list {topic}: {sorted(names)}"
    assert len(names[topic]["partitions"]) == 1

    lines = [f"k{i}:line number {i}" for i in range(200)]
    prod = kcat("-b", floe.bootstrap, "-P", "-t", topic, "-p", "0", "-K", ":", "-z", "snappy",
                input=("\n".join(lines) + "\n").encode())
    assert prod.returncode == 0, prod.stderr.decode()

    cons = kcat("-b", floe.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J")
    assert cons.returncode == 0, cons.stderr.decode()
    rows = [json.loads(line) for line in cons.stdout.decode().splitlines() if line.strip()]
    assert [r["offset"] for r in rows] == list(range(200))
    assert [(r["key"], r["payload"]) for r in rows] == [(f"k{i}", f"line number {i}") for i in range(200)]

    # kcat reads what librdkafka 2.16 wrote, and vice versa.
    msgs = consume_range(floe.bootstrap, topic, 0, 200)
    assert [m.value() for m in msgs] == [f"line number {i}".encode() for i in range(200)]
    produce_all(floe.bootstrap, topic, [{"key": b"from-confluent", "value": b"hello kcat"}])
    tail = kcat("-b", floe.bootstrap, "-C", "-t", topic, "-o", "200", "-e", "-f", "%o %k %s\n")
    assert tail.returncode == 0, tail.stderr.decode()
    assert tail.stdout.decode().strip() == "200 from-confluent hello kcat"


def test_kcat_auto_creates_topic(floe):
    topic = unique_topic("kcat-auto")
    prod = kcat("-b", floe.bootstrap, "-P", "-t", topic, input=b"a\nb\nc\n")
    assert prod.returncode == 0, prod.stderr.decode()
    cons = kcat("-b", floe.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%p/%o=%s\n")
    assert cons.returncode == 0, cons.stderr.decode()
    assert cons.stdout.decode().split() == ["0/0=a", "0/1=b", "0/2=c"]


# ---------------------------------------------------------------- kafka-python admin (strict decoder)

def test_kafka_python_admin(floe):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic

    topic = unique_topic("kpy-admin")
    a = KafkaAdminClient(bootstrap_servers=floe.bootstrap, request_timeout_ms=20000)
    try:
        a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1,
                                  topic_configs={"retention.ms": "111111"})])
        assert topic in a.list_topics()
        (desc,) = a.describe_topics([topic])
        assert desc["error_code"] == 0 and len(desc["partitions"]) == 2, desc

        def retention():
            res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
            return res["topic"][topic]["retention.ms"]

        entry = retention()
        assert (entry["value"], entry["config_source"], entry["read_only"]) == \
            ("111111", "DYNAMIC_TOPIC_CONFIG", False), entry
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "222222"})])
        assert retention()["value"] == "222222"
        # segment.bytes was not set on the topic: it reports the broker default.
        res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        seg = res["topic"][topic]["segment.bytes"]
        assert seg["value"] == "1073741824" and seg["config_source"] != "DYNAMIC_TOPIC_CONFIG", seg

        a.create_partitions({topic: NewPartitions(total_count=3)})
        (desc,) = a.describe_topics([topic])
        assert len(desc["partitions"]) == 3

        cluster = a.describe_cluster()
        assert [b["port"] for b in cluster["brokers"]] == [floe.port], cluster

        a.delete_topics([topic])
        assert topic not in a.list_topics()
    finally:
        a.close()
