"""Floe's stderr logs as operators and log shippers see them (issue #17): no colour escapes
when stderr is not a terminal, `--log-format json` one object per line, and the request log
(`RUST_LOG=floe_broker::request=debug`) naming each Kafka API, client id and principal."""

from __future__ import annotations

import json
import re

from confluent_kafka.admin import AdminClient

from clients import CLIENT_TIMEOUT_S, consume_range, create_topic, produce_all, unique_topic

CLIENT_ID = "floe-log-test"
REQUEST_TARGET = "floe_broker::request"


def log_lines(floe) -> list[str]:
    """The broker's own stderr lines: the fixture's `=====` start/exit markers left out."""
    return [line for line in floe.stderr_text(limit=10_000_000).splitlines()
            if line.strip() and not line.startswith("=====")]


def exercise(bootstrap: str) -> str:
    """An AdminClient call (Metadata), a produce and a fetch, all as CLIENT_ID; returns the topic."""
    topic = unique_topic("logs")
    create_topic(bootstrap, topic)
    produce_all(bootstrap, topic, [{"value": b"v%d" % i} for i in range(3)], **{"client.id": CLIENT_ID})
    assert len(consume_range(bootstrap, topic, 0, 3, **{"client.id": CLIENT_ID})) == 3
    a = AdminClient({"bootstrap.servers": bootstrap, "client.id": CLIENT_ID})
    assert topic in a.list_topics(timeout=CLIENT_TIMEOUT_S).topics
    return topic


def test_no_ansi_escapes_when_stderr_is_a_file(floe_factory):
    # The fixture sets NO_COLOR=1, which alone would hide colours: clear it, so this shows
    # that a non-terminal stderr is enough.
    floe = floe_factory("floe", env={"NO_COLOR": ""})
    exercise(floe.bootstrap)
    floe.stop()
    lines = log_lines(floe)
    assert any("INFO" in line for line in lines), "\n".join(lines[:20])
    escaped = [line for line in lines if "\x1b[" in line]
    assert not escaped, f"{len(escaped)} log lines carry ANSI escapes, e.g. {escaped[0]!r}"
    # The request log is off by default.
    assert not [line for line in lines if REQUEST_TARGET in line]


def test_json_log_format_is_one_object_per_line(floe_factory):
    floe = floe_factory("floe", env={"NO_COLOR": "", "RUST_LOG": f"info,{REQUEST_TARGET}=debug"}, start=False)
    floe.command_extra = ["--log-format", "json"]
    floe.start()
    exercise(floe.bootstrap)
    floe.stop()
    lines = log_lines(floe)
    assert len(lines) > 5, lines
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError as e:
            raise AssertionError(f"not a JSON line ({e}): {line!r}") from None
        assert isinstance(event, dict), line
        for key in ("timestamp", "level", "target", "fields"):
            assert key in event, f"{key} missing: {line}"
        events.append(event)
    assert {"INFO", "DEBUG"} <= {e["level"] for e in events}
    requests = [e for e in events if e["target"] == REQUEST_TARGET]
    produce = [e for e in requests if e["fields"].get("api") == "Produce"]
    assert produce, [e["fields"] for e in requests][:10]
    f = produce[0]["fields"]
    assert f["client_id"] == CLIENT_ID and f["principal"] == "User:ANONYMOUS", f
    assert f["listener"] == "PLAINTEXT" and isinstance(f["elapsed_us"], int), f


def test_request_log_names_api_client_and_principal(floe_factory):
    floe = floe_factory("floe", env={"RUST_LOG": f"info,{REQUEST_TARGET}=debug"})
    exercise(floe.bootstrap)
    floe.stop()

    ours = [line for line in log_lines(floe)
            if REQUEST_TARGET in line and f'client_id="{CLIENT_ID}"' in line]
    apis = {m.group(1) for line in ours if (m := re.search(r'\bapi="(\w+)"', line))}
    assert {"ApiVersions", "Metadata", "Produce", "Fetch"} <= apis, (apis, ours[:10])
    for line in ours:
        assert "DEBUG" in line and "principal=User:ANONYMOUS" in line, line
        assert re.search(r"\bcorrelation_id=\d+", line) and re.search(r"\bapi_version=\d+", line), line
        assert "listener=PLAINTEXT" in line and "peer=127.0.0.1:" in line, line
