//! Every file and directory name the storage layer uses, built and parsed in
//! one place: segment files (`<20-digit base offset>.log/.index/.timeindex/.txnindex`),
//! producer state snapshots (`<20-digit offset>.snapshot`), the `.deleted` suffix,
//! the cleaner's `.cleaned` and `.swap` suffixes, partition directories (`<topic>-<partition>`) and the
//! `-delete` suffix of directories being removed, topic metadata files,
//! checkpoints, `meta.properties` and the producer id block.

use std::path::{Path, PathBuf};

/// Suffix of a segment's record batches.
pub const LOG_SUFFIX: &str = ".log";
/// Suffix of a segment's offset index.
pub const INDEX_SUFFIX: &str = ".index";
/// Suffix of a segment's time index.
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
/// Suffix of a segment's aborted-transaction index (Kafka's `TransactionIndex`).
pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// Suffix of a producer state snapshot (Kafka's `ProducerStateManager` files).
pub const SNAPSHOT_SUFFIX: &str = ".snapshot";
/// Added to a segment file scheduled for deletion.
pub const DELETED_SUFFIX: &str = ".deleted";
/// Added to a segment file the cleaner is writing (Kafka's `CleanedFileSuffix`):
/// never trusted; recovery deletes it.
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Added to a cleaned segment file once it is complete and durable (Kafka's
/// `SwapFileSuffix`): the swap is decided; recovery completes it.
pub const SWAP_SUFFIX: &str = ".swap";
/// Added to the temporary file of an atomic write.
pub const TMP_SUFFIX: &str = ".tmp";
/// Ends the name of a partition directory being removed.
pub const DELETE_DIR_SUFFIX: &str = "-delete";
/// Directory (under the data dir) of topic metadata files.
pub const TOPICS_DIR: &str = "topics";
/// Checkpoint of each partition's recovery point.
pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
/// Checkpoint of each partition's log start offset.
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
/// Checkpoint of each compacted partition's first dirty offset (Kafka's name).
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";
/// Cluster id and node id of this data directory.
pub const META_PROPERTIES: &str = "meta.properties";
/// The end of the last block of producer ids handed out (Kafka's `ProducerIdManager`).
pub const PRODUCER_ID_BLOCK: &str = "producer-id-block";

/// Which file of a segment a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentFileKind {
    /// `.log`
    Log,
    /// `.index`
    Index,
    /// `.timeindex`
    TimeIndex,
    /// `.txnindex`
    TxnIndex,
}

impl SegmentFileKind {
    fn suffix(self) -> &'static str {
        match self {
            Self::Log => LOG_SUFFIX,
            Self::Index => INDEX_SUFFIX,
            Self::TimeIndex => TIME_INDEX_SUFFIX,
            Self::TxnIndex => TXN_INDEX_SUFFIX,
        }
    }
}

/// `<dir>/<20-digit base offset><suffix>`.
pub fn segment_file(dir: &Path, base_offset: i64, kind: SegmentFileKind) -> PathBuf {
    dir.join(format!("{base_offset:020}{}", kind.suffix()))
}

/// The `.log` file of the segment starting at `base_offset`.
pub fn log_file(dir: &Path, base_offset: i64) -> PathBuf {
    segment_file(dir, base_offset, SegmentFileKind::Log)
}

/// The `.index` file of the segment starting at `base_offset`.
pub fn index_file(dir: &Path, base_offset: i64) -> PathBuf {
    segment_file(dir, base_offset, SegmentFileKind::Index)
}

/// The `.timeindex` file of the segment starting at `base_offset`.
pub fn time_index_file(dir: &Path, base_offset: i64) -> PathBuf {
    segment_file(dir, base_offset, SegmentFileKind::TimeIndex)
}

/// The `.txnindex` file of the segment starting at `base_offset`.
pub fn txn_index_file(dir: &Path, base_offset: i64) -> PathBuf {
    segment_file(dir, base_offset, SegmentFileKind::TxnIndex)
}

/// Parses `<20 digits>.log|.index|.timeindex|.txnindex` into its base offset and kind.
pub fn parse_segment_file_name(name: &str) -> Option<(i64, SegmentFileKind)> {
    for kind in [
        SegmentFileKind::Log,
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::TxnIndex,
    ] {
        if let Some(stem) = name.strip_suffix(kind.suffix()) {
            if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
                return stem.parse().ok().map(|base| (base, kind));
            }
        }
    }
    None
}

/// `<dir>/<20-digit offset>.snapshot`: the producer state of every batch below `offset`.
pub fn snapshot_file(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}{SNAPSHOT_SUFFIX}"))
}

/// Parses `<20 digits>.snapshot` into its offset.
pub fn parse_snapshot_file_name(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(SNAPSHOT_SUFFIX)?;
    if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
        stem.parse().ok()
    } else {
        None
    }
}

/// `path` with `.deleted` appended.
pub fn deleted_file(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(DELETED_SUFFIX);
    PathBuf::from(name)
}

/// `path` with `suffix` appended (`.cleaned`, `.swap`).
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// `path` with `.tmp` appended.
pub fn tmp_file(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(TMP_SUFFIX);
    PathBuf::from(name)
}

/// The directory name of a partition: `<topic>-<partition>`.
pub fn partition_dir_name(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

/// `<data_dir>/<topic>-<partition>`.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(partition_dir_name(topic, partition))
}

/// Splits `<topic>-<partition>` at its last `-`; `None` if the part after it is not a partition number.
pub fn parse_partition_dir_name(name: &str) -> Option<(&str, i32)> {
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((topic, partition.parse().ok()?))
}

/// The name a partition directory gets while it is being removed:
/// `<topic>-<partition>.<unique>-delete`, unique so a topic re-created under
/// the same name never collides with its predecessor's leftovers.
pub fn deleting_dir_name(topic: &str, partition: i32, unique: &str) -> String {
    format!("{topic}-{partition}.{unique}{DELETE_DIR_SUFFIX}")
}

/// Whether a directory name marks a partition being removed.
pub fn is_deleting_dir_name(name: &str) -> bool {
    name.ends_with(DELETE_DIR_SUFFIX) && parse_partition_dir_name(name).is_none()
}

/// `<data_dir>/topics`.
pub fn topics_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(TOPICS_DIR)
}

/// `<data_dir>/topics/<topic>.json`.
pub fn topic_metadata_file(data_dir: &Path, topic: &str) -> PathBuf {
    topics_dir(data_dir).join(format!("{topic}.json"))
}

/// The topic name of a `topics/<topic>.json` file name.
pub fn parse_topic_metadata_file_name(name: &str) -> Option<&str> {
    name.strip_suffix(".json").filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip() {
        let p = log_file(Path::new("/d"), 42);
        assert_eq!(p, Path::new("/d/00000000000000000042.log"));
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(parse_segment_file_name(name), Some((42, SegmentFileKind::Log)));
        assert_eq!(
            parse_segment_file_name("00000000000000000007.timeindex"),
            Some((7, SegmentFileKind::TimeIndex))
        );
        assert_eq!(
            parse_segment_file_name("00000000000000000007.txnindex"),
            Some((7, SegmentFileKind::TxnIndex))
        );
        assert_eq!(
            txn_index_file(Path::new("/d"), 7),
            Path::new("/d/00000000000000000007.txnindex")
        );
        assert_eq!(parse_segment_file_name("00000000000000000007.log.deleted"), None);
        assert_eq!(parse_segment_file_name("0007.log"), None);
        let snap = snapshot_file(Path::new("/d"), 1000);
        assert_eq!(snap, Path::new("/d/00000000000000001000.snapshot"));
        assert_eq!(
            parse_snapshot_file_name(snap.file_name().unwrap().to_str().unwrap()),
            Some(1000)
        );
        assert_eq!(parse_snapshot_file_name("00000000000000001000.snapshot.tmp"), None);
        assert_eq!(parse_segment_file_name("00000000000000001000.snapshot"), None);
        assert_eq!(deleted_file(&p), Path::new("/d/00000000000000000042.log.deleted"));
    }

    #[test]
    fn partition_dir_names() {
        assert_eq!(parse_partition_dir_name("my-topic-12"), Some(("my-topic", 12)));
        assert_eq!(parse_partition_dir_name("topics"), None);
        assert_eq!(parse_partition_dir_name("-1"), None);
        let d = deleting_dir_name("a-b", 3, "abc");
        assert!(is_deleting_dir_name(&d));
        assert!(!is_deleting_dir_name("a-3"));
    }
}
