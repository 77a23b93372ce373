//! A follower's replica fetchers (placeholder until written).
