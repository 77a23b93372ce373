//! Record batch v2 parsing on arbitrary bytes: Produce validation
//! (`validate_batches`), the header walk storage recovery uses (`BatchIter`,
//! `verify_crc`) and the in-place rewrites of an accepted append
//! (`assign_offsets`, LogAppendTime, leader epoch). Nothing may panic, and
//! the three views must agree on what they accept.
#![no_main]

use floe_protocol::record_batch::{
    assign_offsets, set_log_append_time, set_partition_leader_epoch, validate_batches, verify_crc, BatchIter,
};
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

    // An accepted append: offsets assigned from any base, then the rewrites.
    let mut owned = data.to_vec();
    let first = 1_000;
    let next = assign_offsets(&mut owned, first);
    assert_eq!(next, first + valid.record_count, "offsets assigned must match the record count");
    set_partition_leader_epoch(&mut owned, 7);
    set_log_append_time(&mut owned, 1_700_000_000_000);
    let revalidated = validate_batches(&owned, usize::MAX).expect("rewritten batches stay valid");
    assert_eq!(revalidated.batch_count, valid.batch_count);
});
