"""The history checker itself: synthetic histories with each violation, so it is
proven able to fail (no broker needed)."""

from __future__ import annotations

from history import History, check


def clean_history() -> History:
    """Two producers, two partitions, one consumer session, a commit and a full drain."""
    h = History()
    for i, (producer, part) in enumerate([("p0", 0), ("p1", 1), ("p0", 0), ("p1", 1)]):
        h.record_send(producer, part, f"v{i}".encode())
    h.record_ack("p0", 0, 0, b"v0")
    h.record_ack("p1", 1, 0, b"v1")
    h.record_ack("p0", 0, 1, b"v2")
    h.record_ack("p1", 1, 1, b"v3")
    h.reads += [("c0/1", 0, 0, b"v0"), ("c0/1", 0, 1, b"v2"), ("c0/1", 1, 0, b"v1")]
    h.commits.append(("g", 0, 2))
    h.drain += [(0, 0, b"v0"), (0, 1, b"v2"), (1, 0, b"v1"), (1, 1, b"v3")]
    h.drain_bounds = {0: (0, 2), 1: (0, 2)}
    return h


def only(verdict, kind):
    found = {k for k in verdict.VIOLATIONS if getattr(verdict, k)}
    assert found == {kind}, f"expected only {kind}, got {found}\n{verdict.summary()}"


def test_clean_history_is_valid():
    v = check(clean_history())
    assert v.ok, v.summary()
    assert v.counts["acked"] == 4 and v.counts["drained"] == 4


def test_lost_acknowledged_record():
    h = clean_history()
    h.drain = [d for d in h.drain if d[2] != b"v3"]
    h.drain_bounds[1] = (0, 1)
    v = check(h)
    only(v, "lost")
    assert v.lost == [(1, 1, b"v3")]


def test_duplicate_value_at_two_offsets():
    h = clean_history()
    h.drain.append((0, 2, b"v0"))
    h.drain_bounds[0] = (0, 3)
    v = check(h)
    only(v, "duplicate")
    assert v.duplicate == [(b"v0", [(0, 0), (0, 2)])]


def test_inconsistent_offset_two_values():
    h = clean_history()
    # A consumer saw v2 at offset 1 during the run; the drain finds something else there.
    h.record_send("p2", 0, b"other")
    h.drain[1] = (0, 1, b"other")
    v = check(h)
    assert v.inconsistent and v.inconsistent[0] == ((0, 1), [b"other", b"v2"]), v.summary()
    assert v.lost == [(0, 1, b"v2")]


def test_nonmonotonic_producer_acks():
    h = clean_history()
    h.record_send("p0", 0, b"v4")
    h.record_ack("p0", 0, 0, b"v4")  # acknowledged below an earlier ack
    h.drain.append((0, 2, b"v4"))
    h.drain_bounds[0] = (0, 3)
    v = check(h)
    assert ("producer", "p0", 0, 1, 0) in v.nonmonotonic, v.summary()


def test_nonmonotonic_consumer_reads_within_a_session():
    h = clean_history()
    h.reads.append(("c0/1", 0, 0, b"v0"))  # same session goes back to offset 0
    v = check(h)
    only(v, "nonmonotonic")
    # ...but a new session (after a rebalance) may re-read from the committed offset.
    h.reads[-1] = ("c0/2", 0, 0, b"v0")
    assert check(h).ok


def test_drain_out_of_order_is_nonmonotonic_and_a_gap_is_reported():
    h = clean_history()
    h.drain[0], h.drain[1] = h.drain[1], h.drain[0]
    v = check(h)
    assert any(n[0] == "drain" for n in v.nonmonotonic), v.summary()
    h = clean_history()
    h.drain = [d for d in h.drain if (d[0], d[1]) != (0, 0)]
    v = check(h)
    assert v.gaps == [(0, 0, 0)], v.summary()
    assert v.lost == [(0, 0, b"v0")]


def test_phantom_record_never_sent():
    h = clean_history()
    h.drain.append((1, 2, b"garbage"))
    h.drain_bounds[1] = (0, 3)
    v = check(h)
    only(v, "phantom")


def test_commit_covering_unread_records():
    h = clean_history()
    h.commits.append(("g", 1, 2))  # partition 1 offset 1 was never read by the group
    v = check(h)
    only(v, "committed_unread")
    assert v.committed_unread == [("g", 1, 1, b"v3")]


def test_unacknowledged_reads_are_information_not_violations():
    h = clean_history()
    h.record_send("p0", 0, b"v4")
    h.failures.append(("p0", b"v4", "timed out"))
    h.drain.append((0, 2, b"v4"))
    h.drain_bounds[0] = (0, 3)
    h.record_send("p0", 0, b"v5")  # never acknowledged, never written
    v = check(h)
    assert v.ok, v.summary()
    assert v.unacked_read == [b"v4"] and v.unacked_missing == [b"v5"]
