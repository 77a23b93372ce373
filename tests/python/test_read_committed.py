"""READ_COMMITTED on the wire: Fetch's isolation level, the last stable offset and
the aborted-transaction list; ListOffsets latest at READ_COMMITTED; the clients'
`isolation.level=read_committed`. Transactional produce arrives with the
transaction coordinator; until then the log has no open transaction, so the LSO
equals the high watermark, and what is checked here is the wiring and the encoding
(an empty aborted list for READ_COMMITTED, a null one for READ_UNCOMMITTED, as Kafka).
The transaction semantics themselves are covered by floe-storage's unit tests."""

from __future__ import annotations

import kwire
from clients import consume_range, create_topic, produce_all, unique_topic

ERR_INVALID_RECORD = 87


def test_fetch_read_committed_answers_lso_and_an_empty_aborted_list(floe):
    topic = create_topic(floe.bootstrap, unique_topic("rc"))
    produce_all(floe.bootstrap, topic, [{"value": f"v{i}".encode()} for i in range(5)])
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        (rc,) = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4(
            [(topic, 0, 0, 1 << 20)], isolation_level=1)))
        (ru,) = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4(
            [(topic, 0, 0, 1 << 20)], isolation_level=0)))
        assert rc.error_code == 0 and ru.error_code == 0
        assert (rc.high_watermark, rc.last_stable_offset) == (5, 5)
        assert rc.aborted_transactions == [], "READ_COMMITTED: an empty array, not null"
        assert ru.aborted_transactions is None, "READ_UNCOMMITTED: null"
        assert rc.records == ru.records, "records are sent as stored at both levels"
        # At the LSO: nothing, still an (empty) aborted list.
        (end,) = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4(
            [(topic, 0, 5, 1 << 20)], isolation_level=1)))
        assert end.error_code == 0 and not end.records and end.aborted_transactions == []

        for isolation in (0, 1):
            offsets = kwire.parse_list_offsets_v2(conn.call(kwire.API_LIST_OFFSETS, 2, kwire.list_offsets_v2(
                topic, 0, -1, isolation)))
            assert offsets[(topic, 0)] == (0, -1, 5), (isolation, offsets)


def test_client_markers_are_refused(floe):
    """Only the transaction coordinator writes control batches."""
    topic = create_topic(floe.bootstrap, unique_topic("rc-marker"))
    rec = kwire.Record(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    batch = bytearray(kwire.record_batch([rec]))
    # attributes: transactional | control; producer id 7, epoch 0; then the CRC again.
    batch[21:23] = (0x30).to_bytes(2, "big")
    batch[43:53] = (7).to_bytes(8, "big") + (0).to_bytes(2, "big")
    batch[17:21] = kwire.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        # Without a transactional id Kafka refuses the request before looking at the batch
        # (transactional records need one); with one, LogValidator refuses the control batch.
        resp = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, bytes(batch))))
        assert resp[(topic, 0)][0] == kwire.ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        resp = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(
            topic, 0, bytes(batch), transactional_id="rc-marker-writer")))
        assert resp[(topic, 0)][0] == ERR_INVALID_RECORD
        (p,) = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, 0, 1 << 20)])))
        assert p.high_watermark == 0, "nothing written"


def test_read_committed_consumer_reads_plain_data(floe):
    topic = create_topic(floe.bootstrap, unique_topic("rc-client"))
    produce_all(floe.bootstrap, topic, [{"value": f"m{i}".encode()} for i in range(50)])
    msgs = consume_range(floe.bootstrap, topic, 0, 50, **{"isolation.level": "read_committed"})
    assert [m.value() for m in msgs] == [f"m{i}".encode() for i in range(50)]
