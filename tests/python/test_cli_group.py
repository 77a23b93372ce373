"""`floe group list|describe|seek|delete` (issue #17 part 1), driven as a user
would from the shell and checked with an independent client: a confluent-kafka
consumer group's own view (committed(), get_watermark_offsets(),
list_consumer_groups())."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition

from cli import floe_cli, floe_json, floe_ok
from clients import CLIENT_TIMEOUT_S, admin, consumer, create_topic, produce_all, unique_topic

PRODUCED = {0: 10, 1: 6}


def _consume(c, n: int) -> int:
    got = 0
    deadline = time.time() + CLIENT_TIMEOUT_S
    while got < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    assert got == n, f"consumed {got} of {n}"
    return got


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """What confluent-kafka reads back as the group's committed offsets (OffsetFetch; no join)."""
    c = consumer(bootstrap, **{"group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in PRODUCED], timeout=CLIENT_TIMEOUT_S)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def _groups(bootstrap: str) -> dict[str, str]:
    a = admin(bootstrap)
    result = a.list_consumer_groups(request_timeout=CLIENT_TIMEOUT_S).result(timeout=CLIENT_TIMEOUT_S)
    return {g.group_id: g.state.name for g in result.valid}


def test_describe_seek_list_and_delete_a_consumer_group(floe):
    topic = create_topic(floe.bootstrap, unique_topic("grp"), partitions=2)
    for p, n in PRODUCED.items():
        produce_all(floe.bootstrap, topic, [{"value": b"v%d" % i} for i in range(n)], partition=p)
    group = unique_topic("g")

    c = consumer(floe.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.offset.store": True,
                                    "client.id": "cli-test-consumer"})
    c.subscribe([topic])
    _consume(c, sum(PRODUCED.values()))
    # Commit part of the way: 7 of 10 and 2 of 6 (explicit, so both partitions have an offset).
    c.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 2)], asynchronous=False)
    try:
        # The consumer's own view of what it committed and where the logs end.
        mine = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in PRODUCED], timeout=10)}
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in PRODUCED}
        assert mine == {0: 7, 1: 2}

        doc = floe_json(floe.bootstrap, "group", "describe", group)
        assert doc["group"] == group and doc["state"] == "Stable" and doc["protocol_type"] == "consumer"
        [member] = doc["members"]
        assert member["client_id"] == "cli-test-consumer"
        assert sorted(member["assignment"][0]["partitions"]) == [0, 1] and member["assignment"][0]["topic"] == topic
        parts = {p["partition"]: p for p in doc["partitions"]}
        for p in PRODUCED:
            assert parts[p]["committed_offset"] == mine[p], (p, parts[p], mine)
            assert parts[p]["log_end_offset"] == ends[p]
            assert parts[p]["lag"] == ends[p] - mine[p]
            assert parts[p]["member_id"] == member["member_id"]
        assert doc["total_lag"] == sum(ends[p] - mine[p] for p in PRODUCED)
        text = floe_ok(floe.bootstrap, "group", "describe", group)
        assert "State: Stable" in text and "LAG" in text and member["member_id"] in text

        listed = floe_json(floe.bootstrap, "group", "list")
        assert {"group": group, "state": "Stable", "protocol_type": "consumer"}.items() <= \
            next(g for g in listed if g["group"] == group).items()
        stable_only = floe_json(floe.bootstrap, "group", "list", "--state", "Empty")
        assert group not in [g["group"] for g in stable_only]

        # Seeking a group with a live member is refused, naming the member.
        refused = floe_cli(floe.bootstrap, "group", "seek", group, "--to", "earliest")
        assert refused.returncode == 1 and member["member_id"] in refused.stderr and "stop" in refused.stderr, refused.stderr
        assert _committed(floe.bootstrap, group, topic) == mine
    finally:
        c.close()

    assert _groups(floe.bootstrap).get(group) == "EMPTY"
    # --dry-run shows the change and commits nothing.
    dry = floe_json(floe.bootstrap, "group", "seek", group, "--to", "earliest", "--dry-run")
    assert {p["partition"]: p["new_offset"] for p in dry["partitions"]} == {0: 0, 1: 0}
    assert _committed(floe.bootstrap, group, topic) == mine

    out = floe_json(floe.bootstrap, "group", "seek", group, "--to", "earliest", "--topic", topic)
    assert {p["partition"]: (p["old_offset"], p["new_offset"]) for p in out["partitions"]} == \
        {p: (mine[p], 0) for p in PRODUCED}
    assert _committed(floe.bootstrap, group, topic) == {0: 0, 1: 0}

    floe_ok(floe.bootstrap, "group", "seek", group, "--to", "latest")
    assert _committed(floe.bootstrap, group, topic) == PRODUCED

    floe_ok(floe.bootstrap, "group", "seek", group, "--to", "shift:-2")
    assert _committed(floe.bootstrap, group, topic) == {p: n - 2 for p, n in PRODUCED.items()}

    # An offset past a partition's end is kept within the log; only partition 0 named.
    floe_ok(floe.bootstrap, "group", "seek", group, "--to", "3", "--topic", f"{topic}:0")
    assert _committed(floe.bootstrap, group, topic) == {0: 3, 1: PRODUCED[1] - 2}
    clamped = floe_ok(floe.bootstrap, "group", "seek", group, "--to", "8")
    assert "outside the log" in clamped
    assert _committed(floe.bootstrap, group, topic) == {0: 8, 1: PRODUCED[1]}

    described = floe_json(floe.bootstrap, "group", "describe", group)
    assert described["state"] == "Empty" and described["members"] == []
    assert {p["partition"]: p["lag"] for p in described["partitions"]} == {0: 2, 1: 0}

    out = floe_ok(floe.bootstrap, "group", "delete", group)
    assert f"group {group} deleted" in out
    assert group not in _groups(floe.bootstrap)
    gone = floe_cli(floe.bootstrap, "group", "describe", group)
    assert gone.returncode == 4 and "not found" in gone.stderr, gone.stderr
    again = floe_cli(floe.bootstrap, "group", "delete", group)
    assert again.returncode == 4, again.stderr


def test_delete_refuses_a_group_with_members_and_bad_seek_targets_are_usage_errors(floe):
    topic = create_topic(floe.bootstrap, unique_topic("grp"))
    produce_all(floe.bootstrap, topic, [{"value": b"x"} for _ in range(3)])
    group = unique_topic("g")
    c = consumer(floe.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        _consume(c, 1)
        busy = floe_cli(floe.bootstrap, "group", "delete", group)
        assert busy.returncode == 1 and "NON_EMPTY_GROUP" in busy.stderr and "stop" in busy.stderr, busy.stderr
        assert group in _groups(floe.bootstrap)
    finally:
        c.close()
    usage = floe_cli(floe.bootstrap, "group", "seek", group, "--to", "sometime")
    assert usage.returncode == 2 and "shift:N" in usage.stderr, usage.stderr
    help_text = floe_ok(None, "group", "seek", "--help")
    assert "Examples:" in help_text and "@TIMESTAMP_MS" in help_text


def test_consume_with_a_group_starts_at_its_offsets_and_commits_what_it_printed(floe):
    """`floe topic consume --group G` reads as a consumer outside the membership
    (assign + commit): confluent-kafka's committed() and `group describe`'s lag
    follow what was printed, and the next run starts where the last one ended."""
    topic = unique_topic("cg")
    create_topic(floe.bootstrap, topic, partitions=2)
    for p, n in PRODUCED.items():
        produce_all(floe.bootstrap, topic, [{"value": b"%d-%d" % (p, i)} for i in range(n)], partition=p)
    group = unique_topic("g")

    first = floe_ok(floe.bootstrap, "topic", "consume", topic, "--group", group, "-p", "0", "--num", "4", "-f", "%p %o %v")
    assert first.splitlines() == [f"0 {i} 0-{i}" for i in range(4)]
    assert _committed(floe.bootstrap, group, topic)[0] == 4
    doc = floe_json(floe.bootstrap, "group", "describe", group)
    lag = {(r["topic"], r["partition"]): r["lag"] for r in doc["partitions"]}
    assert lag[(topic, 0)] == PRODUCED[0] - 4

    rest = floe_ok(floe.bootstrap, "topic", "consume", topic, "--group", group, "-e", "-f", "%p %o")
    seen = sorted(tuple(map(int, line.split())) for line in rest.splitlines())
    assert seen == sorted([(0, i) for i in range(4, PRODUCED[0])] + [(1, i) for i in range(PRODUCED[1])]), \
        "the second run starts at the committed offset of partition 0 and the beginning of partition 1"
    assert _committed(floe.bootstrap, group, topic) == PRODUCED
    assert floe_json(floe.bootstrap, "group", "describe", group)["total_lag"] == 0
