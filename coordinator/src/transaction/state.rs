//! `TransactionState`: the states of one transactional id, with Kafka's
//! names, their byte in `__transaction_state`, and which state may follow
//! which (Kafka's `TransactionState.validPreviousStates`).
//!
//! ```text
//!            AddPartitions              EndTxn(commit)          markers written
//!   Empty ───────────────► Ongoing ───────────────► PrepareCommit ─────────► CompleteCommit
//!     ▲                     │  ▲ │ EndTxn(abort),                                │
//!     │ InitProducerId      │  │ │ timeout                                        │
//!     │                     │  │ ▼                  markers written             │
//!     └─────────────────────┘  │ PrepareAbort ───────────────────────────► CompleteAbort
//!                              │      ▲                                         │
//!                              │      └── PrepareEpochFence (InitProducerId     │
//!                              │          while Ongoing: the old epoch aborts)  │
//!                              └──────────── AddPartitions ─────────────────────┘
//! ```
//! `Dead` is a transactional id removed after `transactional.id.expiration.ms`.

/// The state of a transactional id (Kafka's `TransactionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TransactionState {
    /// No transaction in progress (after InitProducerId).
    Empty,
    /// Partitions were added; records may be produced.
    Ongoing,
    /// The commit is decided and durable; markers are being written.
    PrepareCommit,
    /// The abort is decided and durable; markers are being written.
    PrepareAbort,
    /// Every partition has its commit marker.
    CompleteCommit,
    /// Every partition has its abort marker.
    CompleteAbort,
    /// The id expired and is being removed.
    Dead,
    /// A new producer instance took the id while a transaction was ongoing:
    /// the epoch is bumped and that transaction will be aborted.
    PrepareEpochFence,
}

impl TransactionState {
    /// The state's byte in a `__transaction_state` value (Kafka's ids).
    pub fn id(self) -> i8 {
        match self {
            Self::Empty => 0,
            Self::Ongoing => 1,
            Self::PrepareCommit => 2,
            Self::PrepareAbort => 3,
            Self::CompleteCommit => 4,
            Self::CompleteAbort => 5,
            Self::Dead => 6,
            Self::PrepareEpochFence => 7,
        }
    }

    /// The state of a stored byte; `None` for an unknown one.
    pub fn from_id(id: i8) -> Option<Self> {
        Some(match id {
            0 => Self::Empty,
            1 => Self::Ongoing,
            2 => Self::PrepareCommit,
            3 => Self::PrepareAbort,
            4 => Self::CompleteCommit,
            5 => Self::CompleteAbort,
            6 => Self::Dead,
            7 => Self::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's name, as DescribeTransactions and ListTransactions report it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Ongoing => "Ongoing",
            Self::PrepareCommit => "PrepareCommit",
            Self::PrepareAbort => "PrepareAbort",
            Self::CompleteCommit => "CompleteCommit",
            Self::CompleteAbort => "CompleteAbort",
            Self::Dead => "Dead",
            Self::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state named `name` (ListTransactions' state filter).
    pub fn from_name(name: &str) -> Option<Self> {
        ALL.iter().copied().find(|s| s.name() == name)
    }

    /// Whether a transaction may move from `self` to `next`.
    pub fn may_become(self, next: TransactionState) -> bool {
        use TransactionState::*;
        let allowed: &[TransactionState] = match next {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        };
        allowed.contains(&self)
    }

    /// A decision was made and its markers may not all be written yet.
    pub fn is_prepared(self) -> bool {
        matches!(self, Self::PrepareCommit | Self::PrepareAbort)
    }

    /// No transaction is open: a new one may begin.
    pub fn is_idle(self) -> bool {
        matches!(self, Self::Empty | Self::CompleteCommit | Self::CompleteAbort)
    }
}

/// Every state, in id order.
pub const ALL: [TransactionState; 8] = [
    TransactionState::Empty,
    TransactionState::Ongoing,
    TransactionState::PrepareCommit,
    TransactionState::PrepareAbort,
    TransactionState::CompleteCommit,
    TransactionState::CompleteAbort,
    TransactionState::Dead,
    TransactionState::PrepareEpochFence,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for s in ALL {
            assert_eq!(TransactionState::from_id(s.id()), Some(s));
            assert_eq!(TransactionState::from_name(s.name()), Some(s));
        }
        assert_eq!(TransactionState::from_id(8), None);
    }

    #[test]
    fn a_commit_must_pass_through_prepare() {
        use TransactionState::*;
        assert!(Ongoing.may_become(PrepareCommit));
        assert!(!Ongoing.may_become(CompleteCommit));
        assert!(!Empty.may_become(PrepareCommit));
        assert!(PrepareCommit.may_become(CompleteCommit));
        assert!(!PrepareCommit.may_become(CompleteAbort));
        assert!(PrepareEpochFence.may_become(PrepareAbort));
    }
}
