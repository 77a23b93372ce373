"""`floe.iceberg.storage` (copy | shared): the INVALID_CONFIG answers of CreateTopics,
AlterConfigs and IncrementalAlterConfigs (docs/shared-mode.md 1.3, stage 1 of 7).

Each combination is refused with its message through confluent-kafka's AdminClient
(librdkafka) and kafka-python's KafkaAdminClient, on create and on alter (both the
replacing AlterConfigs and IncrementalAlterConfigs), and a refused alter leaves the
topic as it was. The checks run on the effective config: a broker default
(`floe.iceberg.enabled=false`, `day(timestamp)`) counts as the topic's. The mode is
fixed when a topic is created: altering a copy topic to shared, or back, is refused.

kcat is left out: it cannot create topics or alter configs (its `-X` settings are the
client's, not a topic's).
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from clients import CLIENT_TIMEOUT_S, admin, create_topic, unique_topic
from cluster_rig import agreed_view, etcd, start_cluster  # noqa: F401 (etcd: fixture)

SHARED = {"floe.iceberg.storage": "shared", "floe.iceberg.enabled": "true"}


def change_message(before: str, after: str) -> str:
    return (f"floe.iceberg.storage: cannot change from {before} to {after} on an existing topic; it is fixed when "
            "the topic is created (create a new topic and copy the records to it)")


def spec_message(spec: str) -> str:
    return ("floe.iceberg.storage: shared needs a partition spec with identity(partition) and no term on key, "
            f"value or headers, to find a partition's offsets in the table; floe.iceberg.partition-spec is \"{spec}\"")


def keep_raw_message(key: str, fmt: str) -> str:
    return (f"floe.iceberg.storage: shared with {key}={fmt} needs floe.iceberg.keep-raw=true "
            "(the table must hold the bytes a consumer fetches)")


COMPACT = ("floe.iceberg.storage: shared cannot be combined with cleanup.policy=compact: the log cleaner would "
           "remove records from the local log only, and the table keeps every version")

# (case id, topic settings, the message).
REFUSED = [
    ("bad-value", {"floe.iceberg.storage": "x"}, 'floe.iceberg.storage: "x" is not copy or shared'),
    ("not-tiered", {"floe.iceberg.storage": "shared"}, "floe.iceberg.storage: shared needs floe.iceberg.enabled=true"),
    ("tiering-off", {**SHARED, "floe.iceberg.enabled": "false"},
     "floe.iceberg.storage: shared needs floe.iceberg.enabled=true"),
    ("compact", {**SHARED, "cleanup.policy": "compact"}, COMPACT),
    ("compact-delete", {**SHARED, "cleanup.policy": "compact,delete"}, COMPACT),
    ("day-spec", {**SHARED, "floe.iceberg.partition-spec": "day(timestamp)"}, spec_message("day(timestamp)")),
    ("key-term", {**SHARED, "floe.iceberg.partition-spec": "identity(partition),bucket[16](key)"},
     spec_message("identity(partition),bucket[16](key)")),
    ("no-guard", {**SHARED, "floe.iceberg.retention-guard": "false"},
     "floe.iceberg.storage: shared needs floe.iceberg.retention-guard=true: a local segment may go only once "
     "the table holds it"),
    ("typed-value", {**SHARED, "floe.iceberg.value.format": "schema-registry"},
     keep_raw_message("floe.iceberg.value.format", "schema-registry")),
    ("typed-key", {**SHARED, "floe.iceberg.key.format": "json", "floe.iceberg.keep-raw": "false"},
     keep_raw_message("floe.iceberg.key.format", "json")),
]

# Shared topics that need nothing more: the broker's defaults give the
# rest, and a shared topic without a spec of its own gets identity(partition),day(timestamp).
ACCEPTED = [
    ("defaults", SHARED),
    ("own-spec", {**SHARED, "floe.iceberg.partition-spec": "hour(timestamp),identity(partition)",
                  "cleanup.policy": "delete", "floe.iceberg.retention-guard": "true"}),
    ("typed-keep-raw", {**SHARED, "floe.iceberg.value.format": "json", "floe.iceberg.key.format": "json",
                        "floe.iceberg.keep-raw": "true"}),
]

IDS = [case[0] for case in REFUSED]


@pytest.fixture
def broker(floe_factory):
    return floe_factory("shared")


# ------------------------------------------------------------------ confluent-kafka (librdkafka)

def confluent_create_error(bootstrap: str, topic: str, config: dict, validate_only: bool = False):
    """The KafkaError CreateTopics answers for `topic` with `config`, or None if created."""
    a = admin(bootstrap)  # referenced until the future resolves
    fs = a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=config)],
                         request_timeout=CLIENT_TIMEOUT_S, validate_only=validate_only)
    try:
        fs[topic].result(timeout=CLIENT_TIMEOUT_S)
        return None
    except KafkaException as e:
        return e.args[0]


def confluent_alter_error(bootstrap: str, topic: str, config: dict, incremental: bool):
    """The KafkaError (Incremental)AlterConfigs answers for `topic`, or None if altered."""
    a = admin(bootstrap)
    if incremental:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()]
        fs = a.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=entries)],
                                         request_timeout=CLIENT_TIMEOUT_S)
    else:
        fs = a.alter_configs([ConfigResource("topic", topic, set_config=config)], request_timeout=CLIENT_TIMEOUT_S)
    (future,) = fs.values()
    try:
        future.result(timeout=CLIENT_TIMEOUT_S)
        return None
    except KafkaException as e:
        return e.args[0]


def confluent_topic_config(bootstrap: str, topic: str) -> dict:
    a = admin(bootstrap)
    (future,) = a.describe_configs([ConfigResource("topic", topic)], request_timeout=CLIENT_TIMEOUT_S).values()
    return {name: entry.value for name, entry in future.result(timeout=CLIENT_TIMEOUT_S).items()}


def assert_invalid_config(error, message: str):
    assert error is not None, f"accepted; expected INVALID_CONFIG {message!r}"
    assert error.name() == "INVALID_CONFIG", error
    assert error.str() == message, error.str()


@pytest.mark.parametrize("case", REFUSED, ids=IDS)
def test_confluent_create_topics_refused(broker, case):
    _, config, message = case
    topic = unique_topic("shared")
    assert_invalid_config(confluent_create_error(broker.bootstrap, topic, config, validate_only=True), message)
    assert_invalid_config(confluent_create_error(broker.bootstrap, topic, config), message)
    md = admin(broker.bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S)
    assert topic not in md.topics, "a refused topic is not created"


@pytest.mark.parametrize("incremental", [False, True], ids=["alter", "incremental"])
def test_confluent_alter_configs_refused(broker, incremental):
    topic = create_topic(broker.bootstrap, unique_topic("shared"), config={"retention.ms": "3600000"})
    for _, config, message in REFUSED:
        # AlterConfigs replaces every override: keep retention.ms to see nothing changed.
        config = config if incremental else {**config, "retention.ms": "3600000"}
        assert_invalid_config(confluent_alter_error(broker.bootstrap, topic, config, incremental), message)
    after = confluent_topic_config(broker.bootstrap, topic)
    assert after["retention.ms"] == "3600000", after
    assert "floe.iceberg.storage" not in after and after.get("floe.iceberg.enabled") != "true", after


@pytest.mark.parametrize("case", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_confluent_shared_topic_accepted(broker, case):
    _, config = case
    topic = unique_topic("shared")
    assert confluent_create_error(broker.bootstrap, topic, config) is None
    described = confluent_topic_config(broker.bootstrap, topic)
    assert described["floe.iceberg.storage"] == "shared", described
    # The mode is fixed at creation: a copy topic does not become shared, nor a shared one copy.
    other = create_topic(broker.bootstrap, unique_topic("copy"))
    for incremental in (False, True):
        assert_invalid_config(confluent_alter_error(broker.bootstrap, other, config, incremental),
                              change_message("copy", "shared"))
        assert_invalid_config(confluent_alter_error(broker.bootstrap, topic, {**config, "floe.iceberg.storage": "copy"},
                                                    incremental), change_message("shared", "copy"))
    assert confluent_topic_config(broker.bootstrap, other).get("floe.iceberg.storage", "copy") == "copy"
    # Other settings of a shared topic change as usual.
    assert confluent_alter_error(broker.bootstrap, topic, {"retention.ms": "7200000"}, incremental=True) is None
    assert confluent_topic_config(broker.bootstrap, topic)["floe.iceberg.storage"] == "shared"


# ------------------------------------------------------------------ kafka-python

def kafka_python_admin(bootstrap: str):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)


def kafka_python_create(a, topic: str, config: dict, validate_only: bool = False) -> tuple[int, str | None]:
    """CreateTopics' (error code, message) for `topic`."""
    from kafka.admin import NewTopic as KNewTopic

    result = a.create_topics([KNewTopic(topic, num_partitions=1, replication_factor=1, topic_configs=config)],
                             validate_only=validate_only, raise_errors=False)
    (entry,) = result["topics"]
    # A success has no message: null on the wire, which kafka-python may give as "".
    return entry["error_code"], entry["error_message"] or None


def kafka_python_alter(a, topic: str, config: dict, incremental: bool) -> str:
    """(Incremental)AlterConfigs' answer for `topic`: "OK" or the error's text."""
    from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType

    # raise_on_unknown=False: floe.* keys are not among Kafka's dynamic topic configs to the client.
    result = a.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic, configs=dict(config))],
                             raise_on_unknown=False, incremental=incremental)
    return result["topic"][topic]


ERR_INVALID_CONFIG = 40

# confluent-kafka's replacing alter_configs is deprecated, and tested here on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")


@pytest.mark.parametrize("case", REFUSED, ids=IDS)
def test_kafka_python_create_topics_refused(broker, case):
    _, config, message = case
    a = kafka_python_admin(broker.bootstrap)
    try:
        topic = unique_topic("shared")
        assert kafka_python_create(a, topic, config, validate_only=True) == (ERR_INVALID_CONFIG, message)
        assert kafka_python_create(a, topic, config) == (ERR_INVALID_CONFIG, message)
        assert topic not in a.list_topics()
    finally:
        a.close()


@pytest.mark.parametrize("incremental", [False, True], ids=["alter", "incremental"])
def test_kafka_python_alter_configs_refused(broker, incremental):
    a = kafka_python_admin(broker.bootstrap)
    try:
        topic = unique_topic("shared")
        assert kafka_python_create(a, topic, {"retention.ms": "3600000"}) == (0, None)
        for _, config, message in REFUSED:
            answer = kafka_python_alter(a, topic, config, incremental)
            assert "InvalidConfig" in answer and answer.endswith(message), answer
        assert kafka_python_alter(a, topic, {"retention.ms": "7200000"}, incremental) == "OK"
    finally:
        a.close()
    assert "floe.iceberg.storage" not in confluent_topic_config(broker.bootstrap, topic)


def test_kafka_python_shared_topic_accepted(broker):
    a = kafka_python_admin(broker.bootstrap)
    try:
        for _, config in ACCEPTED:
            assert kafka_python_create(a, unique_topic("shared"), config) == (0, None)
        for incremental in (False, True):
            other = unique_topic("copy")
            assert kafka_python_create(a, other, {}) == (0, None)
            answer = kafka_python_alter(a, other, SHARED, incremental)
            assert "InvalidConfig" in answer and answer.endswith(change_message("copy", "shared")), answer
            assert confluent_topic_config(broker.bootstrap, other).get("floe.iceberg.storage", "copy") == "copy"
    finally:
        a.close()


# ------------------------------------------------------------------ broker defaults count

def test_broker_defaults_are_the_topics(floe_factory):
    """The checks see what a topic gets, not only what it sets: the broker's static
    floe.iceberg.enabled=true suffices, and a dynamic broker config
    log.cleanup.policy=compact refuses a shared topic that sets no policy."""
    broker = floe_factory("defaults", overrides={"floe.iceberg.enabled": "true"})
    assert confluent_create_error(broker.bootstrap, unique_topic("shared"), {"floe.iceberg.storage": "shared"}) is None
    a = admin(broker.bootstrap)
    entry = ConfigEntry("log.cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
    (future,) = a.incremental_alter_configs([ConfigResource("broker", "1", incremental_configs=[entry])],
                                            request_timeout=CLIENT_TIMEOUT_S).values()
    future.result(timeout=CLIENT_TIMEOUT_S)
    assert_invalid_config(confluent_create_error(broker.bootstrap, unique_topic("shared"), {"floe.iceberg.storage": "shared"}),
                          COMPACT)
    # The topic's own policy wins over the broker's.
    assert confluent_create_error(broker.bootstrap, unique_topic("shared"),
                                  {"floe.iceberg.storage": "shared", "cleanup.policy": "delete"}) is None


# ------------------------------------------------------------------ in a cluster (etcd)

def test_in_a_cluster(floe_factory, etcd):
    """Topics and their configs are cluster state there (CreateTopics and AlterConfigs
    decide against etcd): the same checks, the same messages."""
    (broker,), _ = start_cluster(floe_factory, etcd, 1)
    agreed_view([broker], live=1)  # a controller elected: CreateTopics goes to it
    topic = unique_topic("shared")
    for _, config, message in REFUSED:
        assert_invalid_config(confluent_create_error(broker.bootstrap, topic, config), message)
    assert confluent_create_error(broker.bootstrap, topic, {"retention.ms": "3600000"}) is None
    for incremental in (False, True):
        for _, config, message in REFUSED:
            assert_invalid_config(confluent_alter_error(broker.bootstrap, topic, config, incremental), message)
        assert_invalid_config(confluent_alter_error(broker.bootstrap, topic, SHARED, incremental), change_message("copy", "shared"))
    assert "floe.iceberg.storage" not in confluent_topic_config(broker.bootstrap, topic)
    shared = unique_topic("shared")
    assert confluent_create_error(broker.bootstrap, shared, SHARED) is None
    assert confluent_topic_config(broker.bootstrap, shared)["floe.iceberg.storage"] == "shared"
    assert_invalid_config(confluent_alter_error(broker.bootstrap, shared, {**SHARED, "floe.iceberg.storage": "copy"}, True),
                          change_message("shared", "copy"))
