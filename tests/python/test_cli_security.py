"""`floe user create|list|delete` and `floe acl create|list|delete` (issue #17
part 1) against a broker with SASL (PLAIN for the super user `admin`, SCRAM
for the users the CLI creates) and the StandardAuthorizer, as test_acl.py and
test_sasl.py set them up. What the CLI does is checked with confluent-kafka
clients logging in as the user it created."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramMechanism)

from cli import floe_cli, floe_json, floe_ok
from clients import unique_topic

ADMIN = ("admin", "admin-secret")
TIMEOUT_S = 15


@pytest.fixture
def secured(floe_factory, tmp_path):
    """SASL_PLAINTEXT only; `admin` (PLAIN, from the users file) is the super user; no ACL: no access."""
    proc = floe_factory("floe-cli-sec", start=False)
    users = tmp_path / "plain-users"
    users.write_text(f"{ADMIN[0]}:{ADMIN[1]}\n")
    listener = f"SASL_PLAINTEXT://127.0.0.1:{proc.port}"
    proc.overrides = {
        "listeners": listener,
        "advertised.listeners": listener,
        "floe.sasl.plain.users.file": str(users),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }
    proc.start()
    return proc


def login(user: str, password: str, mechanism: str = "PLAIN") -> list[str]:
    """The CLI's -X flags for a SASL_PLAINTEXT login."""
    return ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanism={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]


AS_ADMIN = login(*ADMIN)


def client_conf(floe, user: str, password: str, mechanism: str, **extra) -> dict:
    return {"bootstrap.servers": floe.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, "socket.timeout.ms": 10000, **extra}


def can_log_in(floe, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bool:
    try:
        AdminClient(client_conf(floe, user, password, mechanism)).list_topics(timeout=5)
        return True
    except KafkaException:
        return False


def read_first(floe, user: str, password: str, topic: str, group: str):
    """Subscribes to `topic` in `group` as `user`: the first record, or the first error that is not transient."""
    c = Consumer(client_conf(floe, user, password, "SCRAM-SHA-256", **{
        "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
    try:
        c.subscribe([topic])
        for _ in range(150):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() and m.error().code() in (KafkaError._PARTITION_EOF, KafkaError._TRANSPORT):
                continue
            return m.error() if m.error() else m
        raise AssertionError("neither a record nor an error")
    finally:
        c.close()


def super_admin(floe) -> AdminClient:
    return AdminClient(client_conf(floe, *ADMIN, "PLAIN"))


def acls_seen_by_confluent(floe) -> set:
    f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    a = super_admin(floe)
    return {(b.principal, b.host, b.operation, b.permission_type, b.restype, b.name, b.resource_pattern_type)
            for b in a.describe_acls(f, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)}


def test_users_and_acls_made_by_the_cli_govern_a_real_client(secured):
    floe = secured
    readable, other = unique_topic("cli-sec"), unique_topic("cli-sec-other")
    a = super_admin(floe)
    for fut in a.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in (readable, other)]).values():
        fut.result(timeout=TIMEOUT_S)
    p = Producer(client_conf(floe, *ADMIN, "PLAIN"))
    for t in (readable, other):
        p.produce(t, b"hello " + t.encode())
    assert p.flush(TIMEOUT_S) == 0

    # The super user creates alice; the password comes from stdin.
    out = floe_ok(floe.bootstrap, "user", "create", "alice", "--password-stdin", *AS_ADMIN, input="alice-pw\n")
    assert "alice" in out and "SCRAM-SHA-256" in out
    described = a.describe_user_scram_credentials(["alice"])["alice"].result(timeout=TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_256, 4096)]
    listed = floe_json(floe.bootstrap, "user", "list", *AS_ADMIN)
    assert {"user": "alice", "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]} in listed
    assert can_log_in(floe, "alice", "alice-pw")
    assert not can_log_in(floe, "alice", "not-her-password")

    # One command, two ACLs: READ on the topic and on alice's consumer group.
    group = unique_topic("alice-group")
    created = floe_ok(floe.bootstrap, "acl", "create", "--allow-principal", "User:alice", "--operation", "Read",
                      "--topic", readable, "--group", group, *AS_ADMIN)
    assert "created 2 ACL" in created and readable in created and group in created
    group_acl = ("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW, ResourceType.GROUP, group,
                 ResourcePatternType.LITERAL)
    assert acls_seen_by_confluent(floe) == {group_acl, ("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW,
                                                        ResourceType.TOPIC, readable, ResourcePatternType.LITERAL)}
    m = read_first(floe, "alice", "alice-pw", readable, group)
    assert not isinstance(m, KafkaError) and m.value() == b"hello " + readable.encode(), m
    err = read_first(floe, "alice", "alice-pw", other, group)
    assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    # acl list, as a table and as JSON, with and without a filter that excludes it.
    table = floe_ok(floe.bootstrap, "acl", "list", *AS_ADMIN)
    lines = [line.split() for line in table.splitlines()]
    assert lines[0] == ["PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE-TYPE", "NAME", "PATTERN"]
    assert ["User:alice", "*", "READ", "ALLOW", "TOPIC", readable, "LITERAL"] in lines
    assert ["User:alice", "*", "READ", "ALLOW", "GROUP", group, "LITERAL"] in lines and len(lines) == 3
    assert floe_json(floe.bootstrap, "acl", "list", "--topic", readable, *AS_ADMIN) == [{
        "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW",
        "resource_type": "TOPIC", "resource_name": readable, "pattern_type": "LITERAL"}]
    assert floe_json(floe.bootstrap, "acl", "list", "--topic", other, *AS_ADMIN) == []

    # acl delete prints what it removed; alice is refused again.
    deleted = floe_ok(floe.bootstrap, "acl", "delete", "--allow-principal", "User:alice", "--operation", "Read",
                      "--topic", readable, *AS_ADMIN)
    assert "deleted 1 ACL" in deleted and readable in deleted and "READ" in deleted
    assert acls_seen_by_confluent(floe) == {group_acl}
    err = read_first(floe, "alice", "alice-pw", readable, group)
    assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    again = floe_ok(floe.bootstrap, "acl", "delete", "--topic", readable, *AS_ADMIN)
    assert "no ACL matched" in again

    # user delete: alice can no longer log in; deleting her again is "not found".
    out = floe_ok(floe.bootstrap, "user", "delete", "alice", *AS_ADMIN)
    assert "SCRAM-SHA-256" in out
    assert not can_log_in(floe, "alice", "alice-pw")
    gone = floe_cli(floe.bootstrap, "user", "delete", "alice", *AS_ADMIN)
    assert gone.returncode == 4 and "floe user list" in gone.stderr, gone.stderr


def test_the_cli_as_an_ordinary_user_and_with_a_wrong_password(secured):
    floe = secured
    floe_ok(floe.bootstrap, "user", "create", "bob", "--password", "bob-pw", "--mechanism", "SCRAM-SHA-512",
            "--iterations", "8192", *AS_ADMIN)
    a = super_admin(floe)  # kept alive until the future resolves
    described = a.describe_user_scram_credentials(["bob"])["bob"].result(timeout=TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    assert can_log_in(floe, "bob", "bob-pw", "SCRAM-SHA-512")

    # bob may not manage ACLs: a clear authorization error, exit 1, with the ACL hint.
    as_bob = login("bob", "bob-pw", "SCRAM-SHA-512")
    refused = floe_cli(floe.bootstrap, "acl", "create", "--allow-principal", "User:bob", "--operation", "All",
                       "--topic", "*", *as_bob)
    assert refused.returncode == 1, refused
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr and "floe acl list" in refused.stderr, refused.stderr
    assert acls_seen_by_confluent(floe) == set()

    # A prefixed ACL: listed for a topic it covers only with `match` (literal is the default, as kafka-acls).
    floe_ok(floe.bootstrap, "acl", "create", "--allow-principal", "User:bob", "--operation", "Write",
            "--operation", "Describe", "--topic", "bob-", "--resource-pattern-type", "prefixed", *AS_ADMIN)
    assert acls_seen_by_confluent(floe) == {
        ("User:bob", "*", op, AclPermissionType.ALLOW, ResourceType.TOPIC, "bob-", ResourcePatternType.PREFIXED)
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE)}
    assert floe_json(floe.bootstrap, "acl", "list", "--topic", "bob-orders", *AS_ADMIN) == []
    matched = floe_json(floe.bootstrap, "acl", "list", "--topic", "bob-orders", "--resource-pattern-type", "match",
                        *AS_ADMIN)
    assert sorted((a["operation"], a["pattern_type"], a["resource_name"]) for a in matched) == \
        [("DESCRIBE", "PREFIXED", "bob-"), ("WRITE", "PREFIXED", "bob-")]
    removed = floe_json(floe.bootstrap, "acl", "delete", "--topic", "bob-", "--resource-pattern-type", "prefixed",
                        *AS_ADMIN)
    assert len(removed) == 2 and acls_seen_by_confluent(floe) == set()

    # A wrong password: login failed, exit 3.
    wrong = floe_cli(floe.bootstrap, "user", "list", *login("bob", "wrong", "SCRAM-SHA-512"))
    assert wrong.returncode == 3, wrong
    assert "auth" in wrong.stderr.lower(), wrong.stderr

    # Usage slips are caught before connecting.
    no_resource = floe_cli(floe.bootstrap, "acl", "delete", "--allow-principal", "User:bob", *AS_ADMIN)
    assert no_resource.returncode == 2 and "--topic" in no_resource.stderr
    no_password = floe_cli(floe.bootstrap, "user", "create", "carol", *AS_ADMIN)
    assert no_password.returncode == 2 and "--password-stdin" in no_password.stderr
    bad_principal = floe_cli(floe.bootstrap, "acl", "create", "--allow-principal", "bob", "--operation", "Read",
                             "--topic", "t", *AS_ADMIN)
    assert bad_principal.returncode == 2 and "User:" in bad_principal.stderr


def test_acls_on_a_broker_without_an_authorizer_are_explained(floe):
    p = floe_cli(floe.bootstrap, "acl", "list")
    assert p.returncode == 1 and "SECURITY_DISABLED" in p.stderr and "authorizer.class.name" in p.stderr, p.stderr
