"""Broker settings from --config TOML, --override and FLOE_* env, observed through the wire."""

from __future__ import annotations

import kwire
from clients import admin, unique_topic
from floe_process import wait_until

ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_LEADER_NOT_AVAILABLE = 5


def metadata(floe, topics):
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        return kwire.parse_metadata_v1(conn.call(kwire.API_METADATA, 1, kwire.metadata_v1(topics)))


def test_toml_config_num_partitions_for_auto_created_topics(floe_factory, tmp_path):
    cfg = tmp_path / "floe.toml"
    cfg.write_text('"num.partitions" = 3\nauto.create.topics.enable = true\n')
    floe = floe_factory("cfg", start=False)
    floe.command_extra = ["--config", str(cfg)]
    floe.start()

    topic = unique_topic("auto")

    def created():
        _brokers, topics = metadata(floe, [topic])
        err, parts = topics[topic]
        assert err in (0, ERR_LEADER_NOT_AVAILABLE), f"auto-create answered error {err}"
        return err == 0 and parts

    parts = wait_until(created, timeout=10, what=f"auto-creation of {topic}")
    assert sorted(p[1] for p in parts) == [0, 1, 2], parts
    assert all(p[0] == 0 and p[2] == 1 for p in parts), f"partition errors/leaders: {parts}"


def test_auto_create_disabled_by_env(floe_factory):
    floe = floe_factory("noauto", env={"FLOE_AUTO_CREATE_TOPICS_ENABLE": "false"})
    topic = unique_topic("absent")
    brokers, topics = metadata(floe, [topic])
    assert topics[topic][0] == ERR_UNKNOWN_TOPIC_OR_PARTITION, topics
    assert brokers == [(1, "127.0.0.1", floe.port, None)] or (brokers[0][1], brokers[0][2]) == ("127.0.0.1", floe.port)
    # Still absent when asked again, and absent from the full listing.
    _, topics = metadata(floe, None)
    assert topic not in topics
    md = admin(floe.bootstrap).list_topics(timeout=10)
    assert topic not in md.topics


def test_override_beats_env(floe_factory):
    floe = floe_factory("prec", env={"FLOE_NUM_PARTITIONS": "2"}, overrides={"num.partitions": "4"})
    topic = unique_topic("prec")
    parts = wait_until(lambda: (lambda t: t[0] == 0 and t[1])(metadata(floe, [topic])[1][topic]),
                       timeout=10, what="auto-creation")
    assert len(parts) == 4, f"--override num.partitions=4 should beat FLOE_NUM_PARTITIONS=2: {len(parts)}"
