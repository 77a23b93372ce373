"""The Schema Registry in a cluster: `_schemas` is replicated like any topic, every
broker's registry serves reads from its own replica, and writes are made by the
registry of the broker leading `_schemas`-0; the others forward them there.

On three real brokers and one etcd:
- `_schemas` is created through the controller with offsets.topic.replication.factor
  replicas once the brokers are up;
- a registration through the leader and through each follower (forwarded) gets
  distinct ids, and the broker it went through reads it back at once
  (read-your-writes after forwarding); every broker lists every subject;
- kill -9 of the leader: a new leader takes over, registrations go on with ids above
  every earlier one (never handed out twice), the survivors agree; the killed broker
  comes back and catches up from its replica.
"""

from __future__ import annotations

import json

from cluster_rig import etcd, node_id, start_cluster  # noqa: F401 (fixture)
from floe_process import wait_until
from test_cluster_replication import _by_id, _state
from test_schema_registry import http


def _register(b, subject: str, schema: str):
    """The id of `schema` registered under `subject` through broker `b`, retried
    while `_schemas`' leadership is being decided (50004) or moving."""
    def attempt():
        status, body = http(b.schema_registry_url + f"/subjects/{subject}/versions", "POST", {"schema": schema}, timeout=30)
        if status == 200:
            return body["id"]
        assert status >= 500, (status, body)
        print(f"register {subject} through {b.name}: {status} {body}; retrying")
        return None
    return wait_until(attempt, timeout=60, interval=0.5, what=f"{subject} registered through {b.name}")


def test_one_writer_forwarded_writes_and_failover(floe_factory, etcd):  # noqa: F811
    brokers, prefix = start_cluster(floe_factory, etcd, 3, schema_registry=True,
                                    overrides={"offsets.topic.replication.factor": "3"})
    state = wait_until(lambda: (s := _state(etcd, prefix, "_schemas", 0)) and s["leader"] > 0 and len(s["isr"]) == 3 and s,
                       timeout=60, what="_schemas created with three in-sync replicas")
    leader = _by_id(brokers, state["leader"])
    followers = [b for b in brokers if b is not leader]

    ids = {}
    for i, b in enumerate([leader, *followers]):
        subject = f"s{i}-value"
        ids[subject] = _register(b, subject, json.dumps({"type": "enum", "name": f"E{i}", "symbols": ["A", "B"]}))
        # Read back at once through the broker it went through (forwarded for followers).
        status, latest = http(b.schema_registry_url + f"/subjects/{subject}/versions/latest")
        assert status == 200 and latest["id"] == ids[subject], (b.name, latest)
    assert len(set(ids.values())) == 3
    for b in brokers:
        wait_until(lambda b=b: http(b.schema_registry_url + "/subjects") == (200, sorted(ids)), timeout=30,
                   what=f"{b.name} lists every subject")

    leader.kill9()
    survivors = followers
    wait_until(lambda: (s := _state(etcd, prefix, "_schemas", 0)) and s["leader"] not in (-1, node_id(leader)),
               timeout=60, what="a new leader of _schemas-0")
    fresh = _register(survivors[0], "after-value", '"string"')
    assert fresh > max(ids.values()), "ids are never handed out twice across a failover"
    ids["after-value"] = fresh
    again = _register(survivors[1], "after-value", '"string"')
    assert again == fresh, "the same schema again is the same id, wherever it is registered"
    for b in survivors:
        wait_until(lambda b=b: http(b.schema_registry_url + "/subjects") == (200, sorted(ids)), timeout=30,
                   what=f"{b.name} lists every subject after the failover")
        for subject, schema_id in ids.items():
            assert http(b.schema_registry_url + f"/schemas/ids/{schema_id}")[0] == 200

    leader.start()
    wait_until(lambda: http(leader.schema_registry_url + "/subjects") == (200, sorted(ids)), timeout=60,
               what="the restarted broker caught up")
