"""Shared state is cluster state: topic config changes, dynamic broker configs, ACLs and
SCRAM users live in etcd, so a change made through one broker holds on every broker.
Three brokers and one etcd, real clients (confluent-kafka) and raw requests (kwire) sent
to one chosen broker over real sockets.

- A topic config altered through broker 1 is described by brokers 2 and 3 and enforced
  by every leader (max.message.bytes → MESSAGE_TOO_LARGE on partitions led elsewhere).
- A cluster-wide dynamic broker config set through broker 1 is described by every broker
  as DYNAMIC_DEFAULT_BROKER_CONFIG; broker 3's own config set through broker 1 shows on
  broker 3 as DYNAMIC_BROKER_CONFIG; a client quota set through broker 1 is described by
  every broker. All survive a restart of every broker.
- ACLs created through the Admin API are enforced by every broker (before: refused
  everywhere; after: allowed everywhere); a SCRAM user created the same way
  authenticates at every broker. A deletion made while a broker is down is in force when
  it returns; everything survives a restart of every broker; with etcd killed, every
  broker keeps enforcing the last ACLs and users it saw.
- Concurrent changes of one key through three brokers lose nothing; a broker killed
  between its etcd write and its answer leaves the change to every broker.
"""

from __future__ import annotations

import struct
from concurrent.futures import ThreadPoolExecutor

import kwire
from clients import admin, unique_topic
from cluster_rig import SESSION_TIMEOUT_MS, agreed_view, etcd, node_id  # noqa: F401 (fixture)
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
from failpoints import assert_failpoints_armed
from floe_process import free_port, wait_until

TIMEOUT_S = 20
API_DESCRIBE_CONFIGS = 32
API_INCREMENTAL_ALTER_CONFIGS = 44
API_DESCRIBE_ACLS = 29
API_CREATE_ACLS = 30
API_PRODUCE = 0
API_DESCRIBE_CLIENT_QUOTAS = 48
API_ALTER_CLIENT_QUOTAS = 49
TOPIC, BROKER = 2, 4
SET = 0
SOURCE_TOPIC, SOURCE_BROKER, SOURCE_DEFAULT_BROKER = 1, 2, 3
MESSAGE_TOO_LARGE = 10
ADMIN = ("admin", "admin-pw")


# ------------------------------------------------------------------ raw requests to one broker

def incremental_alter(b, rtype: int, name: str, configs: list[tuple[str, int, str | None]]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v0 of one resource, sent to broker `b` (its PLAINTEXT port)."""
    cfgs = [kwire.string(c) + struct.pack(">b", op) + kwire.string(v) for c, op, v in configs]
    body = kwire.array([struct.pack(">b", rtype) + kwire.string(name) + kwire.array(cfgs)]) + struct.pack(">?", False)
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.Reader(conn.call(API_INCREMENTAL_ALTER_CONFIGS, 0, body))
    r.i32()
    ((code, msg, _, _),) = r.array(lambda r: (r.i16(), r.string(), r.i8(), r.string()))
    return code, msg


def describe(b, rtype: int, name: str) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs v1 of one resource at broker `b`: name → (value, config source)."""
    body = kwire.array([struct.pack(">b", rtype) + kwire.string(name) + struct.pack(">i", -1)]) + struct.pack(">?", False)
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.Reader(conn.call(API_DESCRIBE_CONFIGS, 1, body))
    r.i32()

    def config(r):
        cname, value, _ro, source, _sensitive = r.string(), r.string(), r.i8(), r.i8(), r.i8()
        r.array(lambda r: (r.string(), r.string(), r.i8()))
        return cname, (value, source)

    ((code, msg, configs),) = r.array(lambda r: _result(r, config))
    assert code == 0, msg
    return dict(configs)


def _result(r, config):
    """One DescribeConfigs v1 result: (error code, message, configs); the resource's type and name skipped."""
    code, msg = r.i16(), r.string()
    r.i8()
    r.string()
    return code, msg, r.array(config)


def alter_client_quota(b, client_id: str, key: str, value: float | None) -> tuple[int, str | None]:
    """AlterClientQuotas v0 of one client-id entity at broker `b` (None removes the key)."""
    op = kwire.string(key) + struct.pack(">d?", value or 0.0, value is None)
    entry = kwire.array([kwire.string("client-id") + kwire.string(client_id)]) + kwire.array([op])
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.Reader(conn.call(API_ALTER_CLIENT_QUOTAS, 0, kwire.array([entry]) + struct.pack(">?", False)))
    r.i32()
    ((code, msg, _),) = r.array(lambda r: (r.i16(), r.string(), r.array(lambda r: (r.string(), r.string()))))
    return code, msg


def client_quotas(b, client_id: str) -> dict[str, float]:
    """DescribeClientQuotas v0 of one client id (exact match) at broker `b`: key → value."""
    body = kwire.array([kwire.string("client-id") + struct.pack(">b", 0) + kwire.string(client_id)]) + struct.pack(">?", False)
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.Reader(conn.call(API_DESCRIBE_CLIENT_QUOTAS, 0, body))
    r.i32()
    code, msg = r.i16(), r.string()
    assert code == 0, msg
    entries = r.array(lambda r: (r.array(lambda r: (r.string(), r.string())),
                                 r.array(lambda r: (r.string(), struct.unpack(">d", r.take(8))[0])))) or []
    return {k: v for _, values in entries for k, v in values}


def produce_error(b, topic: str, partition: int, value: bytes) -> int:
    """Produce v3 of one record straight to broker `b`; the partition's error code."""
    records = kwire.record_batch([kwire.Record(key=None, value=value)])
    with kwire.KafkaConn(b.host, b.port) as conn:
        got = kwire.parse_produce_v3(conn.call(API_PRODUCE, 3, kwire.produce_v3(topic, partition, records)))
    return got[(topic, partition)][0]


def leaders(b, topic: str) -> dict[int, int]:
    """partition → leader as broker `b` answers Metadata."""
    md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(topic, timeout=10).topics[topic]
    return {p: i.leader for p, i in md.partitions.items()}


def by_id(brokers, nid: int):
    return next(b for b in brokers if node_id(b) == nid)


def start_brokers(floe_factory, etcd, prefix: str, extra=lambda proc: {}):
    brokers = []
    for nid in (1, 2, 3):
        b = floe_factory(f"{prefix}-floe{nid}", start=False)
        b.overrides = {"broker.session.timeout.ms": SESSION_TIMEOUT_MS, **extra(b)}
        b.command_extra = ["--node-id", str(nid), "--metadata-store", etcd.store_url(prefix)]
        b.start()
        brokers.append(b)
    agreed_view(brokers, live=3)
    return brokers


# ------------------------------------------------------------------ configs

def test_topic_and_broker_configs_altered_through_one_broker_hold_on_every_broker(floe_factory, etcd):
    prefix = unique_topic("cfg")
    brokers = start_brokers(floe_factory, etcd, prefix)
    b1, b2, b3 = (by_id(brokers, i) for i in (1, 2, 3))
    topic = unique_topic("cfgtopic")
    a = admin(b1.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3, config={"retention.ms": "600000"})])[topic].result(timeout=TIMEOUT_S)
    led = wait_until(lambda: (lambda l: l if sorted(l.values()) == [1, 2, 3] else None)(leaders(b1, topic)),
                     timeout=30, interval=0.2, what="every broker to lead one partition")
    for b in brokers:
        wait_until(lambda b=b: produce_error(b, topic, next(p for p, l in led.items() if l == node_id(b)), b"x" * 4000) == 0,
                   timeout=30, interval=0.2, what=f"{b.name} to accept a 4 kB record")

    # Altered through broker 1 (incremental: the creation config stays).
    assert incremental_alter(b1, TOPIC, topic, [("max.message.bytes", SET, "1024")]) == (0, None)
    stored = etcd.get_json(f"/{prefix}/configs/topics/{topic}")
    assert stored["configs"] == {"max.message.bytes": "1024", "retention.ms": "600000"}, stored
    for b in (b2, b3):
        got = wait_until(lambda b=b: (lambda c: c if c["max.message.bytes"] == ("1024", SOURCE_TOPIC) else None)(describe(b, TOPIC, topic)),
                         timeout=10, interval=0.1, what=f"{b.name} to describe the altered config")
        assert got["retention.ms"] == ("600000", SOURCE_TOPIC)
    for p, leader in led.items():
        b = by_id(brokers, leader)
        wait_until(lambda b=b, p=p: produce_error(b, topic, p, b"x" * 4000) == MESSAGE_TOO_LARGE,
                   timeout=10, interval=0.1, what=f"leader {leader} to refuse a 4 kB record")
        assert produce_error(b, topic, p, b"y" * 100) == 0

    # Dynamic broker configs: the cluster-wide default, and broker 3's own, both through broker 1.
    assert incremental_alter(b1, BROKER, "", [("log.retention.ms", SET, "7200000")]) == (0, None)
    assert incremental_alter(b1, BROKER, "3", [("log.retention.bytes", SET, "123456789")]) == (0, None)
    for b in brokers:
        wait_until(lambda b=b: describe(b, BROKER, str(node_id(b)))["log.retention.ms"] == ("7200000", SOURCE_DEFAULT_BROKER),
                   timeout=10, interval=0.1, what=f"{b.name} to show the cluster-wide default")
    wait_until(lambda: describe(b3, BROKER, "3")["log.retention.bytes"] == ("123456789", SOURCE_BROKER),
               timeout=10, interval=0.1, what="broker 3 to show its own config, set through broker 1")
    assert describe(b2, BROKER, "2")["log.retention.bytes"][1] != SOURCE_BROKER
    # A read-only setting is refused by the handling broker, as on a broker alone.
    code, msg = incremental_alter(b2, BROKER, "", [("log.dirs", SET, "/elsewhere")])
    assert code == 42 and "Cannot update these configs dynamically" in msg, (code, msg)
    # An invalid topic value is refused before anything is written.
    code, _ = incremental_alter(b2, TOPIC, topic, [("max.message.bytes", SET, "not-a-number")])
    assert code == 40, code
    assert etcd.get_json(f"/{prefix}/configs/topics/{topic}")["configs"]["max.message.bytes"] == "1024"

    # A client quota set through broker 1 is every broker's.
    assert alter_client_quota(b1, "slow-client", "producer_byte_rate", 2048.0)[0] == 0
    for b in brokers:
        wait_until(lambda b=b: client_quotas(b, "slow-client") == {"producer_byte_rate": 2048.0},
                   timeout=10, interval=0.1, what=f"{b.name} to describe the quota")

    # Every broker restarted: the state is etcd's.
    for b in brokers:
        assert b.stop() == 0
    for b in brokers:
        b.start()
    for b in brokers:
        wait_until(lambda b=b: describe(b, TOPIC, topic)["max.message.bytes"] == ("1024", SOURCE_TOPIC),
                   timeout=30, interval=0.2, what=f"{b.name} to describe the altered config after a restart")
        assert describe(b, BROKER, str(node_id(b)))["log.retention.ms"] == ("7200000", SOURCE_DEFAULT_BROKER)
    assert describe(b3, BROKER, "3")["log.retention.bytes"] == ("123456789", SOURCE_BROKER)
    for b in brokers:
        assert client_quotas(b, "slow-client") == {"producer_byte_rate": 2048.0}, b.name
    # Removed through broker 2: gone everywhere.
    assert alter_client_quota(b2, "slow-client", "producer_byte_rate", None)[0] == 0
    for b in brokers:
        wait_until(lambda b=b: client_quotas(b, "slow-client") == {}, timeout=10, interval=0.1,
                   what=f"{b.name} to drop the quota")
    for p, leader in led.items():
        b = by_id(brokers, leader)
        wait_until(lambda b=b, p=p: produce_error(b, topic, p, b"x" * 4000) in (MESSAGE_TOO_LARGE, 6),
                   timeout=30, interval=0.2, what="the restarted leaders to answer")


# ------------------------------------------------------------------ ACLs and SCRAM users

def secure(tmp_path):
    """Per broker: PLAINTEXT on its port (the brokers' own traffic, and the test's raw
    requests: ANONYMOUS is a super user), SASL_PLAINTEXT on `.sasl_port` for the users;
    PLAIN admin from a file, SCRAM users from the cluster; the authorizer on."""
    users = tmp_path / "plain-users"
    users.write_text(f"{ADMIN[0]}:{ADMIN[1]}\n")

    def extra(proc):
        proc.sasl_port = free_port()
        listeners = f"PLAINTEXT://127.0.0.1:{proc.port},SASL_PLAINTEXT://127.0.0.1:{proc.sasl_port}"
        return {
            "listeners": listeners,
            "advertised.listeners": listeners,
            "floe.sasl.plain.users.file": str(users),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }
    return extra


def sasl_conf(b, user: str, password: str, mechanism: str = "PLAIN") -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def produce_as(b, topic: str, partition: int, user: str, password: str, mechanism: str = "PLAIN"):
    """One record to `partition` by a producer bootstrapped at broker `b` only: None, or
    the delivery error's code."""
    p = Producer({**sasl_conf(b, user, password, mechanism), "message.timeout.ms": 8000, "acks": "all"})
    errors: list = []
    p.produce(topic, b"v", partition=partition, on_delivery=lambda err, msg: errors.append(err))
    p.flush(TIMEOUT_S)
    assert len(errors) == 1, "no delivery report"
    return None if errors[0] is None else errors[0].code()


def described_acls(b) -> set[tuple]:
    """DescribeAcls v1 (everything) at broker `b`: (type, name, pattern, principal, op, permission)."""
    body = struct.pack(">b", 1) + kwire.string(None) + struct.pack(">b", 1) + kwire.string(None) + kwire.string(None) + struct.pack(">bb", 1, 1)
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.Reader(conn.call(API_DESCRIBE_ACLS, 1, body))
    r.i32()
    code, msg = r.i16(), r.string()
    assert code == 0, msg
    out = set()
    for rtype, name, pattern, acls in r.array(lambda r: (r.i8(), r.string(), r.i8(), r.array(lambda r: (r.string(), r.string(), r.i8(), r.i8())))):
        for principal, _host, op, perm in acls:
            out.add((rtype, name, pattern, principal, op, perm))
    return out


def test_acls_and_scram_users_created_through_one_broker_are_enforced_by_every_broker(floe_factory, etcd, tmp_path):
    prefix = unique_topic("sec")
    brokers = start_brokers(floe_factory, etcd, prefix, secure(tmp_path))
    b1 = by_id(brokers, 1)
    admin_conf = {**sasl_conf(b1, *ADMIN), "socket.timeout.ms": 10000}
    a = AdminClient(admin_conf)
    topic = unique_topic("acltopic")
    a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(timeout=TIMEOUT_S)
    led = wait_until(lambda: (lambda l: l if sorted(l.values()) == [1, 2, 3] else None)(
        {p: i.leader for p, i in AdminClient(admin_conf).list_topics(topic, timeout=10).topics[topic].partitions.items()}),
        timeout=30, interval=0.2, what="every broker to lead one partition")
    partition_of = {leader: p for p, leader in led.items()}

    # carol is a SCRAM user created through the Admin API; no ACL lets her write yet.
    ups = [UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-pw")]
    for fut in a.alter_user_scram_credentials(ups).values():
        fut.result(timeout=TIMEOUT_S)
    assert etcd.get_json(f"/{prefix}/scram/carol") is not None
    for b in brokers:
        err = produce_as(b, topic, partition_of[node_id(b)], "carol", "carol-pw", "SCRAM-SHA-256")
        assert err == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"{b.name}: {err}"

    # One ACL, created through the Admin API: every leader lets carol write, and a wrong
    # password is refused everywhere.
    allow = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*", AclOperation.WRITE,
                       AclPermissionType.ALLOW)
    for fut in a.create_acls([allow], request_timeout=TIMEOUT_S).values():
        fut.result(timeout=TIMEOUT_S)
    expected = (2, topic, 3, "User:carol", 4, 3)
    for b in brokers:
        wait_until(lambda b=b: expected in described_acls(b), timeout=10, interval=0.1, what=f"{b.name} to describe the ACL")
        assert produce_as(b, topic, partition_of[node_id(b)], "carol", "carol-pw", "SCRAM-SHA-256") is None, b.name
        assert produce_as(b, topic, partition_of[node_id(b)], "carol", "wrong", "SCRAM-SHA-256") is not None, b.name

    # Deleted while broker 3 is down: in force on its return, which read it from etcd.
    b3 = by_id(brokers, 3)
    assert b3.stop() == 0
    a = AdminClient(admin_conf)
    f = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", None, AclOperation.WRITE,
                         AclPermissionType.ALLOW)
    (deleted,) = a.delete_acls([f], request_timeout=TIMEOUT_S).values()
    assert len(deleted.result(timeout=TIMEOUT_S)) == 1
    b3.start()
    wait_until(lambda: expected not in described_acls(b3), timeout=10, interval=0.1, what="broker 3 to drop the deleted ACL")
    assert produce_as(b3, topic, partition_of[3], "carol", "carol-pw", "SCRAM-SHA-256") == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Granted again; every broker restarted: the ACL and the user are etcd's.
    a = AdminClient(admin_conf)  # kept alive until its futures resolve
    for fut in a.create_acls([allow], request_timeout=TIMEOUT_S).values():
        fut.result(timeout=TIMEOUT_S)
    for b in brokers:
        assert b.stop() == 0
    for b in brokers:
        b.start()
    for b in brokers:
        wait_until(lambda b=b: produce_as(b, topic, partition_of[node_id(b)], "carol", "carol-pw", "SCRAM-SHA-256") is None,
                   timeout=30, interval=0.5, what=f"{b.name} to let carol write after a restart")

    # etcd gone: each broker keeps enforcing what it last saw (carol may write, with her
    # password only; an unknown user is refused).
    etcd.kill9()
    for b in brokers:
        wait_until(lambda b=b: "shared state's etcd watch ended" in b.stderr_text(), timeout=30, interval=0.2,
                   what=f"{b.name} to lose etcd")
    for b in brokers:
        assert produce_as(b, topic, partition_of[node_id(b)], "carol", "carol-pw", "SCRAM-SHA-256") is None, b.name
        assert produce_as(b, topic, partition_of[node_id(b)], "carol", "wrong", "SCRAM-SHA-256") is not None, b.name
        assert produce_as(b, topic, partition_of[node_id(b)], "dave", "dave-pw", "SCRAM-SHA-256") is not None, b.name


# ------------------------------------------------------------------ a crash after the write

def test_a_broker_killed_between_its_etcd_write_and_its_answer_leaves_the_change_to_every_broker(floe_factory, etcd):
    """Crash point `cluster.shared_state.written`: broker 1 aborts once its topic config
    change is in etcd, before applying or answering it. The client sees the connection
    drop; brokers 2 and 3 apply the change from their watch, and broker 1 has it when it
    comes back."""
    prefix = unique_topic("crash")
    brokers = start_brokers(floe_factory, etcd, prefix)
    b1, b2, b3 = (by_id(brokers, i) for i in (1, 2, 3))
    topic = unique_topic("crashtopic")
    a = admin(b2.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(timeout=TIMEOUT_S)
    def knows(b):
        try:
            return "max.message.bytes" in describe(b, TOPIC, topic)
        except AssertionError:  # UNKNOWN_TOPIC_OR_PARTITION until its logs exist there
            return False

    for b in brokers:
        wait_until(lambda b=b: knows(b), timeout=30, interval=0.2, what=f"{b.name} to know the topic")
    assert b1.stop() == 0
    b1.start(env={"FAILPOINTS": "cluster.shared_state.written=return(abort)"})
    assert_failpoints_armed(b1)
    try:
        incremental_alter(b1, TOPIC, topic, [("retention.ms", SET, "4242")])
        raise AssertionError("broker 1 answered, though it was to abort after its write")
    except (ConnectionError, OSError, ValueError, struct.error):
        pass
    wait_until(lambda: not b1.running, timeout=10, interval=0.1, what="broker 1 to abort")
    assert etcd.get_json(f"/{prefix}/configs/topics/{topic}")["configs"] == {"retention.ms": "4242"}
    for b in (b2, b3):
        wait_until(lambda b=b: describe(b, TOPIC, topic)["retention.ms"] == ("4242", SOURCE_TOPIC), timeout=10, interval=0.1,
                   what=f"{b.name} to apply the change broker 1 wrote")
    b1.start(env={})
    wait_until(lambda: describe(b1, TOPIC, topic)["retention.ms"] == ("4242", SOURCE_TOPIC), timeout=30, interval=0.2,
               what="broker 1 to have its own change after its restart")


# ------------------------------------------------------------------ concurrent changes

def create_acl_raw(b, topic: str, principal: str) -> int:
    """CreateAcls v1 of one ALLOW WRITE binding on literal `topic`, sent to broker `b`; its error code."""
    creation = (struct.pack(">b", TOPIC) + kwire.string(topic) + struct.pack(">b", 3) + kwire.string(principal)
                + kwire.string("*") + struct.pack(">bb", 4, 3))
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.Reader(conn.call(API_CREATE_ACLS, 1, kwire.array([creation])))
    r.i32()
    ((code, _msg),) = r.array(lambda r: (r.i16(), r.string()))
    return code


def test_concurrent_acl_changes_through_every_broker_lose_nothing(floe_factory, etcd, tmp_path):
    """Three brokers add bindings to the same resource pattern (one etcd key) at once:
    each write is conditional on the key's revision and decided again when another won,
    so every binding is in the end state, on every broker."""
    prefix = unique_topic("race")
    brokers = start_brokers(floe_factory, etcd, prefix, secure(tmp_path))
    topic = unique_topic("racetopic")

    def add_all(b):
        return [create_acl_raw(b, topic, f"User:u{node_id(b)}-{i}") for i in range(15)]

    with ThreadPoolExecutor(max_workers=3) as pool:
        codes = [c for codes in pool.map(add_all, brokers) for c in codes]
    assert codes == [0] * 45, codes
    expected = {(2, topic, 3, f"User:u{n}-{i}", 4, 3) for n in (1, 2, 3) for i in range(15)}
    stored = etcd.get_json(f"/{prefix}/acls/Topic/Literal/{topic}")
    assert {(2, topic, 3, x["entry"]["principal"], 4, 3) for x in stored} == expected
    for b in brokers:
        wait_until(lambda b=b: described_acls(b) == expected, timeout=10, interval=0.1,
                   what=f"{b.name} to describe all 45 bindings")
