"""A tiny, independent Kafka wire encoder/decoder for raw-socket tests.

Written from the protocol spec with `struct`, sharing no code with floe, so the
tests can send exact bytes (good and bad) and compare responses byte for byte.

Frames: `size:int32 | header | body`. Request header v1:
`api_key:int16 api_version:int16 correlation_id:int32 client_id:nullable string`.
Response header v0: `correlation_id:int32`. Mostly non-flexible versions are used:
ApiVersions v0, Metadata v1, Produce v3, Fetch v4, ListOffsets v1, InitProducerId v1,
AddPartitionsToTxn v0-2, EndTxn v0-2. Flexible ones (request header v2 = v1 + tagged
fields; response header v1 = correlation id + tagged fields, except ApiVersions whose
response header stays v0): ApiVersions v3, Fetch v12, AddPartitionsToTxn v3.

Record batch v2 (magic 2):
    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 (CRC-32C of attributes..end) | attributes int16 | lastOffsetDelta int32 |
    baseTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16 |
    baseSequence int32 | recordCount int32 | records...
Record: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    (headerKeyLength varint | headerKey | headerValueLength varint | headerValue)*
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_FIND_COORDINATOR = 10
API_API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22
API_ADD_PARTITIONS_TO_TXN = 24
API_END_TXN = 26
API_DESCRIBE_CLUSTER = 60

ERR_NONE = 0
ERR_CORRUPT_MESSAGE = 2
ERR_MESSAGE_TOO_LARGE = 10
ERR_UNSUPPORTED_VERSION = 35
ERR_OUT_OF_ORDER_SEQUENCE_NUMBER = 45
ERR_INVALID_PRODUCER_EPOCH = 47
ERR_INVALID_TXN_STATE = 48
ERR_INVALID_PRODUCER_ID_MAPPING = 49
ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
ERR_INVALID_RECORD = 87
ERR_PRODUCER_FENCED = 90

# Record batch attributes (v2).
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

# ---------------------------------------------------------------- CRC-32C


def _make_crc32c_table():
    poly = 0x82F63B78
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _make_crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    t = _CRC_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the standard check value

# ---------------------------------------------------------------- primitives


def varint(n: int) -> bytes:
    """Zig-zag signed varint (Kafka's varint/varlong)."""
    z = (n << 1) ^ (n >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    z = 0
    while True:
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (z >> 1) ^ -(z & 1), pos


def string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def nbytes(b: bytes | None) -> bytes:
    if b is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(b)) + b


def array(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


class Reader:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ValueError(f"short buffer: need {n} at {self.pos}, have {len(self.buf)}")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self):
        return struct.unpack(">b", self.take(1))[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def string(self):
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def bytes_(self):
        n = self.i32()
        return None if n < 0 else self.take(n)

    def array(self, item):
        n = self.i32()
        return None if n < 0 else [item(self) for _ in range(n)]

    def done(self) -> bool:
        return self.pos == len(self.buf)

# ---------------------------------------------------------------- record batches


@dataclass
class Record:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_delta: int = 0
    offset: int | None = None  # filled when decoding


def encode_record(offset_delta: int, r: Record) -> bytes:
    body = bytearray()
    body += struct.pack(">b", 0)
    body += varint(r.timestamp_delta)
    body += varint(offset_delta)
    if r.key is None:
        body += varint(-1)
    else:
        body += varint(len(r.key)) + r.key
    if r.value is None:
        body += varint(-1)
    else:
        body += varint(len(r.value)) + r.value
    body += varint(len(r.headers))
    for hk, hv in r.headers:
        kb = hk.encode()
        body += varint(len(kb)) + kb
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + bytes(body)


def record_batch(records: list[Record], base_timestamp: int = 1_700_000_000_000,
                 base_offset: int = 0, corrupt_crc: bool = False, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False) -> bytes:
    """An uncompressed v2 batch (CreateTime); by default without a producer id.
    `transactional` sets attribute bit 4 (a batch of a transactional producer)."""
    recs = b"".join(encode_record(i, r) for i, r in enumerate(records))
    max_ts = base_timestamp + max((r.timestamp_delta for r in records), default=0)
    attributes = ATTR_TRANSACTIONAL if transactional else 0
    after_crc = struct.pack(">hiqqqhii", attributes, len(records) - 1, base_timestamp, max_ts,
                            producer_id, producer_epoch, base_sequence, len(records)) + recs
    crc = crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    after_len = struct.pack(">ibI", 0, 2, crc) + after_crc
    return struct.pack(">qi", base_offset, len(after_len)) + after_len


@dataclass
class Batch:
    base_offset: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    crc_ok: bool
    records: list[Record]
    raw: bytes


def decode_batches(data: bytes, allow_partial_tail: bool = True) -> list[Batch]:
    """Decode v2 batches (uncompressed ones fully; compressed ones without records)."""
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            if allow_partial_tail:
                break
            raise ValueError("truncated batch header")
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + length
        if end > len(data):
            if allow_partial_tail:
                break
            raise ValueError("truncated batch")
        raw = data[pos:end]
        magic = raw[16]
        if magic != 2:
            raise ValueError(f"unexpected magic {magic} at {pos}")
        (crc,) = struct.unpack_from(">I", raw, 17)
        crc_ok = crc32c(raw[21:]) == crc
        (attributes, last_delta, base_ts, max_ts, _pid, _pepoch, _seq,
         count) = struct.unpack_from(">hiqqqhii", raw, 21)
        records = []
        if attributes & 0x7 == 0:
            p = 61
            for _ in range(count):
                length_, p = read_varint(raw, p)
                rec_end = p + length_
                p += 1  # attributes
                ts_delta, p = read_varint(raw, p)
                off_delta, p = read_varint(raw, p)
                klen, p = read_varint(raw, p)
                key = None if klen < 0 else raw[p:p + klen]
                p += max(klen, 0)
                vlen, p = read_varint(raw, p)
                value = None if vlen < 0 else raw[p:p + vlen]
                p += max(vlen, 0)
                hcount, p = read_varint(raw, p)
                headers = []
                for _ in range(hcount):
                    hkl, p = read_varint(raw, p)
                    hk = raw[p:p + hkl].decode()
                    p += hkl
                    hvl, p = read_varint(raw, p)
                    hv = None if hvl < 0 else raw[p:p + hvl]
                    p += max(hvl, 0)
                    headers.append((hk, hv))
                assert p == rec_end, "record length mismatch"
                records.append(Record(key, value, headers, ts_delta, base_offset + off_delta))
        out.append(Batch(base_offset, attributes, last_delta, base_ts, max_ts, crc_ok, records, raw))
        pos = end
    return out

# ---------------------------------------------------------------- requests


def api_versions_v0() -> bytes:
    return b""


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_string(s: str) -> bytes:
    b = s.encode()
    return uvarint(len(b) + 1) + b


def api_versions_v3(software: str = "floe-raw", version: str = "0.1") -> bytes:
    """ApiVersions v3+ body (flexible): client software name/version + empty tagged fields.
    Send it with `flexible_header=True` (request header v2)."""
    return compact_string(software) + compact_string(version) + b"\x00"


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    n = 0
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, pos
        shift += 7


def parse_api_versions_v3(body: bytes):
    """ApiVersions v3 response body (its response header is still v0)."""
    err = struct.unpack_from(">h", body, 0)[0]
    n, pos = read_uvarint(body, 2)
    apis = {}
    for _ in range(n - 1):
        k, lo, hi = struct.unpack_from(">hhh", body, pos)
        pos += 6
        tags, pos = read_uvarint(body, pos)
        assert tags == 0, "unexpected tagged fields in an ApiVersions entry"
        apis[k] = (lo, hi)
    (throttle,) = struct.unpack_from(">i", body, pos)
    pos += 4
    _tags, pos = read_uvarint(body, pos)
    return err, apis, body[pos:]


def metadata_v1(topics: list[str] | None) -> bytes:
    if topics is None:
        return struct.pack(">i", -1)
    return array([string(t) for t in topics])


def produce_v3(topic: str, partition: int, records: bytes, acks: int = -1,
               timeout_ms: int = 10_000, transactional_id: str | None = None) -> bytes:
    """Produce v3: transactional_id (nullable string) | acks | timeout | topics."""
    return (string(transactional_id) + struct.pack(">hi", acks, timeout_ms)
            + array([string(topic) + array([struct.pack(">i", partition) + nbytes(records)])]))


def fetch_v4(parts: list[tuple[str, int, int, int]], max_wait_ms: int = 0, min_bytes: int = 0,
             max_bytes: int = 50 * 1024 * 1024, isolation_level: int = 0) -> bytes:
    """parts: (topic, partition, fetch_offset, partition_max_bytes), grouped by topic in order.
    isolation_level: 0 READ_UNCOMMITTED, 1 READ_COMMITTED."""
    by_topic: dict[str, list[bytes]] = {}
    for topic, p, off, pmax in parts:
        by_topic.setdefault(topic, []).append(struct.pack(">iqi", p, off, pmax))
    return (struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, isolation_level)
            + array([string(t) + array(ps) for t, ps in by_topic.items()]))


def fetch_v12(parts: list[tuple[str, int, int, int]], max_wait_ms: int = 0, min_bytes: int = 0,
              max_bytes: int = 50 * 1024 * 1024) -> bytes:
    """Fetch v12 (flexible; send with `flexible_header=True`), sessionless full fetch."""
    by_topic: dict[str, list[bytes]] = {}
    for topic, p, off, pmax in parts:
        by_topic.setdefault(topic, []).append(struct.pack(">iiqiqi", p, -1, off, -1, -1, pmax) + b"\x00")
    topics = b"".join(compact_string(t) + uvarint(len(ps) + 1) + b"".join(ps) + b"\x00"
                      for t, ps in by_topic.items())
    return (struct.pack(">iiiibii", -1, max_wait_ms, min_bytes, max_bytes, 0, 0, -1)
            + uvarint(len(by_topic) + 1) + topics
            + uvarint(1)            # forgotten_topics_data: empty
            + compact_string("")    # rack_id
            + b"\x00")              # tagged fields


def list_offsets_v1(topic: str, partition: int, timestamp: int) -> bytes:
    return struct.pack(">i", -1) + array([string(topic) + array([struct.pack(">iq", partition, timestamp)])])


def list_offsets_v2(topic: str, partition: int, timestamp: int, isolation_level: int) -> bytes:
    """ListOffsets v2: v1 plus the isolation level; the response adds throttle_time_ms first."""
    return (struct.pack(">ib", -1, isolation_level)
            + array([string(topic) + array([struct.pack(">iq", partition, timestamp)])]))


def list_offsets_v8(topic: str, partition: int, timestamp: int, isolation_level: int = 0) -> bytes:
    """ListOffsets v8 (flexible; send with `call_flexible`), the first version taking
    -4 (EARLIEST_LOCAL, KIP-405): replica_id | isolation_level | topics."""
    part = struct.pack(">iiq", partition, -1, timestamp) + b"\x00"
    return (struct.pack(">ib", -1, isolation_level)
            + compact_array([compact_string(topic) + compact_array([part]) + b"\x00"]) + b"\x00")


def parse_list_offsets_v8(body: bytes) -> dict[tuple[str, int], tuple[int, int, int]]:
    """{(topic, partition): (error_code, timestamp, offset)}."""
    r = FlexReader(body)
    r.i32()  # throttle_time_ms

    def part(r):
        p, err, ts, off, _epoch = r.i32(), r.i16(), r.i64(), r.i64(), r.i32()
        r.skip_tags()
        return p, err, ts, off

    def topic(r):
        name = r.compact_string()
        parts = r.compact_array(part)
        r.skip_tags()
        return name, parts

    topics = r.compact_array(topic)
    r.skip_tags()
    return {(t, p): (err, ts, off) for t, parts in topics for p, err, ts, off in parts}


def parse_list_offsets_v2(body: bytes):
    return parse_list_offsets_v1(body[4:])


def init_producer_id_v1(transactional_id: str | None, transaction_timeout_ms: int = 60_000) -> bytes:
    """InitProducerId v0/v1 (non-flexible): transactional_id nullable string | timeout int32."""
    return string(transactional_id) + struct.pack(">i", transaction_timeout_ms)


def find_coordinator_v1(key: str, key_type: int) -> bytes:
    """FindCoordinator v1 (non-flexible): key string | key_type int8 (0 group, 1 transaction)."""
    return string(key) + struct.pack(">b", key_type)


def find_coordinator_v4(keys: list[str], key_type: int) -> bytes:
    """FindCoordinator v4 (flexible; send with `call_flexible`): key_type int8 |
    coordinator_keys compact array of compact strings | tagged fields."""
    return struct.pack(">b", key_type) + uvarint(len(keys) + 1) + b"".join(compact_string(k) for k in keys) + b"\x00"


def parse_find_coordinator_v4(body: bytes) -> dict[str, tuple[int, int]]:
    """FindCoordinator v4 response body (after response header v1): {key: (error_code, node_id)}."""
    r = FlexReader(body)
    r.i32()  # throttle_time_ms

    def coordinator(r):
        key, node, _host, _port, err, _msg = r.compact_string(), r.i32(), r.compact_string(), r.i32(), r.i16(), r.compact_string()
        r.skip_tags()
        return key, (err, node)

    coordinators = r.compact_array(coordinator)
    r.skip_tags()
    assert r.done(), "trailing bytes in FindCoordinator v4 response"
    return dict(coordinators)


def add_partitions_to_txn_v2(transactional_id: str, producer_id: int, producer_epoch: int,
                             topics: dict[str, list[int]]) -> bytes:
    """AddPartitionsToTxn v0-v2 (non-flexible; v2 only adds PRODUCER_FENCED to the answers):
    transactional_id string | producer_id int64 | producer_epoch int16 |
    topics [name string | partitions [int32]]."""
    return (string(transactional_id) + struct.pack(">qh", producer_id, producer_epoch)
            + array([string(t) + array([struct.pack(">i", p) for p in ps]) for t, ps in topics.items()]))


def compact_array(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def add_partitions_to_txn_v3(transactional_id: str, producer_id: int, producer_epoch: int,
                             topics: dict[str, list[int]]) -> bytes:
    """AddPartitionsToTxn v3: v2's fields, flexible (compact strings and arrays, tagged fields
    after every struct). Send with `flexible_header=True`."""
    topic_items = [compact_string(t) + compact_array([struct.pack(">i", p) for p in ps]) + b"\x00"
                   for t, ps in topics.items()]
    return (compact_string(transactional_id) + struct.pack(">qh", producer_id, producer_epoch)
            + compact_array(topic_items) + b"\x00")


def end_txn_v1(transactional_id: str, producer_id: int, producer_epoch: int, committed: bool) -> bytes:
    """EndTxn v0-v2 (non-flexible; v2 only adds PRODUCER_FENCED to the answers):
    transactional_id string | producer_id int64 | producer_epoch int16 | committed bool."""
    return string(transactional_id) + struct.pack(">qhb", producer_id, producer_epoch, 1 if committed else 0)

# ---------------------------------------------------------------- responses


def parse_api_versions_v0(body: bytes):
    r = Reader(body)
    err = r.i16()
    apis = r.array(lambda r: (r.i16(), r.i16(), r.i16()))
    return err, {k: (lo, hi) for k, lo, hi in apis}


def parse_produce_v3(body: bytes):
    r = Reader(body)
    topics = r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), r.i16(), r.i64(), r.i64()))))
    r.i32()  # throttle
    return {(t, p): (err, base) for t, parts in topics for p, err, base, _lat in parts}


@dataclass
class FetchPartition:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    records: bytes | None
    # (producer_id, first_offset) pairs; None for a null array (READ_UNCOMMITTED).
    aborted_transactions: list[tuple[int, int]] | None = None


def parse_fetch_v4(body: bytes) -> list[FetchPartition]:
    r = Reader(body)
    r.i32()  # throttle_time_ms
    out = []
    for _ in range(r.i32()):
        topic = r.string()
        for _ in range(r.i32()):
            p = r.i32()
            err = r.i16()
            hw = r.i64()
            lso = r.i64()
            n = r.i32()
            aborted = None if n < 0 else [(r.i64(), r.i64()) for _ in range(n)]
            recs = r.bytes_()
            out.append(FetchPartition(topic, p, err, hw, lso, recs, aborted))
    assert r.done(), "trailing bytes in Fetch v4 response"
    return out


def parse_list_offsets_v1(body: bytes):
    r = Reader(body)
    topics = r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), r.i16(), r.i64(), r.i64()))))
    return {(t, p): (err, ts, off) for t, parts in topics for p, err, ts, off in parts}


def parse_init_producer_id_v1(body: bytes) -> tuple[int, int, int]:
    """(error_code, producer_id, producer_epoch)."""
    r = Reader(body)
    r.i32()  # throttle_time_ms
    out = (r.i16(), r.i64(), r.i16())
    assert r.done(), "trailing bytes in InitProducerId v1 response"
    return out


def parse_find_coordinator_v1(body: bytes) -> tuple[int, str | None, int, str, int]:
    """(error_code, error_message, node_id, host, port)."""
    r = Reader(body)
    r.i32()  # throttle_time_ms
    out = (r.i16(), r.string(), r.i32(), r.string(), r.i32())
    assert r.done(), "trailing bytes in FindCoordinator v1 response"
    return out


def parse_add_partitions_to_txn_v2(body: bytes) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v0-v2 response: {(topic, partition): error_code}."""
    r = Reader(body)
    r.i32()  # throttle_time_ms
    topics = r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), r.i16()))))
    assert r.done(), "trailing bytes in AddPartitionsToTxn v2 response"
    return {(t, p): err for t, parts in topics for p, err in parts}


class FlexReader(Reader):
    """Reader for flexible versions: compact strings and arrays, tagged fields."""

    def uvarint(self) -> int:
        n, self.pos = read_uvarint(self.buf, self.pos)
        return n

    def compact_string(self):
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def compact_array(self, item):
        n = self.uvarint()
        return None if n == 0 else [item(self) for _ in range(n - 1)]

    def skip_tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())


def parse_add_partitions_to_txn_v3(body: bytes) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v3 response body (after response header v1):
    {(topic, partition): error_code}."""
    r = FlexReader(body)
    r.i32()  # throttle_time_ms

    def partition(r):
        p, err = r.i32(), r.i16()
        r.skip_tags()
        return p, err

    def topic(r):
        name = r.compact_string()
        parts = r.compact_array(partition)
        r.skip_tags()
        return name, parts

    topics = r.compact_array(topic)
    r.skip_tags()
    assert r.done(), "trailing bytes in AddPartitionsToTxn v3 response"
    return {(t, p): err for t, parts in topics for p, err in parts}


def parse_end_txn_v1(body: bytes) -> int:
    """EndTxn v0-v2 response: the error code."""
    r = Reader(body)
    r.i32()  # throttle_time_ms
    err = r.i16()
    assert r.done(), "trailing bytes in EndTxn v1 response"
    return err


def parse_metadata_v1(body: bytes):
    r = Reader(body)
    brokers = r.array(lambda r: (r.i32(), r.string(), r.i32(), r.string()))
    r.i32()  # controller
    topics = r.array(lambda r: (r.i16(), r.string(), r.i8(),
                                r.array(lambda r: (r.i16(), r.i32(), r.i32(),
                                                   r.array(lambda r: r.i32()),
                                                   r.array(lambda r: r.i32())))))
    return brokers, {name: (err, parts) for err, name, _internal, parts in topics}

def describe_cluster_v0(include_cluster_authorized_operations: bool = False) -> bytes:
    """DescribeCluster v0 (flexible): the flag, then empty tagged fields."""
    return bytes([int(include_cluster_authorized_operations)]) + b"\x00"


def parse_describe_cluster_v0(body: bytes):
    """DescribeCluster v0 response body (after response header v1):
    (error_code, cluster_id, controller_id, [(node_id, host, port, rack)])."""
    r = FlexReader(body)
    r.i32()  # throttle_time_ms
    error = r.i16()
    r.compact_string()  # error message
    cluster_id = r.compact_string()
    controller = r.i32()

    def broker(r):
        b = (r.i32(), r.compact_string(), r.i32(), r.compact_string())
        r.skip_tags()
        return b

    brokers = r.compact_array(broker)
    r.i32()  # cluster_authorized_operations
    r.skip_tags()
    assert r.done(), "trailing bytes in DescribeCluster v0 response"
    return error, cluster_id, controller, brokers


# ---------------------------------------------------------------- connection


class KafkaConn:
    """One blocking TCP connection speaking framed Kafka requests."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, client_id: str = "floe-raw",
                 ssl_context=None):
        """`ssl_context` (an `ssl.SSLContext`) wraps the socket in TLS, as for an SSL listener."""
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
        self.client_id = client_id
        self.correlation = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request_frame(self, api_key: int, version: int, body: bytes, correlation_id: int | None = None,
                      flexible_header: bool = False) -> bytes:
        """A framed request with header v1, or v2 (v1 + empty tagged fields) if `flexible_header`."""
        if correlation_id is None:
            self.correlation += 1
            correlation_id = self.correlation
        header = struct.pack(">hhi", api_key, version, correlation_id) + string(self.client_id)
        if flexible_header:
            header += b"\x00"
        payload = header + body
        return struct.pack(">i", len(payload)) + payload

    def send_raw(self, data: bytes):
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            c = self.sock.recv(min(n, 1 << 20))
            if not c:
                raise ConnectionError("connection closed by broker")
            chunks.append(c)
            n -= len(c)
        return b"".join(chunks)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def call_raw(self, api_key: int, version: int, body: bytes, flexible_header: bool = False) -> bytes:
        """Send one request; return the whole response frame payload (header + body)."""
        frame = self.request_frame(api_key, version, body, flexible_header=flexible_header)
        self.send_raw(frame)
        resp = self.recv_frame()
        (corr,) = struct.unpack_from(">i", resp, 0)
        assert corr == self.correlation, f"correlation id {corr} != {self.correlation}"
        return resp

    def call(self, api_key: int, version: int, body: bytes, flexible_header: bool = False) -> bytes:
        """Send one request; return the response body (after the v0 response header)."""
        return self.call_raw(api_key, version, body, flexible_header)[4:]

    def call_flexible(self, api_key: int, version: int, body: bytes) -> bytes:
        """A flexible request (header v2); return the body after response header v1
        (correlation id, tagged fields). Not for ApiVersions, whose response header is v0."""
        resp = self.call_raw(api_key, version, body, flexible_header=True)
        r = FlexReader(resp[4:])
        r.skip_tags()
        return resp[4 + r.pos:]

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True if the broker closes the connection (EOF or reset) within `timeout`,
        draining and ignoring anything it sends first."""
        self.sock.settimeout(timeout)
        try:
            while True:
                c = self.sock.recv(65536)
                if not c:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except OSError as e:  # ssl.SSLError: the broker closed the TLS session mid-stream
            if "EOF" in str(e) or "reset" in str(e).lower():
                return True
            raise
        except socket.timeout:
            return False
