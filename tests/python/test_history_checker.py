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


# ------------------------------------------------------------ transactions

RC, RU = "read_committed", "read_uncommitted"


def txn_history() -> History:
    """One transactional producer t0 with three transactions and a plain producer p0 on two
    partitions; a read_committed group consumer c0 (group g), a read_uncommitted reader u0,
    and both final drains. Times are seconds.

    partition 0: 0 a1 | 1 a3 | 2 commit(t0.1) | 3 b1 | 4 abort(t0.2) | 5 x1 | 6 c1 | 7 commit(t0.3) | 8 x2
    partition 1: 0 a2 | 1 commit(t0.1) | 2 b2 | 3 abort(t0.2) | 4 c2 | 5 commit(t0.3)
    t0.1 committed (commit asked at 2), t0.2 aborted (abort asked at 4), t0.3 commit asked at 6
    and raised (unknown outcome), yet all of it is visible: it committed.
    """
    h = History()
    h.isolation.update({"c0": RC, "g": RC, "u0": RU})

    def txn(name, begun, asked, outcome, sends, abort=False):
        t = h.begin_txn(name, "t0", at=begun)
        for part, off, val in sends:
            h.record_txn_send(name, part, val)
            h.record_ack("t0", part, off, val)
        t.commit_requested_at = None if abort else asked
        t.open_until = asked
        t.outcome = outcome

    txn("t0.1", 1.0, 2.0, "committed", [(0, 0, b"a1"), (1, 0, b"a2"), (0, 1, b"a3")])
    txn("t0.2", 3.0, 4.0, "aborted", [(0, 3, b"b1"), (1, 2, b"b2")], abort=True)
    h.record_send("p0", 0, b"x1")
    h.record_ack("p0", 0, 5, b"x1")
    txn("t0.3", 5.0, 6.0, "unknown", [(0, 6, b"c1"), (1, 4, b"c2")])
    h.record_send("p0", 0, b"x2")
    h.record_ack("p0", 0, 8, b"x2")

    for part, off, val, t in [(0, 0, b"a1", 2.5), (0, 1, b"a3", 2.5), (1, 0, b"a2", 2.5), (0, 5, b"x1", 4.5),
                              (0, 6, b"c1", 7.0), (1, 4, b"c2", 7.0), (0, 8, b"x2", 7.0)]:
        h.record_read("c0/1", part, off, val, at=t)
    h.commits.append(("g", 0, 9))
    # A read_uncommitted reader sees the aborted and the open records: allowed.
    h.record_read("u0/1", 0, 3, b"b1", at=3.5)
    h.record_read("u0/1", 0, 5, b"x1", at=3.6)
    h.drain += [(0, 0, b"a1"), (0, 1, b"a3"), (0, 3, b"b1"), (0, 5, b"x1"), (0, 6, b"c1"), (0, 8, b"x2"),
                (1, 0, b"a2"), (1, 2, b"b2"), (1, 4, b"c2")]
    h.drain_bounds = {0: (0, 9), 1: (0, 6)}
    h.committed_drain += [(0, 0, b"a1"), (0, 1, b"a3"), (0, 5, b"x1"), (0, 6, b"c1"), (0, 8, b"x2"),
                          (1, 0, b"a2"), (1, 4, b"c2")]
    h.committed_drain_bounds = {0: (0, 9), 1: (0, 6)}
    return h


def test_transactional_history_is_valid():
    h = txn_history()
    v = check(h)
    assert v.ok, v.summary()
    assert (v.counts["txn_committed"], v.counts["txn_aborted"], v.counts["txn_unknown"]) == (1, 1, 1)
    assert v.counts["txn_unknown_committed"] == 1
    # The markers are offsets no client sees: gaps, as information.
    assert v.gaps == [(0, 2, 2), (0, 4, 4), (0, 7, 7), (1, 1, 1), (1, 3, 3), (1, 5, 5)]
    # The group's commit covers b1, which a read_committed group never reads: fine for it,
    # not for a read_uncommitted group (the reads of the other reader, u0, aside).
    h.isolation["g"] = RU
    h.reads = [r for r in h.reads if r[0] != "u0/1"]
    only(check(h), "committed_unread")


def test_aborted_read_g1a():
    h = txn_history()
    h.reads.insert(2, ("c0/1", 0, 3, b"b1"))  # between a3 (1) and x1 (5)
    v = check(h)
    only(v, "aborted_read")
    assert v.aborted_read == [("c0/1", 0, 3, b"b1", "t0.2", "aborted")]
    # The committed drain is a read_committed reader too.
    h = txn_history()
    h.committed_drain.insert(2, (0, 3, b"b1"))
    only(check(h), "aborted_read")


def test_aborted_read_of_an_unknown_transaction_that_did_not_commit():
    h = txn_history()
    # t0.3's outcome stays unknown, but the final read_committed drain holds none of it: it
    # aborted, so the group consumer's reads of c1 and c2 were aborted reads.
    h.committed_drain = [d for d in h.committed_drain if d[2] not in (b"c1", b"c2")]
    v = check(h)
    only(v, "aborted_read")
    assert sorted(r[3] for r in v.aborted_read) == [b"c1", b"c2"]
    assert v.counts["txn_unknown_aborted"] == 1
    # A transaction whose producer never asked to commit cannot have committed.
    h = txn_history()
    h.txns["t0.3"].commit_requested_at = None
    v = check(h)
    only(v, "aborted_read")


def test_intermediate_read_g1b_before_the_commit_was_asked():
    h = txn_history()
    h.read_at[("c0/1", 0, 6)] = 5.5  # c1 read while t0.3 was open (commit asked at 6.0)
    v = check(h)
    only(v, "intermediate_read")
    assert v.intermediate_read == [("read before its commit was asked", "c0/1", 0, 6, b"c1", "t0.3")]


def test_intermediate_read_g1b_some_but_not_all_of_a_transaction():
    h = txn_history()
    # Another read_committed session reads a1, then x1: it skipped a3, t0.1's other record in p0.
    h.record_read("c1/1", 0, 0, b"a1", at=2.5)
    h.record_read("c1/1", 0, 5, b"x1", at=4.5)
    h.isolation["c1"] = RC
    v = check(h)
    only(v, "intermediate_read")
    assert v.intermediate_read == [("partial", "c1/1", 0, "t0.1", [1])]
    # Starting mid-transaction (after a commit at offset 1) is not partial: a3 onwards is whole.
    h.reads = [r for r in h.reads if r[0] != "c1/1"]
    h.record_read("c1/2", 0, 1, b"a3", at=2.5)
    h.record_read("c1/2", 0, 5, b"x1", at=4.5)
    assert check(h).ok


def test_read_committed_above_the_lso_while_a_transaction_was_open():
    h = txn_history()
    # x1 (offset 5) read at 3.5, while t0.2 (first record at offset 3) was open until 4.0.
    h.read_at[("c0/1", 0, 5)] = 3.5
    v = check(h)
    only(v, "lso_read")
    assert v.lso_read == [("read above an open transaction's first offset", "c0/1", 0, 5, b"x1", "t0.2", 3)]
    # The same read by a read_uncommitted consumer is fine.
    h.isolation["c0"] = RU
    assert check(h).ok


def test_read_committed_passing_a_transaction_that_then_committed():
    h = txn_history()
    # A read_committed session reads x1 (5) then x2 (8), none of t0.3's c1 (6): it passed an
    # open transaction that later committed.
    h.isolation["c1"] = RC
    h.record_read("c1/1", 0, 5, b"x1")
    h.record_read("c1/1", 0, 8, b"x2")
    v = check(h)
    only(v, "lso_read")
    assert v.lso_read == [("passed a transaction before its commit", "c1/1", 0, "t0.3", [6])]
    # Passing an aborted transaction is what read_committed does.
    h = txn_history()
    h.isolation["c1"] = RC
    h.record_read("c1/1", 0, 1, b"a3")
    h.record_read("c1/1", 0, 5, b"x1")
    assert check(h).ok


def test_non_atomic_unknown_transaction():
    h = txn_history()
    h.committed_drain = [d for d in h.committed_drain if d[2] != b"c2"]
    h.reads = [r for r in h.reads if r[3] != b"c2"]
    v = check(h)
    only(v, "non_atomic")
    assert v.non_atomic == [("t0.3", "1 of 2 values visible", [b"c2"])]
    # None of it visible and never read: an unknown transaction that aborted, valid.
    h.committed_drain = [d for d in h.committed_drain if d[2] != b"c1"]
    h.reads = [r for r in h.reads if r[3] != b"c1"]
    v = check(h)
    assert v.ok, v.summary()
    assert v.counts["txn_unknown_aborted"] == 1


def test_committed_transaction_missing_from_the_committed_drain_is_lost():
    h = txn_history()
    h.committed_drain = [d for d in h.committed_drain if d[2] != b"a2"]
    v = check(h)
    only(v, "lost")
    assert v.lost == [(1, 0, b"a2", "t0.1")]
    # An acknowledged plain record too (it is in the read_uncommitted drain only).
    h = txn_history()
    h.committed_drain = [d for d in h.committed_drain if d[2] != b"x2"]
    v = check(h)
    only(v, "lost")
    assert v.lost == [(0, 8, b"x2", "read_committed")]
