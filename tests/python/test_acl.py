"""ACLs (Kafka's authorization model) with real clients: a broker with a
SASL_PLAINTEXT listener, PLAIN users admin/alice/bob, `admin` a super user and
`allow.everyone.if.no.acl.found=false`. The admin manages ACLs through
confluent-kafka's AdminClient; alice and bob are allowed or refused per topic,
prefix, group and permission; ACLs survive a restart."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TIMEOUT_S = 15


def acl_broker(floe_factory, tmp_path):
    """SASL_PLAINTEXT only, on the factory's port; the authorizer on."""
    proc = floe_factory("floe-acl", start=False)
    users = tmp_path / "plain-users"
    users.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    listener = f"SASL_PLAINTEXT://127.0.0.1:{proc.port}"
    proc.overrides = {
        "listeners": listener,
        "advertised.listeners": listener,
        "floe.sasl.plain.users.file": str(users),
        "sasl.enabled.mechanisms": "PLAIN",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }
    proc.start()
    return proc


def conf(floe, user: str, **extra) -> dict:
    return {"bootstrap.servers": floe.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user], **extra}


def admin_client(floe, user: str = "admin") -> AdminClient:
    return AdminClient(conf(floe, user, **{"socket.timeout.ms": 10000}))


def create_topics(floe, *names: str):
    a = admin_client(floe)
    for fut in a.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in names]).values():
        fut.result(timeout=TIMEOUT_S)


def allow(principal, rtype, name, op, pattern=ResourcePatternType.LITERAL, perm=AclPermissionType.ALLOW):
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def create_acls(floe, bindings, user="admin"):
    a = admin_client(floe, user)
    for fut in a.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        fut.result(timeout=TIMEOUT_S)


def describe_all(floe) -> set:
    f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    a = admin_client(floe)  # kept alive until the future resolves
    return set(a.describe_acls(f, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S))


def produce_one(floe, user: str, topic: str):
    """Produces one record as `user`; returns None or the delivery error."""
    p = Producer(conf(floe, user, **{"message.timeout.ms": 10000, "acks": "all"}))
    errors: list = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(TIMEOUT_S)
    assert len(errors) == 1, "no delivery report"
    return errors[0]


def fetch_error(floe, user: str, topic: str):
    """Consumes `topic` from offset 0 by assignment; the first error or message seen."""
    c = Consumer(conf(floe, user, **{"group.id": "unused-assign-only", "enable.auto.commit": False,
                                     "auto.offset.reset": "earliest"}))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        for _ in range(100):
            m = c.poll(0.2)
            if m is None:
                continue
            # librdkafka looks up the coordinator of its group.id even when it only
            # assigns; without READ on that group it reports this, which is not the
            # fetch's answer.
            if m.error() and m.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                continue
            return m.error() if m.error() else m
        raise AssertionError("neither a record nor an error")
    finally:
        c.close()


def test_topic_acls_literal_prefixed_and_deny(floe_factory, tmp_path):
    floe = acl_broker(floe_factory, tmp_path)
    create_topics(floe, "events", "orders-eu", "orders-us", "payments")
    create_acls(floe, [
        allow("User:alice", ResourceType.TOPIC, "events", AclOperation.WRITE),
        allow("User:alice", ResourceType.TOPIC, "orders-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        allow("User:alice", ResourceType.TOPIC, "orders-us", AclOperation.WRITE, perm=AclPermissionType.DENY),
    ])

    # Allowed to produce but not to consume.
    assert produce_one(floe, "alice", "events") is None
    err = fetch_error(floe, "alice", "events")
    assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    # The prefix grants orders-*, not payments; the DENY wins over the prefix's ALLOW.
    assert produce_one(floe, "alice", "orders-eu") is None
    assert produce_one(floe, "alice", "orders-us").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_one(floe, "alice", "payments").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # No ACL at all for bob: refused (allow.everyone.if.no.acl.found=false).
    assert produce_one(floe, "bob", "events").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # The super user may do anything, ACLs or not.
    assert produce_one(floe, "admin", "payments") is None
    m = fetch_error(floe, "admin", "payments")
    assert not isinstance(m, KafkaError) and m.value() == b"v"

    # alice lists only the topics she may DESCRIBE (WRITE implies it).
    listed = set(admin_client(floe, "alice").list_topics(timeout=TIMEOUT_S).topics)
    assert listed == {"events", "orders-eu", "orders-us"}, listed

    # A denial is visible in the broker's log, with principal, operation and resource.
    log = floe.stderr_text()
    assert "authorization denied" in log and ("User:bob" in log or "User:alice" in log)
    assert floe.metric("floe_authorization_denied_total", resource_type="TOPIC") >= 3


def test_committing_offsets_needs_read_on_the_group(floe_factory, tmp_path):
    floe = acl_broker(floe_factory, tmp_path)
    create_topics(floe, "clicks")
    assert produce_one(floe, "admin", "clicks") is None
    create_acls(floe, [
        allow("User:alice", ResourceType.TOPIC, "clicks", AclOperation.READ),
        allow("User:alice", ResourceType.GROUP, "analytics", AclOperation.READ),
        # DESCRIBE lets alice find the coordinator of `other-group`, not commit to it.
        allow("User:alice", ResourceType.GROUP, "other-group", AclOperation.DESCRIBE),
    ])
    assert not isinstance(fetch_error(floe, "alice", "clicks"), KafkaError)

    def commit(group: str):
        c = Consumer(conf(floe, "alice", **{"group.id": group, "enable.auto.commit": False}))
        try:
            c.commit(offsets=[TopicPartition("clicks", 0, 1)], asynchronous=False)
            return c.committed([TopicPartition("clicks", 0)], timeout=TIMEOUT_S)[0].offset
        finally:
            c.close()

    assert commit("analytics") == 1
    with pytest.raises(KafkaException) as refused:
        commit("other-group")
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_acl_admin_describe_delete_restart_and_non_admins(floe_factory, tmp_path):
    floe = acl_broker(floe_factory, tmp_path)
    create_topics(floe, "orders-eu", "audit")
    bindings = {
        allow("User:alice", ResourceType.TOPIC, "orders-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        allow("User:alice", ResourceType.TOPIC, "orders-", AclOperation.READ, ResourcePatternType.PREFIXED),
        allow("User:alice", ResourceType.TOPIC, "audit", AclOperation.READ),
        allow("User:bob", ResourceType.TOPIC, "orders-", AclOperation.READ, ResourcePatternType.PREFIXED),
        allow("User:*", ResourceType.GROUP, "*", AclOperation.READ),
    }
    create_acls(floe, list(bindings))
    assert describe_all(floe) == bindings

    # MATCH finds every binding that applies to one topic name.
    match = AclBindingFilter(ResourceType.TOPIC, "orders-eu", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    a = admin_client(floe)
    found = set(a.describe_acls(match, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S))
    assert found == {b for b in bindings if b.name == "orders-"}

    # Only a principal with ALTER on the cluster may change ACLs.
    with pytest.raises(KafkaException) as refused:
        create_acls(floe, [allow("User:alice", ResourceType.TOPIC, "*", AclOperation.ALL)], user="alice")
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # Delete alice's PREFIXED topic bindings, and exactly those.
    f = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.PREFIXED, "User:alice", None,
                         AclOperation.ANY, AclPermissionType.ANY)
    deleted = a.delete_acls([f], request_timeout=TIMEOUT_S)[f].result(timeout=TIMEOUT_S)
    gone = {b for b in bindings if b.principal == "User:alice" and b.resource_pattern_type == ResourcePatternType.PREFIXED}
    assert set(deleted) == gone and len(gone) == 2
    assert describe_all(floe) == bindings - gone
    assert produce_one(floe, "alice", "orders-eu").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # ACLs are on disk: a restarted broker enforces the same set.
    floe.restart()
    assert describe_all(floe) == bindings - gone
    assert produce_one(floe, "alice", "orders-eu").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_one(floe, "admin", "orders-eu") is None
    assert not isinstance(fetch_error(floe, "bob", "orders-eu"), KafkaError), "bob's READ survived"


def test_kafka_python_sees_the_denial(floe_factory, tmp_path):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    floe = acl_broker(floe_factory, tmp_path)
    create_topics(floe, "private")
    p = KafkaProducer(bootstrap_servers=floe.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                      sasl_plain_username="bob", sasl_plain_password=USERS["bob"], max_block_ms=10000,
                      request_timeout_ms=10000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("private", b"x").get(timeout=TIMEOUT_S)
    finally:
        p.close(timeout=5)


def test_a_client_certificate_names_the_principal(floe_factory, tmp_path):
    """SSL with a verified client certificate: the principal is User: + its subject
    DN (Kafka's default), here `User:CN=alice`. Administration goes over a
    PLAINTEXT listener whose anonymous clients are made super users for the test."""
    from tls_certs import make_pki
    from test_tls import ssl_conf, tls_broker

    pki = make_pki(tmp_path / "pki")
    proc = tls_broker(floe_factory, pki, name="floe-mtls", extra={
        "ssl.truststore.location": str(pki.ca.cert),
        "ssl.client.auth": "required",
        "authorizer.class.name": "floe",
        "super.users": "User:ANONYMOUS",
    })
    plain = {"bootstrap.servers": proc.bootstrap}
    a = AdminClient(plain)
    for fut in a.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in ("signed", "other")]).values():
        fut.result(timeout=TIMEOUT_S)
    for fut in a.create_acls([allow("User:CN=alice", ResourceType.TOPIC, "signed", AclOperation.WRITE)]).values():
        fut.result(timeout=TIMEOUT_S)

    def produce(topic: str):
        p = Producer({"bootstrap.servers": f"127.0.0.1:{proc.ssl_port}", **ssl_conf(pki, client=pki.client),
                      "message.timeout.ms": 10000})
        errors: list = []
        p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
        p.flush(TIMEOUT_S)
        return errors[0]

    assert produce("signed") is None
    assert produce("other").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "User:CN=alice" in proc.stderr_text(), "the denial names the certificate's principal"
