//! Which partition of an internal topic coordinates a key, and the coordinators of
//! every partition.
//!
//! Kafka maps a group id to `__consumer_offsets` partition
//! `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`, and a transactional
//! id to its `__transaction_state` partition the same way: Java's `String.hashCode`
//! over UTF-16 code units with wrapping `i32` arithmetic, and an `abs` that maps
//! `Integer.MIN_VALUE` to 0. Clients never compute it (FindCoordinator answers
//! with the partition's leader), but the records must land where a Kafka broker
//! reading the same topic would look for them.
//!
//! [`Partitioned`] holds one coordinator per partition, each with its own term, log
//! and state, so a partition's leadership moves (and is fenced) on its own. The count
//! in force is the topic's own once it exists (Kafka's rule: the setting only applies
//! when the topic is created).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

/// Kafka's `Utils.abs`: the absolute value, with `i32::MIN` mapped to 0.
pub fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN {
        0
    } else {
        n.abs()
    }
}

/// The partition of a topic of `count` partitions that coordinates `key`.
pub fn partition_for(key: &str, count: i32) -> i32 {
    kafka_abs(java_string_hash(key)) % count.max(1)
}

/// Builds the coordinator of one partition.
pub type Factory<C> = Box<dyn Fn(i32) -> std::io::Result<Arc<C>> + Send + Sync>;

/// One coordinator per partition of an internal topic (see the module doc).
pub struct Partitioned<C> {
    topic: &'static str,
    /// The partition count keys are mapped with.
    count: AtomicI32,
    /// Index = partition; at least `count` of them.
    instances: RwLock<Vec<Arc<C>>>,
    make: Factory<C>,
}

impl<C> std::fmt::Debug for Partitioned<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitioned")
            .field("topic", &self.topic)
            .field("count", &self.partition_count())
            .finish_non_exhaustive()
    }
}

impl<C> Partitioned<C> {
    /// The coordinators of `count` partitions of `topic`, built by `make`.
    ///
    /// # Errors
    /// If `make` fails (a coordinator's writer thread cannot be started).
    pub fn new(topic: &'static str, count: i32, make: Factory<C>) -> std::io::Result<Self> {
        let this =
            Self { topic, count: AtomicI32::new(0), instances: RwLock::new(Vec::new()), make };
        this.grow(count.max(1))?;
        this.count.store(count.max(1), Ordering::Release);
        Ok(this)
    }

    fn grow(&self, count: i32) -> std::io::Result<()> {
        let mut instances = self.instances.write().unwrap_or_else(PoisonError::into_inner);
        while (instances.len() as i32) < count {
            let partition = instances.len() as i32;
            instances.push((self.make)(partition)?);
        }
        Ok(())
    }

    /// The topic's partition count keys are mapped with.
    pub fn partition_count(&self) -> i32 {
        self.count.load(Ordering::Acquire)
    }

    /// Maps keys with `count` partitions from now on: the topic's actual count (in a
    /// cluster, once it exists in the cluster's metadata). Builds the missing coordinators.
    pub fn set_partition_count(&self, count: i32) {
        let count = count.max(1);
        let previous = self.partition_count();
        if previous == count {
            return;
        }
        if let Err(e) = self.grow(count) {
            tracing::error!(topic = self.topic, count, error = %e, "cannot start the coordinators of the topic's partitions");
            return;
        }
        self.count.store(count, Ordering::Release);
        tracing::info!(
            topic = self.topic,
            previous,
            count,
            "coordinating over the topic's actual partition count"
        );
    }

    /// The partition that coordinates `key`.
    pub fn partition_of(&self, key: &str) -> i32 {
        partition_for(key, self.partition_count())
    }

    /// The coordinator of `partition`, if it is one of the topic's.
    pub fn partition(&self, partition: i32) -> Option<Arc<C>> {
        let instances = self.instances.read().unwrap_or_else(PoisonError::into_inner);
        usize::try_from(partition).ok().and_then(|p| instances.get(p)).cloned()
    }

    /// The coordinator of `key`'s partition.
    pub fn of(&self, key: &str) -> Arc<C> {
        let instances = self.instances.read().unwrap_or_else(PoisonError::into_inner);
        // `count` never exceeds the instances built (grown before it is raised).
        let p = (self.partition_of(key) as usize).min(instances.len().saturating_sub(1));
        instances[p].clone()
    }

    /// Every partition's coordinator (including any beyond the count in force), in partition order.
    pub fn all(&self) -> Vec<Arc<C>> {
        self.instances.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// The partition count to coordinate with: the topic's if it exists, else the
/// setting; logged at info when they disagree (Kafka's rule).
pub fn effective_count(topic: &str, configured: i32, existing: Option<i32>) -> i32 {
    match existing {
        Some(actual) if actual != configured => {
            tracing::info!(topic, configured, actual, "the topic exists with another partition count than configured: its own count is used");
            actual
        }
        Some(actual) => actual,
        None => configured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_codes() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99162322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(java_string_hash("Hello World"), -862545276);
        // UTF-16 code units: a character outside the BMP is a surrogate pair.
        assert_eq!(java_string_hash("é"), 233);
        assert_eq!(java_string_hash("😀"), 0xD83D * 31 + 0xDE00);
    }

    #[test]
    fn partitions_as_kafka() {
        assert_eq!(kafka_abs(i32::MIN), 0);
        assert_eq!(kafka_abs(-5), 5);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("hello", 50), 99162322 % 50);
        assert_eq!(partition_for("Hello World", 50), 862545276 % 50);
        assert_eq!(partition_for("anything", 1), 0);
    }

    #[test]
    fn routes_by_key_and_grows() {
        let p = Partitioned::<i32>::new("t", 2, Box::new(|p| Ok(Arc::new(p)))).expect("built");
        assert_eq!(*p.of("hello"), partition_for("hello", 2));
        p.set_partition_count(5);
        assert_eq!(p.all().len(), 5);
        assert_eq!(*p.of("hello"), partition_for("hello", 5));
        assert!(p.partition(5).is_none());
        p.set_partition_count(3);
        assert_eq!(p.all().len(), 5);
        assert_eq!(*p.of("hello"), partition_for("hello", 3));
    }
}
