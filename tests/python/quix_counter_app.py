"""A stateful exactly-once application on Quix Streams (a third-party stream
processor from PyPI), run as a subprocess by test_stream_framework.py:

    <python with quixstreams> quix_counter_app.py BOOTSTRAP INPUT OUTPUT GROUP STATE_DIR

It counts the input records per key in a RocksDB state store (backed by a
changelog topic that Quix Streams creates with cleanup.policy=compact) and writes
{"in": <input value>, "n": <the key's count so far>} to OUTPUT, with
processing_guarantee="exactly-once" (a transactional producer; offsets, output
and changelog writes commit together). With its STATE_DIR wiped, a restarted
instance must restore the counts from the changelog topic.
"""

import sys

from quixstreams import Application


def main():
    bootstrap, source, sink, group, state_dir = sys.argv[1:6]
    app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                      processing_guarantee="exactly-once", state_dir=state_dir, commit_interval=0.5,
                      consumer_extra_config={"fetch.wait.max.ms": 100})
    inputs = app.topic(source, key_deserializer="str", value_deserializer="str")
    outputs = app.topic(sink, key_serializer="str", value_serializer="json")

    def count(value, state):
        n = state.get("n", 0) + 1
        state.set("n", n)
        return {"in": value, "n": n}

    app.dataframe(inputs).apply(count, stateful=True).to_topic(outputs)
    app.run()


if __name__ == "__main__":
    main()
