//! Request decoding as the broker does it, on arbitrary bytes: frames off a
//! byte stream (`parse_frame`), each frame's header (`parse_request_header`),
//! then, for an API and version the broker serves, the body at that version
//! (the `Decodable` impls the broker's dispatch calls) and, for a Produce,
//! every partition's records through `validate_batches`. Nothing may panic
//! or allocate beyond what the input can justify.
#![no_main]

use bytes::BytesMut;
use floe_protocol::apis::is_supported;
use floe_protocol::frame::{parse_frame, parse_request_header};
use floe_protocol::record_batch::validate_batches;
use kafka_protocol::messages::{ApiKey, RequestKind};
use libfuzzer_sys::fuzz_target;

/// `socket.request.max.bytes` for the fuzzer: small, so oversized frames are exercised too.
const MAX_FRAME: usize = 1 << 20;
/// The default `message.max.bytes`.
const MAX_BATCH: usize = 1_048_588;

fuzz_target!(|data: &[u8]| {
    let mut stream = BytesMut::from(data);
    while let Ok(Some(frame)) = parse_frame(&mut stream, MAX_FRAME) {
        let Ok(request) = parse_request_header(frame) else { continue };
        let version = request.header.request_api_version;
        if !is_supported(request.api_key, version) {
            continue;
        }
        let mut body = request.body;
        let Ok(decoded) = RequestKind::decode(request.api_key, &mut body, version) else { continue };
        if let (ApiKey::Produce, RequestKind::Produce(produce)) = (request.api_key, &decoded) {
            for topic in &produce.topic_data {
                for partition in &topic.partition_data {
                    if let Some(records) = &partition.records {
                        let _ = validate_batches(records, MAX_BATCH);
                    }
                }
            }
        }
    }
});
