//! What a leader knows of its followers, and the decisions made from it (Kafka's
//! `Replica` fetch state and `Partition.maybeIncrementLeaderHW` / `maybeShrinkIsr` /
//! `maybeExpandIsr`): the high watermark is the lowest log end offset in the ISR; a
//! follower that has not caught up for `replica.lag.time.max.ms` leaves the ISR; one
//! that reached the high watermark (in the current leader epoch) joins it.
//!
//! Pure functions over plain values, so that every rule has a unit test.

/// A follower as the leader sees it through its fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// The follower's log end offset: its last fetch offset (-1 before its first
    /// fetch to this leader).
    pub log_end_offset: i64,
    /// When it was last known to have everything the leader had.
    pub last_caught_up_ms: i64,
    last_fetch_ms: i64,
    last_fetch_leader_log_end: i64,
}

impl FollowerState {
    /// A follower that has not fetched yet: counted caught up as of `now_ms`, so that
    /// it has `replica.lag.time.max.ms` to start fetching before it leaves the ISR
    /// (as Kafka resets followers when a broker becomes leader).
    pub fn new(now_ms: i64) -> Self {
        Self {
            log_end_offset: -1,
            last_caught_up_ms: now_ms,
            last_fetch_ms: -1,
            last_fetch_leader_log_end: -1,
        }
    }

    /// Records a fetch from `fetch_offset` made when the leader's log ended at
    /// `leader_log_end` (Kafka's `Replica.updateFetchStateOrThrow`): caught up now if
    /// it asked for the leader's end, or as of its previous fetch if it has what the
    /// leader had then.
    pub fn record_fetch(&mut self, fetch_offset: i64, leader_log_end: i64, now_ms: i64) {
        if fetch_offset >= leader_log_end {
            self.last_caught_up_ms = self.last_caught_up_ms.max(now_ms);
        } else if self.last_fetch_leader_log_end >= 0
            && fetch_offset >= self.last_fetch_leader_log_end
        {
            self.last_caught_up_ms = self.last_caught_up_ms.max(self.last_fetch_ms);
        }
        self.log_end_offset = fetch_offset;
        self.last_fetch_leader_log_end = leader_log_end;
        self.last_fetch_ms = now_ms;
    }

    /// Kafka's `isCaughtUp`: at the leader's end, or caught up within `lag_max_ms`.
    pub fn is_caught_up(&self, leader_log_end: i64, now_ms: i64, lag_max_ms: i64) -> bool {
        self.log_end_offset == leader_log_end || now_ms - self.last_caught_up_ms <= lag_max_ms
    }
}

/// The high watermark: the lowest log end offset of the leader and its in-sync
/// followers (`None` for a follower of the ISR with no state, which holds it back).
pub fn high_watermark<'a>(
    leader_log_end: i64,
    isr_followers: impl IntoIterator<Item = Option<&'a FollowerState>>,
) -> i64 {
    isr_followers
        .into_iter()
        .fold(leader_log_end, |hw, f| hw.min(f.map_or(-1, |f| f.log_end_offset)))
}

/// The ISR without the followers that have not caught up for `lag_max_ms` (the
/// leader itself always stays). Equal to `isr` when nobody is lagging.
pub fn shrunk_isr(
    isr: &[i32],
    leader: i32,
    follower: impl Fn(i32) -> Option<FollowerState>,
    leader_log_end: i64,
    now_ms: i64,
    lag_max_ms: i64,
) -> Vec<i32> {
    isr.iter()
        .copied()
        .filter(|&r| {
            r == leader
                || follower(r).is_some_and(|f| f.is_caught_up(leader_log_end, now_ms, lag_max_ms))
        })
        .collect()
}

/// Whether a follower outside the ISR may join it (Kafka's `isFollowerInSync`): it
/// has everything below the high watermark, and has fetched into the current leader
/// epoch (its log end is at least where the epoch began), so it cannot hold a
/// divergent tail of an older epoch.
pub fn may_join_isr(
    follower: &FollowerState,
    high_watermark: i64,
    epoch_start_offset: i64,
) -> bool {
    follower.log_end_offset >= high_watermark && follower.log_end_offset >= epoch_start_offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_at_the_leaders_end_is_caught_up_now() {
        let mut f = FollowerState::new(0);
        f.record_fetch(100, 100, 5_000);
        assert_eq!((f.log_end_offset, f.last_caught_up_ms), (100, 5_000));
        assert!(f.is_caught_up(100, 60_000, 30_000), "at the leader's end");
        assert!(!f.is_caught_up(150, 60_000, 30_000), "behind, and caught up too long ago");
    }

    #[test]
    fn a_follower_that_has_what_the_leader_had_at_its_last_fetch_was_caught_up_then() {
        let mut f = FollowerState::new(0);
        f.record_fetch(90, 100, 1_000); // behind
        f.record_fetch(100, 120, 2_000); // has what the leader had at 1_000
        assert_eq!(f.last_caught_up_ms, 1_000);
        f.record_fetch(110, 140, 3_000); // not what the leader had at 2_000
        assert_eq!(f.last_caught_up_ms, 1_000);
    }

    #[test]
    fn the_high_watermark_is_the_lowest_log_end_in_the_isr() {
        let a = FollowerState { log_end_offset: 40, ..FollowerState::new(0) };
        let b = FollowerState { log_end_offset: 55, ..FollowerState::new(0) };
        assert_eq!(high_watermark(60, [Some(&a), Some(&b)]), 40);
        assert_eq!(high_watermark(60, []), 60, "alone in the ISR: the leader's end");
        assert_eq!(
            high_watermark(60, [Some(&b), None]),
            -1,
            "a member that has not fetched holds it back"
        );
    }

    #[test]
    fn lagging_followers_leave_the_isr_but_the_leader_stays() {
        let fresh = FollowerState {
            log_end_offset: 10,
            last_caught_up_ms: 50_000,
            ..FollowerState::new(0)
        };
        let stale =
            FollowerState { log_end_offset: 10, last_caught_up_ms: 1_000, ..FollowerState::new(0) };
        let state = |r: i32| match r {
            2 => Some(fresh),
            3 => Some(stale),
            _ => None,
        };
        assert_eq!(shrunk_isr(&[1, 2, 3], 1, state, 20, 60_000, 30_000), vec![1, 2]);
        assert_eq!(
            shrunk_isr(&[1, 2, 3, 4], 1, state, 20, 60_000, 30_000),
            vec![1, 2],
            "no state: out"
        );
        assert_eq!(
            shrunk_isr(&[1, 3], 1, state, 10, 60_000, 30_000),
            vec![1, 3],
            "at the leader's end: in"
        );
    }

    #[test]
    fn a_follower_joins_once_it_reaches_the_high_watermark_in_this_epoch() {
        let f = FollowerState { log_end_offset: 50, ..FollowerState::new(0) };
        assert!(may_join_isr(&f, 50, 40));
        assert!(!may_join_isr(&f, 51, 40), "below the high watermark");
        assert!(!may_join_isr(&f, 30, 60), "not yet into the current epoch");
    }
}
