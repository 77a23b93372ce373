"""One confluent-kafka group member, run as a subprocess by test_groups.py so it can be
killed with SIGKILL (no LeaveGroup). Prints JSON lines: assignments and consumed records.

usage: group_member.py BOOTSTRAP TOPIC GROUP STRATEGY [GROUP_INSTANCE_ID]
"""

import json
import sys

from confluent_kafka import Consumer, KafkaException, TopicPartition


def say(**event):
    print(json.dumps(event), flush=True)


def main():
    bootstrap, topic, group, strategy = sys.argv[1:5]
    static = {"group.instance.id": sys.argv[5]} if len(sys.argv) > 5 else {}
    c = Consumer({
        **static,
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "partition.assignment.strategy": strategy,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
    })
    c.subscribe([topic],
                on_assign=lambda _c, ps: say(event="assign", partitions=[p.partition for p in ps]),
                on_revoke=lambda _c, ps: say(event="revoke", partitions=[p.partition for p in ps]))
    while True:
        msgs = c.consume(num_messages=50, timeout=0.2)
        last = {}
        for m in msgs:
            if m.error():
                continue
            say(event="record", p=m.partition(), o=m.offset())
            last[m.partition()] = m.offset()
        if last:
            try:
                c.commit(offsets=[TopicPartition(topic, p, o + 1) for p, o in last.items()], asynchronous=False)
            except KafkaException as e:  # a rebalance in between: the next owner re-reads
                say(event="commit_failed", error=str(e))


if __name__ == "__main__":
    main()
