"""`floe topic create|list|describe|delete` (issue #17 part 1), driven as a user
would from the shell and checked with an independent client (confluent-kafka's
AdminClient and producer)."""

from __future__ import annotations

from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

from cli import floe_cli, floe_json, floe_ok
from clients import admin, create_topic, produce_all, unique_topic


def test_create_then_list_and_describe_as_another_client_sees_it(floe):
    topic = unique_topic("cli")
    out = floe_ok(floe.bootstrap, "topic", "create", topic, "--partitions", "3", "-c", "retention.ms=3600000",
                  "-c", "cleanup.policy=compact")
    assert f"topic {topic} created: 3 partitions" in out

    md = admin(floe.bootstrap).list_topics(topic, timeout=10).topics[topic]
    assert len(md.partitions) == 3
    res = ConfigResource(ResourceType.TOPIC, topic)
    a = admin(floe.bootstrap)
    configs = a.describe_configs([res])[res].result(timeout=10)
    assert configs["retention.ms"].value == "3600000" and configs["cleanup.policy"].value == "compact"

    listed = floe_json(floe.bootstrap, "topic", "list")
    assert {"topic": topic, "partitions": 3, "replication_factor": 1}.items() <= \
        next(t for t in listed if t["topic"] == topic).items()
    table = floe_ok(floe.bootstrap, "topic", "list")
    assert table.splitlines()[0].split() == ["TOPIC", "PARTITIONS", "REPLICAS"]
    assert [topic, "3", "1"] in [line.split() for line in table.splitlines()]

    produce_all(floe.bootstrap, topic, [{"key": b"k", "value": b"v%d" % i} for i in range(5)], partition=1)
    [doc] = floe_json(floe.bootstrap, "topic", "describe", topic)
    parts = {p["partition"]: p for p in doc["partitions"]}
    assert parts[1]["high_watermark"] == 5 and parts[1]["log_start_offset"] == 0 and parts[1]["records"] == 5
    assert parts[0]["high_watermark"] == 0 and parts[1]["leader"] == parts[1]["isr"][0]
    on_disk = sum(f.stat().st_size for f in floe.segment_files(topic, 1))
    assert parts[1]["size_bytes"] == on_disk > 0 and parts[0]["size_bytes"] == 0, (parts, on_disk)
    assert {c["name"]: c["value"] for c in doc["configs"]} == {"retention.ms": "3600000", "cleanup.policy": "compact"}
    text = floe_ok(floe.bootstrap, "topic", "describe", topic)
    assert "retention.ms" in text and "HIGH-WATERMARK" in text

    yaml = floe_ok(floe.bootstrap, "topic", "describe", topic, "--format", "yaml")
    assert f"- topic: {topic}\n" in yaml or f"  topic: {topic}\n" in yaml


def test_errors_name_the_kafka_error_and_exit_codes_tell_them_apart(floe):
    topic = unique_topic("dup")
    create_topic(floe.bootstrap, topic)
    dup = floe_cli(floe.bootstrap, "topic", "create", topic, "--partitions", "1")
    assert dup.returncode == 1 and "TOPIC_ALREADY_EXISTS" in dup.stderr, dup.stderr

    missing = floe_cli(floe.bootstrap, "topic", "describe", "no-such-topic")
    assert missing.returncode == 4 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr and "floe topic list" in missing.stderr

    bad = floe_cli(floe.bootstrap, "topic", "create", unique_topic("bad"), "-c", "retention.ms=soon")
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr, bad.stderr

    nobody = floe_cli("127.0.0.1:1", "topic", "list")
    assert nobody.returncode == 3 and "--brokers" in nobody.stderr, nobody.stderr

    usage = floe_cli(floe.bootstrap, "topic", "create")
    assert usage.returncode == 2 and "NAME" in usage.stderr


def test_dry_run_creates_nothing_and_delete_removes(floe):
    topic = unique_topic("gone")
    floe_ok(floe.bootstrap, "topic", "create", topic, "--partitions", "2", "--dry-run")
    assert topic not in admin(floe.bootstrap).list_topics(timeout=10).topics
    floe_ok(floe.bootstrap, "topic", "create", topic, "--partitions", "2")
    assert topic in admin(floe.bootstrap).list_topics(timeout=10).topics
    out = floe_ok(floe.bootstrap, "topic", "delete", topic)
    assert f"topic {topic} deleted" in out
    assert topic not in admin(floe.bootstrap).list_topics(timeout=10).topics
    again = floe_cli(floe.bootstrap, "topic", "delete", topic)
    assert again.returncode == 4, again.stderr


def test_brokers_default_and_environment(floe):
    """--brokers defaults to 127.0.0.1:9092; FLOE_BROKERS and a profile's bootstrap.servers also say where."""
    topic = unique_topic("env")
    create_topic(floe.bootstrap, topic)
    via_env = floe_cli(None, "topic", "list", env={"FLOE_BROKERS": floe.bootstrap})
    assert via_env.returncode == 0 and topic in via_env.stdout
    via_x = floe_cli(None, "topic", "list", "-X", f"bootstrap.servers={floe.bootstrap}")
    assert via_x.returncode == 0 and topic in via_x.stdout
    help_text = floe_ok(None, "topic", "create", "--help")
    assert "127.0.0.1:9092" in help_text and "Examples:" in help_text


def test_alter_config_sets_and_removes_settings(floe):
    topic = unique_topic("alter")
    create_topic(floe.bootstrap, topic, config={"cleanup.policy": "compact"})
    res = ConfigResource(ResourceType.TOPIC, topic)

    def configs():
        a = admin(floe.bootstrap)
        return a.describe_configs([res])[res].result(timeout=10)

    default_retention = configs()["retention.ms"].value
    dry = floe_json(floe.bootstrap, "topic", "alter-config", topic, "-s", "retention.ms=3600000", "--dry-run")
    assert dry["validate_only"] is True and configs()["retention.ms"].value == default_retention

    doc = floe_json(floe.bootstrap, "topic", "alter-config", topic, "-s", "retention.ms=3600000", "-s", "max.message.bytes=2097152")
    seen = configs()
    assert seen["retention.ms"].value == "3600000" and seen["max.message.bytes"].value == "2097152"
    assert seen["cleanup.policy"].value == "compact", "incremental: the other settings stay"
    assert {c["name"]: c["value"] for c in doc["configs"]} == \
        {"retention.ms": "3600000", "max.message.bytes": "2097152", "cleanup.policy": "compact"}

    text = floe_ok(floe.bootstrap, "topic", "alter-config", topic, "-d", "retention.ms")
    assert "retention.ms" not in text and "max.message.bytes" in text
    seen = configs()
    assert seen["retention.ms"].value == default_retention and getattr(seen["retention.ms"].source, "value", seen["retention.ms"].source) != ConfigSource.DYNAMIC_TOPIC_CONFIG.value  # back to a default

    bad = floe_cli(floe.bootstrap, "topic", "alter-config", topic, "-s", "retention.ms=soon")
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr, bad.stderr
    nothing = floe_cli(floe.bootstrap, "topic", "alter-config", topic)
    assert nothing.returncode != 0 and "-s KEY=VALUE" in nothing.stderr
    missing = floe_cli(floe.bootstrap, "topic", "alter-config", unique_topic("none"), "-s", "retention.ms=1")
    assert missing.returncode in (1, 4) and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr, missing.stderr


def test_add_partitions_grows_a_topic(floe):
    topic = unique_topic("grow")
    create_topic(floe.bootstrap, topic, partitions=2)
    floe_ok(floe.bootstrap, "topic", "add-partitions", topic, "--total", "5", "--dry-run")
    assert len(admin(floe.bootstrap).list_topics(topic, timeout=10).topics[topic].partitions) == 2
    out = floe_ok(floe.bootstrap, "topic", "add-partitions", topic, "--total", "5")
    assert f"topic {topic} now has 5 partitions" in out
    assert len(admin(floe.bootstrap).list_topics(topic, timeout=10).topics[topic].partitions) == 5
    shrink = floe_cli(floe.bootstrap, "topic", "add-partitions", topic, "--total", "3")
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in shrink.stderr, shrink.stderr
    missing = floe_cli(floe.bootstrap, "topic", "add-partitions", unique_topic("none"), "--total", "3")
    assert missing.returncode == 4, missing.stderr


def test_trim_prefix_moves_the_log_start(floe):
    from confluent_kafka import TopicPartition
    from clients import consumer
    topic = unique_topic("trim")
    create_topic(floe.bootstrap, topic, partitions=3)
    for p in range(3):
        produce_all(floe.bootstrap, topic, [{"value": b"v%d" % i} for i in range(10)], partition=p)

    def watermarks():
        c = consumer(floe.bootstrap)
        try:
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(3)}
        finally:
            c.close()

    doc = floe_json(floe.bootstrap, "topic", "trim-prefix", topic, "--partitions", "0,2", "--offset", "4")
    assert {p["partition"]: p["low_watermark"] for p in doc["partitions"]} == {0: 4, 2: 4}
    assert watermarks() == {0: (4, 10), 1: (0, 10), 2: (4, 10)}

    text = floe_ok(floe.bootstrap, "topic", "trim-prefix", topic, "--offset", "end")
    assert "LOW-WATERMARK" in text
    assert watermarks() == {0: (10, 10), 1: (10, 10), 2: (10, 10)}

    past = floe_cli(floe.bootstrap, "topic", "trim-prefix", topic, "--offset", "50")
    assert past.returncode == 1 and "OFFSET_OUT_OF_RANGE" in past.stderr, past.stderr
    nopart = floe_cli(floe.bootstrap, "topic", "trim-prefix", topic, "-p", "7", "--offset", "1")
    assert nopart.returncode == 4, nopart.stderr
