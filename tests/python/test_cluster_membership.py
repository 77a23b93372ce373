"""Cluster membership in etcd: brokers register under leases and elect a controller.

Every process is real and started here: one etcd (Debian's etcd-server) and Floe
brokers started with `--node-id N --metadata-store etcd://...`. What a broker knows of
its cluster is read from its /metrics (`floe_cluster_live_brokers`,
`floe_active_controller_count`, `floe_cluster_controller_id`) and from DescribeCluster,
sent over a raw socket (kwire).

This file checks the membership: registration, the lease, the election, fencing of
duplicate node ids, and riding out an etcd outage. Topics and partition leadership
as cluster state are in test_cluster_partitions.py.
"""

from __future__ import annotations

import kwire
from clients import create_topic, produce_all, consume_range, unique_topic
from cluster_rig import SESSION_TIMEOUT_MS, agreed_view as _agreed_view, etcd, start_cluster as _start_cluster, view as _view  # noqa: F401 (fixture)
from floe_process import FloeStartError, wait_until


def _describe_cluster(bootstrap: str) -> tuple[set[tuple[int, int]], int, str]:
    """DescribeCluster v0 over a raw socket: ({(node id, port)}, controller id, cluster id)."""
    host, port = bootstrap.rsplit(":", 1)
    with kwire.KafkaConn(host, int(port)) as conn:
        body = conn.call_flexible(kwire.API_DESCRIBE_CLUSTER, 0, kwire.describe_cluster_v0())
    error, cluster_id, controller, brokers = kwire.parse_describe_cluster_v0(body)
    assert error == 0, f"DescribeCluster error {error}"
    return {(node, port) for node, _host, port, _rack in brokers}, controller, cluster_id


def _wait_refused(b) -> None:
    """Starts `b`, which must refuse to join: its port is bound before it talks to etcd,
    so it may accept TCP for a moment; waits for it to exit with an error."""
    try:
        b.start()
    except FloeStartError:
        pass
    if b.proc.poll() is None:
        b.proc.wait(timeout=30)
    assert b.kill9() not in (0, None)


def test_three_brokers_register_and_agree_on_one_controller(floe_factory, etcd):
    brokers, _ = _start_cluster(floe_factory, etcd, 3)
    controller = _agreed_view(brokers, live=3)
    expected = {(i + 1, b.port) for i, b in enumerate(brokers)}
    cluster_ids = set()
    for b in brokers:
        listed, cid, cluster_id = _describe_cluster(b.bootstrap)
        assert listed == expected, f"{b.name} lists {listed}"
        assert cid == controller
        cluster_ids.add(cluster_id)
    assert len(cluster_ids) == 1, f"one cluster, one id: {cluster_ids}"
    (cluster_id,) = cluster_ids
    for b in brokers:
        assert f"cluster.id={cluster_id}" in (b.data_dir / "meta.properties").read_text()


def test_a_data_directory_of_another_cluster_is_refused(floe_factory, etcd):
    (a,), _ = _start_cluster(floe_factory, etcd, 1, prefix="cluster-a")
    (b,), _ = _start_cluster(floe_factory, etcd, 1, prefix="cluster-b")
    id_a, id_b = _describe_cluster(a.bootstrap)[2], _describe_cluster(b.bootstrap)[2]
    assert id_a != id_b
    assert a.stop() == 0
    # Broker a's data directory, started as a member of cluster b.
    a.command_extra = ["--node-id", "1", "--metadata-store", etcd.store_url("cluster-b")]
    _wait_refused(a)
    assert f"holds the data of cluster {id_a}, but the metadata store's cluster is {id_b}" in a.stderr_text()


def test_a_killed_controller_is_replaced_and_a_restarted_broker_rejoins(floe_factory, etcd):
    # Leases long enough that a killed broker restarts within its old one (a debug build
    # on a loaded machine can take more than the rig's 2 s to start).
    brokers, _ = _start_cluster(floe_factory, etcd, 3, overrides={"broker.session.timeout.ms": "8000"})
    first = _agreed_view(brokers, live=3)
    dead = brokers[first - 1]
    dead.kill9()
    survivors = [b for b in brokers if b is not dead]
    second = _agreed_view(survivors, live=2)  # once the lease expired
    assert second != first
    dead.start()
    assert _agreed_view(brokers, live=3) == second, "a returning broker must not take the controller role back"

    # Killed and restarted before its lease expires: it replaces its own stale
    # registration (revoking the old lease) instead of waiting it out.
    other = next(b for b in survivors if int(b.command_extra[1]) != second)
    other.kill9()
    other.start()
    assert "replacing the registration of an earlier incarnation" in other.stderr_text()
    assert _agreed_view(brokers, live=3) == second

    # A clean stop revokes the lease: the others see the broker leave at once.
    assert other.stop() == 0
    assert "left the cluster" in other.stderr_text()
    assert _agreed_view([b for b in brokers if b is not other], live=2) == second


def test_a_second_broker_with_a_live_node_id_is_refused(floe_factory, etcd):
    brokers, prefix = _start_cluster(floe_factory, etcd, 1)
    dup = floe_factory("floe-dup", start=False, overrides={"broker.session.timeout.ms": SESSION_TIMEOUT_MS})
    dup.command_extra = ["--node-id", "1", "--metadata-store", etcd.store_url(prefix)]
    _wait_refused(dup)  # after waiting one session timeout for the holder to go
    assert "node.id 1 is registered by another live broker" in dup.stderr_text(), dup.stderr_text()[-3000:]
    assert _view(brokers[0])[0] == 1 and brokers[0].running


def test_brokers_serve_through_an_etcd_outage_and_rejoin_after_it(floe_factory, etcd):
    brokers, _ = _start_cluster(floe_factory, etcd, 2)
    controller = _agreed_view(brokers, live=2)
    b = brokers[0]
    topic = unique_topic("etcd-down")
    create_topic(b.bootstrap, topic)
    produce_all(b.bootstrap, topic, [{"value": f"before-{i}".encode()} for i in range(50)])
    etcd.kill9()
    # Longer than the session timeout: the brokers' sessions end, serving does not.
    wait_until(lambda: "etcd session ended" in b.stderr_text(), timeout=30, interval=0.2, what="the session to end")
    produce_all(b.bootstrap, topic, [{"value": f"during-{i}".encode()} for i in range(50)])
    got = consume_range(b.bootstrap, topic, 0, 100)
    assert [m.value().decode() for m in got] == [f"before-{i}" for i in range(50)] + [f"during-{i}" for i in range(50)]
    assert _view(b)[0] == 2, "the last view is kept while etcd is away"
    etcd.start()
    # Each broker starts a new session: registered again (replacing the registration its
    # old lease still holds), and the cluster agrees on a controller again.
    for x in brokers:
        wait_until(lambda: x.stderr_text().count("registered in etcd") >= 2, timeout=30, interval=0.2,
                   what=f"{x.name} to register again")
    again = _agreed_view(brokers, live=2)
    assert {again, controller} <= {1, 2}
    # The view is live again: a broker that stops is seen to leave.
    assert brokers[1].stop() == 0
    assert _agreed_view([b], live=1) == 1
