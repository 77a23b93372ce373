"""A kafka-python application for the cluster failover test (test_cluster_clients.py).

    python failover_app_kafka_python.py BOOTSTRAP TOPIC GROUP

An idempotent acks=all producer sends unique values one at a time while a group
consumer (its own thread) reads the topic. Every event is one JSON line on stdout, the
same lines as tests/js/failover_app.mjs prints:
  {"ev":"send","v":...}  {"ev":"ack","p":..,"o":..,"v":...}  {"ev":"read","r":reader,"p":..,"o":..,"v":...}
  {"ev":"error","where":"produce"|"consume","name":..,"message":..,"retriable":bool}
  {"ev":"stopped"}  {"ev":"done","acked":n,"read":n}
What kafka-python cannot hide from the application shows up as an "error" line. On
"stop" (stdin) the producer ends, the consumer reads on until it has seen every
acknowledged value (at most 60 s), and the app exits.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

_out = threading.Lock()


def emit(**event):
    with _out:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def error(where: str, e: BaseException):
    emit(ev="error", where=where, name=type(e).__name__, message=str(e),
         retriable=bool(isinstance(e, KafkaError) and e.retriable))


class Sessions(ConsumerRebalanceListener):
    """A reader session is the consumer between two assignments: within one, offsets
    only go forward."""

    def __init__(self):
        self.n = 0

    def on_partitions_revoked(self, revoked):
        pass

    def on_partitions_assigned(self, assigned):
        self.n += 1


def main():
    bootstrap, topic, group = sys.argv[1:4]
    servers = bootstrap.split(",")
    stopping = threading.Event()
    producer_done = threading.Event()
    acked: set[str] = set()
    read: set[str] = set()

    def consume():
        sessions = Sessions()
        c = KafkaConsumer(bootstrap_servers=servers, group_id=group, auto_offset_reset="earliest",
                          enable_auto_commit=True, auto_commit_interval_ms=500,
                          session_timeout_ms=10000, heartbeat_interval_ms=1000)
        c.subscribe([topic], listener=sessions)
        deadline = None
        while True:
            if producer_done.is_set():
                deadline = deadline or time.monotonic() + 60
                if acked <= read or time.monotonic() > deadline:
                    break
            try:
                batches = c.poll(timeout_ms=200)
            except KafkaError as e:
                error("consume", e)
                time.sleep(0.2)
                continue
            for tp, records in batches.items():
                for r in records:
                    v = r.value.decode()
                    read.add(v)
                    emit(ev="read", r=f"kafka-python/{sessions.n}", p=tp.partition, o=r.offset, v=v)
        c.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    threading.Thread(target=lambda: [stopping.set() for line in sys.stdin if line.strip() == "stop"],
                     daemon=True).start()

    # Retries for as long as a leader's lease (the cluster tests use 2 s) and an election may take.
    p = KafkaProducer(bootstrap_servers=servers, acks="all", enable_idempotence=True,
                      retries=2**31 - 1, retry_backoff_ms=200, request_timeout_ms=10000,
                      delivery_timeout_ms=60000)
    i = 0
    while not stopping.is_set():
        v = f"kafka-python-{i}"
        i += 1
        emit(ev="send", v=v)
        try:
            md = p.send(topic, key=v.encode(), value=v.encode()).get(timeout=70)
            acked.add(v)
            emit(ev="ack", p=md.partition, o=md.offset, v=v)
        except Exception as e:  # noqa: BLE001 (whatever reaches the application is the finding)
            error("produce", e)
        time.sleep(0.005)
    p.close()
    emit(ev="stopped")
    producer_done.set()
    reader.join()
    emit(ev="done", acked=len(acked), read=len(read))


if __name__ == "__main__":
    main()
