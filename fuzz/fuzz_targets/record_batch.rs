//! Record batch v2 parsing on arbitrary bytes: Produce validation
//! (`validate_batches`), the header walk storage recovery uses (`BatchIter`,
//! `verify_crc`) and the in-place stamp of an accepted append
//! (`stamp_batches`: offsets, leader epoch, LogAppendTime). Nothing may panic,
//! and the three views must agree on what they accept.
#![no_main]

use floe_protocol::record_batch::{stamp_batches, validate_batches, verify_crc, BatchIter, BatchStamp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Recovery's view: walk headers, check each CRC, stop at the first bad batch.
    let mut walked = Vec::new();
    for batch in BatchIter::new(data) {
        let Ok(batch) = batch else { break };
        let bytes = &data[batch.position..batch.end()];
        let _ = verify_crc(bytes, batch.position);
        walked.push(batch);
    }

    // Produce's view.
    let Ok(valid) = validate_batches(data, usize::MAX) else { return };
    assert_eq!(valid.total_bytes, data.len(), "validated batches must tile the payload");
    assert_eq!(walked.len(), valid.batch_count, "BatchIter and validate_batches disagree");
    assert_eq!(&walked[..], valid.batches(), "validation's batch list is the walk's");

    // An accepted append, stamped from any base (CreateTime, then LogAppendTime).
    let first = 1_000;
    for log_append_time in [None, Some(1_700_000_000_000)] {
        let mut owned = data.to_vec();
        let stamp = BatchStamp { first_offset: first, partition_leader_epoch: 7, log_append_time };
        let next = stamp_batches(&mut owned, stamp);
        assert_eq!(next, first + valid.record_count, "offsets assigned must match the record count");
        let revalidated = validate_batches(&owned, usize::MAX).expect("stamped batches stay valid");
        assert_eq!(revalidated.batch_count, valid.batch_count);
    }
});
