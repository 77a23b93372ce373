"""The web console's JSON API (issue #17 part 2), driven over HTTP as the page
drives it: sessions and CSRF, topics created and records produced through the
API seen by confluent-kafka (and the other way round), a group's lag as
confluent-kafka computes it, read-only mode, login and the broker's ACLs on a
SASL/SCRAM listener with the StandardAuthorizer, and benchmark reports served
without leaving their directory."""

from __future__ import annotations

import os
import time

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ConfigResource, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from clients import admin, consume_range, create_topic, produce_all, unique_topic, watermarks
from floe_process import free_port

TIMEOUT_S = 15


def start_with_console(floe_factory, name: str, overrides: dict | None = None):
    proc = floe_factory(name, start=False, overrides=overrides)
    proc.console_port = free_port()
    proc.start()
    return proc


class Console:
    """A browser's view of the console: one cookie jar, the CSRF token from /api/session."""

    def __init__(self, base: str):
        self.base = base
        self.http = requests.Session()
        self.csrf = self.get("/api/session").json()["csrf"]

    def get(self, path: str, **kw) -> requests.Response:
        return self.http.get(self.base + path, timeout=TIMEOUT_S * 2, **kw)

    def post(self, path: str, body=None, csrf: bool = True, **kw) -> requests.Response:
        headers = {"X-CSRF-Token": self.csrf} if csrf else {}
        return self.http.post(self.base + path, json=body, headers=headers, timeout=TIMEOUT_S * 2, **kw)

    def delete(self, path: str, body=None) -> requests.Response:
        return self.http.delete(self.base + path, json=body, headers={"X-CSRF-Token": self.csrf}, timeout=TIMEOUT_S * 2)

    def login(self, user: str, password: str) -> requests.Response:
        r = self.post("/api/login", {"username": user, "password": password})
        if r.status_code == 200:
            self.csrf = r.json()["csrf"]
        return r


@pytest.fixture
def bench_dir(tmp_path):
    root = tmp_path / "bench"
    (root / "run1").mkdir(parents=True)
    (root / "run1" / "report.md").write_text("# zero-copy\n\n| MB/s | p99 |\n|---|---|\n| 812 | 3.1 |\n")
    (root / "run1" / "throughput.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    (tmp_path / "secret.md").write_text("not for the console")
    os.symlink(tmp_path / "secret.md", root / "run1" / "escape.md")
    return root


@pytest.fixture
def console_floe(floe_factory, bench_dir):
    return start_with_console(floe_factory, "floe-console", {"floe.console.bench-reports-dir": str(bench_dir)})


def test_writes_need_the_sessions_csrf_token_and_a_created_topic_is_kafkas(console_floe):
    c = Console(console_floe.console_url)
    s = c.get("/api/session").json()
    assert s == {"user": None, "login_required": False, "read_only": False, "csrf": c.csrf}
    cookie = requests.get(console_floe.console_url + "/api/session", timeout=TIMEOUT_S).headers["Set-Cookie"]
    assert cookie.startswith("floe_console=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    topic = unique_topic("console")
    r = c.post("/api/topics", {"name": topic, "partitions": 3}, csrf=False)
    assert r.status_code == 403 and "CSRF" in r.json()["error"]
    r = c.http.post(c.base + "/api/topics", json={"name": topic}, headers={"X-CSRF-Token": "0" * 64}, timeout=TIMEOUT_S)
    assert r.status_code == 403
    assert topic not in admin(console_floe.bootstrap).list_topics(timeout=TIMEOUT_S).topics
    r = c.post("/api/topics", {"name": topic, "partitions": 3, "replicas": None, "configs": {"retention.ms": "3600000"}})
    assert r.status_code == 200, r.text
    assert r.json()["partitions"] == 3
    md = admin(console_floe.bootstrap).list_topics(timeout=TIMEOUT_S)
    assert len(md.topics[topic].partitions) == 3
    assert topic in [t["topic"] for t in c.get("/api/topics").json()]
    described = c.get(f"/api/topics/{topic}").json()
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert {"name": "retention.ms", "value": "3600000"}.items() <= next(x for x in described["configs"] if x["name"] == "retention.ms").items()
    # Again: Kafka's refusal, as a 400 naming it.
    r = c.post("/api/topics", {"name": topic})
    assert r.status_code == 400 and "TOPIC_ALREADY_EXISTS" in r.json()["error"]
    # Bad input is a 400 with a message, an oversized body a 413; the console lives on.
    r = c.http.post(c.base + "/api/topics", data=b"{not json", headers={"X-CSRF-Token": c.csrf}, timeout=TIMEOUT_S)
    assert r.status_code == 400 and "JSON" in r.json()["error"]
    assert c.post("/api/topics", {"name": topic + "x", "partitions": "many"}).status_code == 400
    r = c.http.post(c.base + "/api/topics", data=b"x" * (2 * 1024 * 1024), headers={"X-CSRF-Token": c.csrf}, timeout=TIMEOUT_S)
    assert r.status_code == 413
    assert c.get(f"/api/topics/{unique_topic('missing')}").status_code == 404
    r = c.post(f"/api/topics/{topic}/configs", {"set": {"retention.ms": "7200000"}, "delete": []})
    assert r.status_code == 200, r.text
    kafka = admin(console_floe.bootstrap)  # kept alive until the future resolves
    cfg = kafka.describe_configs([ConfigResource("topic", topic)])
    assert list(cfg.values())[0].result(timeout=TIMEOUT_S)["retention.ms"].value == "7200000"
    assert c.delete(f"/api/topics/{topic}").json() == {"deleted": topic}
    assert topic not in admin(console_floe.bootstrap).list_topics(timeout=TIMEOUT_S).topics
    # The page and its assets are served.
    page = c.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
    assert c.get("/app.js").status_code == 200 and c.get("/style.css").status_code == 200


def test_records_go_both_ways_with_headers(console_floe):
    c = Console(console_floe.console_url)
    topic = create_topic(console_floe.bootstrap, unique_topic("console-msgs"), partitions=2)
    r = c.post(f"/api/topics/{topic}/messages", {"key": "k1", "value": "from the console",
                                                  "headers": [["source", "ui"], ["source", "again"]], "partition": 1})
    assert r.status_code == 200, r.text
    assert r.json()[0]["partition"] == 1
    m = consume_range(console_floe.bootstrap, topic, r.json()[0]["base_offset"], 1, partition=1)[0]
    assert (m.key(), m.value(), m.headers()) == (b"k1", b"from the console", [("source", b"ui"), ("source", b"again")])

    produce_all(console_floe.bootstrap, topic, [
        {"key": b"a", "value": b"one", "headers": [("trace", b"t1")]},
        {"key": b"b", "value": b"two", "headers": [("trace", b"t2"), ("trace", b"t3")]},
        {"value": b"three"},
    ], partition=0)
    page = c.get(f"/api/topics/{topic}/messages", params={"partition": 0, "offset": "beginning", "limit": 2}).json()
    assert [(m["offset"], m["key"], m["value"]) for m in page["messages"]] == [(0, "a", "one"), (1, "b", "two")]
    assert page["messages"][1]["headers"] == [["trace", "t2"], ["trace", "t3"]]
    assert page["next_offset"] == 2
    rest = c.get(f"/api/topics/{topic}/messages", params={"partition": 0, "offset": page["next_offset"]}).json()
    assert [(m["key"], m["value"]) for m in rest["messages"]] == [(None, "three")]
    last = c.get(f"/api/topics/{topic}/messages", params={"partition": 0, "offset": "-1"}).json()
    assert [m["offset"] for m in last["messages"]] == [2]
    both = c.get(f"/api/topics/{topic}/messages").json()
    assert sorted((m["partition"], m["offset"]) for m in both["messages"]) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert c.get(f"/api/topics/{topic}/messages", params={"partition": 7}).status_code == 404
    assert c.get(f"/api/topics/{topic}/messages", params={"offset": "soon"}).status_code == 400


def test_group_lag_is_what_confluent_kafka_sees(console_floe):
    c = Console(console_floe.console_url)
    topic = create_topic(console_floe.bootstrap, unique_topic("console-lag"), partitions=2)
    produce_all(console_floe.bootstrap, topic, [{"value": b"x%d" % i} for i in range(10)], partition=0)
    produce_all(console_floe.bootstrap, topic, [{"value": b"y%d" % i} for i in range(4)], partition=1)
    group = unique_topic("console-group")
    consumer = Consumer({"bootstrap.servers": console_floe.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=TIMEOUT_S)
    finally:
        consumer.close()
    expected = {tp.partition: watermarks(console_floe.bootstrap, topic, tp.partition)[1] - tp.offset for tp in committed}
    assert group in [g["group"] for g in c.get("/api/groups").json()]
    doc = c.get(f"/api/groups/{group}").json()
    lags = {p["partition"]: p["lag"] for p in doc["partitions"] if p["topic"] == topic}
    assert lags == expected == {0: 7, 1: 0}
    assert doc["total_lag"] == 7
    assert isinstance(doc["history"], list)
    # Seek through the API: the group's committed offset moves where confluent-kafka reads it.
    r = c.post(f"/api/groups/{group}/seek", {"to": "earliest", "topic": f"{topic}:0", "dry_run": False})
    assert r.status_code == 200, r.text
    consumer = Consumer({"bootstrap.servers": console_floe.bootstrap, "group.id": group})
    try:
        assert consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)[0].offset == 0
    finally:
        consumer.close()
    assert c.get(f"/api/groups/{unique_topic('no-group')}").status_code == 404


def test_overview_and_bench_reports_never_leave_their_directory(console_floe, bench_dir):
    c = Console(console_floe.console_url)
    overview = c.get("/api/overview").json()
    assert overview["cluster"]["brokers"][0]["port"] == console_floe.port
    assert overview["health"]["healthy"] is True
    assert overview["metrics"]["interval_ms"] == 5000 and isinstance(overview["metrics"]["samples"], list)
    bench = c.get("/api/bench").json()
    assert bench["dir"] == str(bench_dir)
    # The symlink out of the directory is not listed (nor served, below).
    assert bench["reports"] == [{"name": "run1", "files": ["report.md", "throughput.svg"]}]
    report = c.get("/api/bench/run1/report.md")
    assert report.status_code == 200 and "| 812 | 3.1 |" in report.text and report.headers["Content-Type"].startswith("text/markdown")
    assert c.get("/api/bench/run1/throughput.svg").headers["Content-Type"] == "image/svg+xml"
    for path in ("/api/bench/run1/%2e%2e%2fsecret.md", "/api/bench/%2e%2e/secret.md", "/api/bench/run1/..%2F..%2Fsecret.md"):
        r = c.get(path)
        assert r.status_code in (400, 404), (path, r.status_code)
        assert "not for the console" not in r.text
    r = c.get("/api/bench/run1/escape.md")
    assert r.status_code == 403 and "not for the console" not in r.text


def test_read_only_refuses_every_write(floe_factory):
    floe = start_with_console(floe_factory, "floe-console-ro", {"floe.console.read-only": "true"})
    c = Console(floe.console_url)
    assert c.get("/api/session").json()["read_only"] is True
    topic = unique_topic("ro")
    for r in (c.post("/api/topics", {"name": topic}), c.delete(f"/api/topics/{topic}"),
              c.post("/api/acls", {"principal": "User:x", "operation": "Read", "resource_type": "topic", "name": topic})):
        assert r.status_code == 403 and "read-only" in r.json()["error"]
    assert topic not in admin(floe.bootstrap).list_topics(timeout=TIMEOUT_S).topics
    assert c.get("/api/topics").status_code == 200


ADMIN = ("admin", "admin-secret")


@pytest.fixture
def secured(floe_factory, tmp_path):
    """SASL_PLAINTEXT only, as test_cli_security.py: `admin` (PLAIN users file) is the super user."""
    proc = floe_factory("floe-console-sec", start=False)
    proc.console_port = free_port()
    users = tmp_path / "plain-users"
    users.write_text(f"{ADMIN[0]}:{ADMIN[1]}\n")
    listener = f"SASL_PLAINTEXT://127.0.0.1:{proc.port}"
    proc.overrides = {
        "listeners": listener, "advertised.listeners": listener,
        "floe.sasl.plain.users.file": str(users),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
        "floe.iceberg.tick-ms": "200", "floe.iceberg.target-lag-ms": "1000",
    }
    proc.start()
    return proc


def as_admin(floe) -> AdminClient:
    return AdminClient({"bootstrap.servers": floe.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                        "sasl.username": ADMIN[0], "sasl.password": ADMIN[1], "socket.timeout.ms": 10000})


def test_login_and_the_brokers_acls_decide(secured):
    a = as_admin(secured)
    for f in a.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-pw")]).values():
        f.result(timeout=TIMEOUT_S)
    topic = unique_topic("secret")
    a.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=TIMEOUT_S)

    c = Console(secured.console_url)
    session = c.get("/api/session").json()
    assert session["login_required"] is True and session["user"] is None
    r = c.get("/api/topics")
    assert r.status_code == 401 and r.json()["error"] == "log in first"
    assert c.post("/api/login", {"username": "alice", "password": "alice-pw"}, csrf=False).status_code == 403
    r = c.login("alice", "wrong")
    assert r.status_code == 401 and "refused" in r.json()["error"]
    assert c.get("/api/topics").status_code == 401
    r = c.login("alice", "alice-pw")
    assert r.status_code == 200 and r.json()["user"] == "alice"
    assert c.get("/api/session").json()["user"] == "alice"
    # No ACL: Metadata leaves the topic out of alice's list, and naming it is refused.
    assert topic not in [t["topic"] for t in c.get("/api/topics").json()]
    r = c.get(f"/api/topics/{topic}")
    assert r.status_code == 403 and "TOPIC_AUTHORIZATION_FAILED" in r.json()["error"]
    r = c.post(f"/api/topics/{topic}/messages", {"value": "x"})
    assert r.status_code == 403 and "TOPIC_AUTHORIZATION_FAILED" in r.json()["error"]
    # Nor may she grant herself one.
    r = c.post("/api/acls", {"principal": "User:alice", "operation": "All", "permission": "allow",
                             "resource_type": "topic", "name": topic, "pattern": "literal", "host": "*"})
    assert r.status_code == 403 and "AUTHORIZATION_FAILED" in r.json()["error"]

    for f in a.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)]).values():
        f.result(timeout=TIMEOUT_S)
    assert topic in [t["topic"] for t in c.get("/api/topics").json()]
    # The settings need DESCRIBE_CONFIGS: until then the partitions show, the settings say why not.
    r = c.get(f"/api/topics/{topic}")
    assert r.status_code == 200 and [p["partition"] for p in r.json()["partitions"]] == [0]
    assert r.json()["configs"] == [] and "TOPIC_AUTHORIZATION_FAILED" in r.json()["configs_error"]
    for f in a.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                                       AclOperation.DESCRIBE_CONFIGS, AclPermissionType.ALLOW)]).values():
        f.result(timeout=TIMEOUT_S)
    doc = c.get(f"/api/topics/{topic}").json()
    assert doc["topic"] == topic and doc["configs_error"] is None and doc["configs"]

    # The super user logs in with PLAIN (it has no SCRAM credential) and may write ACLs.
    boss = Console(secured.console_url)
    assert boss.login(*ADMIN).status_code == 200
    r = boss.post("/api/acls", {"principal": "User:alice", "operation": "Write", "permission": "allow",
                                "resource_type": "topic", "name": topic, "pattern": "literal", "host": "*"})
    assert r.status_code == 200, r.text
    bindings = a.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", None, AclOperation.WRITE,
        AclPermissionType.ALLOW)).result(timeout=TIMEOUT_S)
    assert len(bindings) == 1
    assert any(u["user"] == "alice" for u in boss.get("/api/users").json())
    assert c.post("/api/logout", {}).status_code == 200
    assert c.get("/api/topics").status_code == 401


def test_iceberg_tables_lag_and_query_snippets(floe_factory):
    floe = start_with_console(floe_factory, "floe-console-ice", {"floe.iceberg.tick-ms": "200", "floe.iceberg.target-lag-ms": "1000"})
    c = Console(floe.console_url)
    assert c.get("/api/iceberg").json()["tables"] == []  # nothing tiered yet: no catalog, no error
    topic = create_topic(floe.bootstrap, unique_topic("console-ice"), partitions=1,
                         config={"floe.iceberg.enabled": "true", "segment.bytes": "8000"})
    for _ in range(5):
        produce_all(floe.bootstrap, topic, [{"key": b"k%d" % i, "value": b"v" * 50} for i in range(30)])
    deadline = time.monotonic() + 60
    while True:
        doc = c.get("/api/iceberg").json()
        status = [s for s in doc["status"] if s["table"] == topic]
        if status and (status[0]["partitions"][0]["committed_offset"] or 0) > 0:
            break
        assert time.monotonic() < deadline, f"not tiered in time: {doc}"
        time.sleep(0.5)
    [table] = [t for t in doc["tables"] if t["table"] == topic]
    part = status[0]["partitions"][0]
    high = watermarks(floe.bootstrap, topic, 0)[1]
    assert part["high_watermark"] == high
    assert part["lag_records"] == high - part["committed_offset"]
    assert str(part["committed_offset"]) == str(table["committed_next_offsets"]["0"])
    assert os.path.exists(table["metadata_location"].removeprefix("file://"))
    assert table["metadata_location"] in table["queries"]["duckdb"]
    assert f"{topic}" in table["queries"]["spark"] and "load_table" in table["queries"]["pyiceberg"]
    snaps = c.get(f"/api/iceberg/{topic}/snapshots").json()
    assert any(s["operation"] == "append" for s in snaps["snapshots"])
    assert set(snaps["queries"]) == {"duckdb", "pyiceberg", "spark"}
    assert c.get("/api/iceberg/no-such-table/snapshots").status_code == 404
    assert part["lag_ms"] is None or part["lag_records"] > 0, "lag in time only where records wait"

    # A record not tiered yet: the lag in time is its age (the next tick tiers it, so catch it first).
    seen = False
    for _ in range(10):
        t0 = time.time() * 1000
        produce_all(floe.bootstrap, topic, [{"key": b"late", "value": b"v"}])
        part = [s for s in c.get("/api/iceberg").json()["status"] if s["table"] == topic][0]["partitions"][0]
        if part["lag_records"] and part["lag_records"] > 0:
            assert part["lag_ms"] is not None and 0 <= part["lag_ms"] <= time.time() * 1000 - t0 + 60_000, part
            seen = True
            break
    assert seen, "never saw an untiered record"


def test_a_table_shows_only_to_whom_may_describe_its_topic(secured):
    """The Iceberg page reads the catalog, not the broker: the console filters
    the tables by the topics the logged-in user may describe (the broker's
    ACLs, through Metadata)."""
    a = as_admin(secured)
    for f in a.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-pw")]).values():
        f.result(timeout=TIMEOUT_S)
    topic = unique_topic("tiered-secret")
    a.create_topics([NewTopic(topic, 1, 1, config={"floe.iceberg.enabled": "true", "segment.bytes": "8000"})])[topic].result(timeout=TIMEOUT_S)
    boss = Console(secured.console_url)
    assert boss.login(*ADMIN).status_code == 200
    for _ in range(3):
        assert boss.post(f"/api/topics/{topic}/messages", {"key": "k", "value": "v" * 4000}).status_code == 200
    deadline = time.monotonic() + 60
    while not [t for t in boss.get("/api/iceberg").json()["tables"] if t["table"] == topic]:
        assert time.monotonic() < deadline, "not tiered in time"
        time.sleep(0.5)

    carol = Console(secured.console_url)
    assert carol.login("carol", "carol-pw").status_code == 200
    assert topic not in [t["table"] for t in carol.get("/api/iceberg").json()["tables"]]
    r = carol.get(f"/api/iceberg/{topic}/snapshots")
    assert r.status_code == 403 and "TOPIC_AUTHORIZATION_FAILED" in r.json()["error"]
    for f in a.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*",
                                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)]).values():
        f.result(timeout=TIMEOUT_S)
    assert topic in [t["table"] for t in carol.get("/api/iceberg").json()["tables"]]
    assert carol.get(f"/api/iceberg/{topic}/snapshots").status_code == 200


def test_pages_may_run_only_the_consoles_own_files(console_floe):
    """Every answer forbids inline scripts, foreign origins and framing (CSP), so
    a record value or a benchmark SVG carrying markup is shown, never run; the
    session cookie is HttpOnly and SameSite=Strict."""
    http = requests.Session()
    for path in ["/", "/app.js", "/style.css"]:
        r = http.get(console_floe.console_url + path, timeout=TIMEOUT_S)
        assert r.status_code == 200, (path, r.status_code)
        csp = [d.strip() for d in r.headers.get("Content-Security-Policy", "").split(";")]
        # default-src 'self' with no script-src: scripts only from the console's own files.
        assert "default-src 'self'" in csp and not any(d.startswith("script-src") for d in csp), (path, csp)
        assert "frame-ancestors 'none'" in csp, (path, csp)
        assert r.headers.get("X-Content-Type-Options") == "nosniff" and r.headers.get("X-Frame-Options") == "DENY"
    # A benchmark SVG opened on its own runs nothing (default-src 'none').
    svg = requests.get(console_floe.console_url + "/api/bench/run1/throughput.svg", timeout=TIMEOUT_S)
    assert svg.status_code == 200 and "default-src 'none'" in svg.headers.get("Content-Security-Policy", "")
    cookie = http.get(console_floe.console_url + "/api/session", timeout=TIMEOUT_S)
    fresh = requests.get(console_floe.console_url + "/api/session", timeout=TIMEOUT_S).headers.get("Set-Cookie", "")
    assert "HttpOnly" in fresh and "SameSite=Strict" in fresh, fresh
    assert cookie.status_code == 200
