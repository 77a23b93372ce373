"""Bad transactional input on the wire: each refusal is checked for Kafka's exact error
code, for the log (and the transaction) being left as it was, and for a line in the
broker's log that says why.

Requests are built by `kwire` (written from the protocol spec), over raw sockets, so
versions and fields are exactly what each case needs: InitProducerId v1, AddPartitionsToTxn
v1/v2 (non-flexible) and v3 (flexible), EndTxn v1/v2, Produce v3 with a transactional id.

The expected codes are Apache Kafka's (core/src/main/scala/kafka/coordinator/transaction/
TransactionCoordinator.scala, core/src/main/scala/kafka/server/KafkaApis.scala,
AddPartitionsToTxnManager.scala, ReplicaManager.scala, storage/.../ProducerAppendInfo.java):

- AddPartitionsToTxn / EndTxn with the wrong epoch: the coordinator answers PRODUCER_FENCED;
  KafkaApis turns it into INVALID_PRODUCER_EPOCH for request versions < 2 (KIP-588).
- A producer id that does not own the transactional id (or an unknown transactional id):
  INVALID_PRODUCER_ID_MAPPING, at every version.
- EndTxn in state Empty (nothing added since InitProducerId): INVALID_TXN_STATE.
- Transactional produce (KIP-890 part 1 verification): a partition not in the transaction is
  INVALID_TXN_STATE (the coordinator's TRANSACTION_ABORTABLE, mapped back for Produce <= v10);
  a fenced epoch is INVALID_PRODUCER_EPOCH (Produce predates PRODUCER_FENCED); a sequence gap
  OUT_OF_ORDER_SEQUENCE_NUMBER; a bad CRC CORRUPT_MESSAGE; a batch over max.message.bytes
  MESSAGE_TOO_LARGE.
- A transactional batch in a Produce request without a transactional id: KafkaApis answers
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole request.
- A non-transactional batch from a producer whose transaction is open in the partition:
  ProducerAppendInfo.appendDataBatch throws InvalidTxnStateException, INVALID_TXN_STATE.

AddPartitionsToTxn refusals are logged at debug (as Kafka's coordinator does), so the broker
runs with debug on for the transaction handlers.
"""

from __future__ import annotations

import pytest

import kwire
from clients import create_topic, unique_topic
from floe_process import wait_until

# AddPartitionsToTxn refusals are debug lines (floe_broker::handlers::transactions).
TXN_DEBUG = {"RUST_LOG": "info,floe_broker::handlers::transactions=debug"}


@pytest.fixture
def broker(floe_factory):
    return floe_factory("floe", env=TXN_DEBUG)


class Log:
    """The broker's stderr from a mark on."""

    def __init__(self, floe):
        self.floe = floe
        self.mark = 0

    def set_mark(self):
        self.mark = self.floe.log_path.stat().st_size

    def since_mark(self) -> str:
        return self.floe.log_path.read_bytes()[self.mark:].decode(errors="replace")

    def expect(self, *needles: str) -> str:
        """Waits (briefly) for one new line holding every needle; returns it."""
        def find():
            for line in self.since_mark().splitlines():
                if all(n in line for n in needles):
                    return line
            return None
        try:
            return wait_until(find, timeout=5, what=f"a log line with {needles}")
        except TimeoutError:
            raise AssertionError(f"no broker log line with {needles}; new log:\n{self.since_mark()[-4000:]}")


class Producer:
    """One transactional producer, spoken to over a raw connection."""

    def __init__(self, conn: kwire.KafkaConn, transactional_id: str):
        self.conn = conn
        self.txn_id = transactional_id
        self.pid = -1
        self.epoch = -1

    def init(self) -> tuple[int, int]:
        err, self.pid, self.epoch = kwire.parse_init_producer_id_v1(self.conn.call(
            kwire.API_INIT_PRODUCER_ID, 1, kwire.init_producer_id_v1(self.txn_id)))
        assert err == 0 and self.pid >= 0 and self.epoch >= 0, (err, self.pid, self.epoch)
        return self.pid, self.epoch

    def add(self, topics: dict[str, list[int]], version: int = 2, pid: int | None = None,
            epoch: int | None = None, txn_id: str | None = None) -> dict[tuple[str, int], int]:
        args = (txn_id or self.txn_id, self.pid if pid is None else pid,
                self.epoch if epoch is None else epoch, topics)
        if version == 3:
            return kwire.parse_add_partitions_to_txn_v3(self.conn.call_flexible(
                kwire.API_ADD_PARTITIONS_TO_TXN, 3, kwire.add_partitions_to_txn_v3(*args)))
        return kwire.parse_add_partitions_to_txn_v2(self.conn.call(
            kwire.API_ADD_PARTITIONS_TO_TXN, version, kwire.add_partitions_to_txn_v2(*args)))

    def end(self, commit: bool, version: int = 1, pid: int | None = None, epoch: int | None = None,
            txn_id: str | None = None) -> int:
        return kwire.parse_end_txn_v1(self.conn.call(kwire.API_END_TXN, version, kwire.end_txn_v1(
            txn_id or self.txn_id, self.pid if pid is None else pid,
            self.epoch if epoch is None else epoch, commit)))

    def produce(self, topic: str, partition: int, seq: int, values: list[bytes], *,
                pid: int | None = None, epoch: int | None = None, transactional: bool = True,
                txn_id: str | None | bool = True, corrupt_crc: bool = False) -> tuple[int, int]:
        """(error code, base offset). `txn_id=True` sends this producer's id, None none."""
        batch = kwire.record_batch(
            [kwire.Record(None, v) for v in values], corrupt_crc=corrupt_crc,
            producer_id=self.pid if pid is None else pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            base_sequence=seq, transactional=transactional)
        tid = self.txn_id if txn_id is True else txn_id
        res = kwire.parse_produce_v3(self.conn.call(
            kwire.API_PRODUCE, 3, kwire.produce_v3(topic, partition, batch, transactional_id=tid)))
        return res[(topic, partition)]


def end_offset(conn: kwire.KafkaConn, topic: str, partition: int = 0) -> int:
    """The log end offset (ListOffsets latest; Floe is the only replica: the high watermark)."""
    res = kwire.parse_list_offsets_v1(conn.call(kwire.API_LIST_OFFSETS, 1,
                                                kwire.list_offsets_v1(topic, partition, -1)))
    err, _ts, offset = res[(topic, partition)]
    assert err == 0, res
    return offset


def high_watermark(conn: kwire.KafkaConn, topic: str, partition: int = 0) -> int:
    (p,) = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, partition, 0, 1 << 20)])))
    assert p.error_code == 0, p
    return p.high_watermark


def assert_log_end(conn, topic: str, partition: int, expected: int, why: str):
    got = (end_offset(conn, topic, partition), high_watermark(conn, topic, partition))
    assert got == (expected, expected), f"{topic}-{partition}: (LEO, HW) {got}, want {expected}: {why}"


def setup(broker, prefix: str, partitions: int = 1, config: dict | None = None):
    topic = create_topic(broker.bootstrap, unique_topic(prefix), partitions=partitions, config=config)
    conn = kwire.KafkaConn(broker.host, broker.port)
    return topic, conn, Producer(conn, unique_topic(f"{prefix}-txn")), Log(broker)

# ---------------------------------------------------------------- coordinator requests


def test_add_partitions_with_a_wrong_epoch_is_fenced_by_version(broker):
    """KafkaApis.handleAddPartitionsToTransaction: the coordinator's PRODUCER_FENCED is sent as
    INVALID_PRODUCER_EPOCH to versions < 2 (KIP-588), as itself from v2 on (v3 is flexible)."""
    topic, conn, p, log = setup(broker, "fence-add")
    with conn:
        pid, first_epoch = p.init()
        assert p.init() == (pid, first_epoch + 1), "a second InitProducerId bumps the epoch"
        log.set_mark()
        stale, future = first_epoch, p.epoch + 5
        for version, epoch, want in [(1, stale, kwire.ERR_INVALID_PRODUCER_EPOCH),
                                     (2, stale, kwire.ERR_PRODUCER_FENCED),
                                     (3, stale, kwire.ERR_PRODUCER_FENCED),
                                     (1, future, kwire.ERR_INVALID_PRODUCER_EPOCH),
                                     (2, future, kwire.ERR_PRODUCER_FENCED)]:
            res = p.add({topic: [0]}, version=version, epoch=epoch)
            assert res == {(topic, 0): want}, f"v{version} epoch {epoch} (current {p.epoch}): {res}"
        log.expect("AddPartitionsToTxn refused", p.txn_id, f"epoch {stale} is fenced")
        log.expect("AddPartitionsToTxn refused", p.txn_id, f"epoch {future} is fenced")

        # Nothing was added: the transaction is still Empty, the partition not in it.
        assert p.end(commit=True, version=2) == kwire.ERR_INVALID_TXN_STATE
        assert p.produce(topic, 0, 0, [b"x"]) == (kwire.ERR_INVALID_TXN_STATE, -1)
        assert_log_end(conn, topic, 0, 0, "no record and no marker")
        # The current epoch still works.
        assert p.add({topic: [0]}, version=2) == {(topic, 0): 0}


def test_unknown_producer_id_is_invalid_producer_id_mapping(broker):
    """TransactionCoordinator: no metadata for the transactional id, or a producer id other than
    its own, is INVALID_PRODUCER_ID_MAPPING (AddPartitions, EndTxn, and the produce verification)."""
    topic, conn, p, log = setup(broker, "pid-map")
    with conn:
        pid, _epoch = p.init()
        other = pid + 1000
        log.set_mark()
        for version in (1, 2, 3):
            assert p.add({topic: [0]}, version=version, pid=other) == \
                {(topic, 0): kwire.ERR_INVALID_PRODUCER_ID_MAPPING}, f"AddPartitionsToTxn v{version}"
        for version in (1, 2):
            for commit in (True, False):
                assert p.end(commit, version=version, pid=other) == kwire.ERR_INVALID_PRODUCER_ID_MAPPING, \
                    f"EndTxn v{version} commit={commit}"
        log.expect("AddPartitionsToTxn refused", p.txn_id, f"producer id {other} does not own")
        log.expect("EndTxn refused", p.txn_id, f"producer id {other} does not own")

        # A transactional id the coordinator never saw.
        unknown = unique_topic("never-initialised")
        assert p.add({topic: [0]}, txn_id=unknown) == {(topic, 0): kwire.ERR_INVALID_PRODUCER_ID_MAPPING}
        assert p.end(True, txn_id=unknown) == kwire.ERR_INVALID_PRODUCER_ID_MAPPING
        log.expect("EndTxn refused", unknown, "does not own")

        # Produce: verification with the coordinator (ReplicaManager passes this code through).
        assert p.produce(topic, 0, 0, [b"x"], pid=other) == (kwire.ERR_INVALID_PRODUCER_ID_MAPPING, -1)
        log.expect("produce refused", topic, f"producer id {other} does not own")

        # The real producer's transaction was not touched: still Empty, nothing written.
        assert p.end(commit=True) == kwire.ERR_INVALID_TXN_STATE
        assert_log_end(conn, topic, 0, 0, "refused requests write nothing")


def test_end_txn_with_nothing_added_is_invalid_txn_state(broker):
    """TransactionCoordinator.endTransaction, state Empty: INVALID_TXN_STATE, commit or abort,
    at EndTxn v1 and v2 (before TV2's EndTxn v5). Checked after a committed transaction too:
    InitProducerId empties it, and no stray marker goes to its old partition."""
    topic, conn, p, log = setup(broker, "end-empty")
    with conn:
        p.init()
        log.set_mark()
        for version in (1, 2):
            for commit in (True, False):
                assert p.end(commit, version=version) == kwire.ERR_INVALID_TXN_STATE, \
                    f"EndTxn v{version} commit={commit} in state Empty"
        log.expect("EndTxn refused", p.txn_id, "Empty", "no transaction is open")

        # A transaction that commits (one record and a marker), then a new instance.
        assert p.add({topic: [0]}) == {(topic, 0): 0}
        assert p.produce(topic, 0, 0, [b"committed"]) == (0, 0)
        assert p.end(commit=True) == 0
        assert_log_end(conn, topic, 0, 2, "the record and its commit marker")
        p.init()
        log.set_mark()
        assert p.end(commit=True, version=2) == kwire.ERR_INVALID_TXN_STATE
        assert p.end(commit=False, version=1) == kwire.ERR_INVALID_TXN_STATE
        log.expect("EndTxn refused", p.txn_id, "no transaction is open")
        assert_log_end(conn, topic, 0, 2, "no marker for a transaction that is not open")

# ---------------------------------------------------------------- transactional produce


def test_produce_to_a_partition_not_in_the_transaction(broker):
    """KIP-890 part 1: a transactional batch for a partition the transaction has not added is
    INVALID_TXN_STATE, whether the transaction is Empty or Ongoing elsewhere; nothing is
    written, and the commit writes no marker there."""
    topic, conn, p, log = setup(broker, "unadded", partitions=2)
    with conn:
        p.init()
        log.set_mark()
        assert p.produce(topic, 1, 0, [b"a"]) == (kwire.ERR_INVALID_TXN_STATE, -1), "state Empty"
        line = log.expect("produce refused", topic, "partition=1", "not added to the transaction")
        assert "InvalidTxnState" in line, line
        assert p.add({topic: [0]}) == {(topic, 0): 0}
        assert p.produce(topic, 1, 0, [b"b"]) == (kwire.ERR_INVALID_TXN_STATE, -1), "Ongoing, other partition"
        assert_log_end(conn, topic, 1, 0, "refused batches")
        assert p.produce(topic, 0, 0, [b"in"]) == (0, 0), "the added partition takes it"
        assert p.end(commit=True) == 0
        assert_log_end(conn, topic, 0, 2, "record and marker")
        assert_log_end(conn, topic, 1, 0, "no marker where the transaction never was")


def test_out_of_order_sequence_in_a_transaction(broker):
    """ProducerAppendInfo.checkSequence: a gap after an accepted batch is OUT_OF_ORDER_SEQUENCE_NUMBER;
    the next in-order batch is still taken."""
    topic, conn, p, log = setup(broker, "oos")
    with conn:
        p.init()
        assert p.add({topic: [0]}) == {(topic, 0): 0}
        assert p.produce(topic, 0, 0, [b"a", b"b", b"c"]) == (0, 0)
        log.set_mark()
        # A gap, sequences already passed (not a retry of the batch), and none at all
        # (NO_SEQUENCE: only a coordinator's own batches go without one).
        for seq in (5, 2, 1, -1):
            assert p.produce(topic, 0, seq, [b"x"]) == (kwire.ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, -1), f"seq {seq}"
        line = log.expect("produce refused", topic, "sequence 5 where 3 was expected")
        assert "OutOfOrderSequenceNumber" in line, line
        assert_log_end(conn, topic, 0, 3, "out-of-order batches are not written")
        assert p.produce(topic, 0, 3, [b"d"]) == (0, 3)
        assert p.end(commit=True) == 0
        assert_log_end(conn, topic, 0, 5, "four records and a marker")


def test_produce_with_an_old_epoch_is_invalid_producer_epoch(broker):
    """A zombie's batch (epoch older than the coordinator's): Produce predates PRODUCER_FENCED,
    so the coordinator's PRODUCER_FENCED (verification) and the log's own epoch check
    (ProducerAppendInfo.checkProducerEpoch) both answer INVALID_PRODUCER_EPOCH."""
    topic, conn, p, log = setup(broker, "zombie")
    with conn:
        _pid, old = p.init()
        _pid, current = p.init()
        assert current == old + 1
        assert p.add({topic: [0]}) == {(topic, 0): 0}
        log.set_mark()
        # Before the current epoch wrote here (refused by the coordinator's check).
        assert p.produce(topic, 0, 0, [b"z"], epoch=old) == (kwire.ERR_INVALID_PRODUCER_EPOCH, -1)
        line = log.expect("produce refused", topic, f"epoch {old} is fenced")
        assert "InvalidProducerEpoch" in line, line
        assert_log_end(conn, topic, 0, 0, "the zombie's batch")
        # After it (the partition knows the newer epoch too).
        assert p.produce(topic, 0, 0, [b"live"]) == (0, 0)
        assert p.produce(topic, 0, 1, [b"z"], epoch=old) == (kwire.ERR_INVALID_PRODUCER_EPOCH, -1)
        assert_log_end(conn, topic, 0, 1, "only the live producer's record")
        assert p.end(commit=True) == 0
        assert_log_end(conn, topic, 0, 2, "record and marker")


def test_corrupt_and_oversized_transactional_batches(broker):
    """A transactional batch (partition added, so verification passes) with a bad CRC is
    CORRUPT_MESSAGE; one over the topic's max.message.bytes is MESSAGE_TOO_LARGE
    (UnifiedLog.analyzeAndValidateRecords). Neither is written nor takes a sequence number."""
    limit = 1024
    topic, conn, p, log = setup(broker, "crc-size", config={"max.message.bytes": str(limit)})
    with conn:
        p.init()
        assert p.add({topic: [0]}) == {(topic, 0): 0}
        log.set_mark()
        assert p.produce(topic, 0, 0, [b"evil"], corrupt_crc=True) == (kwire.ERR_CORRUPT_MESSAGE, -1)
        line = log.expect("produce refused", topic, "fails its CRC")
        assert "CorruptMessage" in line, line
        assert p.produce(topic, 0, 0, [b"v" * (2 * limit)]) == (kwire.ERR_MESSAGE_TOO_LARGE, -1)
        line = log.expect("produce refused", topic, f"larger than the limit of {limit}")
        assert "MessageTooLarge" in line, line
        assert_log_end(conn, topic, 0, 0, "refused batches")
        assert p.produce(topic, 0, 0, [b"ok"]) == (0, 0), "sequence 0 is still the next one"
        assert p.end(commit=True) == 0
        assert_log_end(conn, topic, 0, 2, "record and marker")


def test_transactional_batch_without_a_transactional_id(broker):
    topic, conn, p, log = setup(broker, "no-txn-id")
    with conn:
        p.init()
        assert p.add({topic: [0]}) == {(topic, 0): 0}
        log.set_mark()
        # KafkaApis.handleProduceRequest: transactional records need a transactional id.
        assert p.produce(topic, 0, 0, [b"x"], txn_id=None) == (kwire.ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        log.expect("produce refused", topic, "without a transactional id")
        assert_log_end(conn, topic, 0, 0, "refused batch")


def test_non_transactional_batch_during_the_producers_transaction(broker):
    topic, conn, p, log = setup(broker, "non-txn")
    with conn:
        p.init()
        assert p.add({topic: [0]}) == {(topic, 0): 0}
        assert p.produce(topic, 0, 0, [b"in-txn"]) == (0, 0)
        log.set_mark()
        # ProducerAppendInfo.appendDataBatch: "Expected transactional write from producer".
        assert p.produce(topic, 0, 1, [b"plain"], transactional=False) == (kwire.ERR_INVALID_TXN_STATE, -1)
        log.expect("produce refused", topic, "non-transactional batch")
        assert_log_end(conn, topic, 0, 1, "refused batch")
