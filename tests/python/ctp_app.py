"""A consume-transform-produce application with exactly-once semantics, run as a
subprocess by test_transactions_history.py (which kills it -9 at random moments).

    python ctp_app.py BOOTSTRAP INPUT OUTPUT GROUP TXN_ID INSTANCE LOG [MAX_BATCH [WORK_MS]]

It is what a Kafka user writes with confluent-kafka: a group consumer at
read_committed (static membership, so a restarted instance takes its
predecessor's partitions at once) and a transactional producer with a fixed
`transactional.id` (its init_transactions fences the killed instance and aborts
what it left open). Each transaction turns a batch of input records into output
records `<input value>|<transaction>` on the same partition and commits the
batch's next offsets with them (send_offsets_to_transaction). WORK_MS is the
time "transforming" one record takes, spent inside the transaction: it makes a
run last as long as its input needs, however fast the broker is, so the test's
kills land mid-run and often mid-transaction.

It appends what it does to LOG as JSON lines, written before the act (a line
for a send that never happened is harmless; an unlogged send would be a
phantom): {"ev": "begin"|"send"|"commit"|"committed"|"abort"|"aborted"|"ack"|"exit", ...}
with `time.monotonic()` moments. On an error it cannot retry it aborts if it can
and exits 3: a restart resumes from the committed offsets, as a crash would.
"""

from __future__ import annotations

import json
import random
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main() -> int:
    bootstrap, source, sink, group, txn_id, instance, log_path = sys.argv[1:8]
    max_batch = int(sys.argv[8]) if len(sys.argv) > 8 else 20
    work_s = int(sys.argv[9]) / 1000 if len(sys.argv) > 9 else 0.0
    log = open(log_path, "a", buffering=1)  # line-buffered: a killed app keeps every line it wrote

    def note(ev: str, **kw):
        log.write(json.dumps({"ev": ev, "at": time.monotonic(), **kw}) + "\n")

    def on_delivery(err, msg):
        if err is None:
            note("ack", p=msg.partition(), o=msg.offset(), v=msg.value().decode())

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                  "transaction.timeout.ms": 30000, "message.timeout.ms": 25000,
                  "reconnect.backoff.max.ms": 500})
    p.init_transactions(60)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": f"{group}-member",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 10000, "fetch.wait.max.ms": 100,
                  "reconnect.backoff.max.ms": 500})
    c.subscribe([source])
    rng = random.Random()
    seq = 0
    txn = None
    try:
        while True:
            msgs = [m for m in c.consume(num_messages=rng.randint(1, max_batch), timeout=0.5) if not m.error()]
            if not msgs:
                continue
            seq += 1
            txn = f"{instance}.{seq}"
            note("begin", txn=txn)
            p.begin_transaction()
            offsets: dict[int, int] = {}
            for m in msgs:
                time.sleep(work_s)
                out = f"{m.value().decode()}|{txn}"
                note("send", txn=txn, p=m.partition(), v=out)
                p.produce(sink, value=out.encode(), key=m.key(), partition=m.partition(), on_delivery=on_delivery)
                offsets[m.partition()] = m.offset() + 1
            p.send_offsets_to_transaction([TopicPartition(source, part, off) for part, off in offsets.items()],
                                          c.consumer_group_metadata(), 30)
            note("commit", txn=txn)
            deadline = time.monotonic() + 60
            while True:
                try:
                    p.commit_transaction(10)
                    break
                except KafkaException as e:
                    if not e.args[0].retriable() or time.monotonic() > deadline:
                        raise
            note("committed", txn=txn)
    except KafkaException as e:
        err = e.args[0]
        note("exit", error=str(err))
        if err.txn_requires_abort() and not err.fatal():
            try:
                note("abort", txn=txn)
                p.abort_transaction(30)
                note("aborted", txn=txn)
            except KafkaException as e2:
                note("exit", error=f"abort: {e2.args[0]}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
