//! `LogDirFailureChannel`: takes a log directory offline after an I/O error
//! that leaves its on-disk state in doubt, as Kafka's channel of the same
//! name does.
//!
//! Why offline rather than retry: after a failed `fdatasync` the kernel may
//! already have dropped the dirty pages (and cleared the error), so a retry
//! can "succeed" without the data ever reaching the disk; an idempotent
//! producer's retry would then be answered as a duplicate and acknowledged.
//! Once offline, every append, read and offset lookup on the directory fails
//! with [`StorageError::LogDirOffline`] (KAFKA_STORAGE_ERROR), no checkpoint
//! is written, and recovery is a restart, which rescans everything above the
//! recovery point.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use tracing::error;

use crate::error::StorageError;

/// Called once when the directory goes offline (the broker sets a metric).
pub type OfflineListener = Box<dyn Fn(&Path) + Send + Sync>;

/// The offline state of one log directory, shared by its partition logs.
///
/// # Thread-safety
/// `Send + Sync`; going offline is one-way and happens once.
pub struct LogDirFailureChannel {
    dir: PathBuf,
    /// The error that took the directory offline.
    offline: OnceLock<String>,
    listener: Mutex<Option<OfflineListener>>,
}

impl std::fmt::Debug for LogDirFailureChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogDirFailureChannel")
            .field("dir", &self.dir)
            .field("offline", &self.offline.get())
            .finish()
    }
}

impl LogDirFailureChannel {
    /// An online directory.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), offline: OnceLock::new(), listener: Mutex::new(None) }
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The error that took the directory offline, if it is.
    pub fn offline_reason(&self) -> Option<&str> {
        self.offline.get().map(String::as_str)
    }

    /// Whether the directory is offline.
    pub fn is_offline(&self) -> bool {
        self.offline.get().is_some()
    }

    /// Takes the directory offline because of `cause` (an error with its path
    /// and errno). The first call logs at error level and tells the listener;
    /// later ones do nothing.
    pub fn mark_offline(&self, cause: &StorageError) {
        let reason = cause.to_string();
        if self.offline.set(reason).is_err() {
            return;
        }
        let errno = match cause {
            StorageError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        };
        error!(log_dir = %self.dir.display(), error = %cause, errno = ?errno,
            "LOG DIRECTORY OFFLINE: an I/O error left its state in doubt; every produce, fetch and \
             offset lookup on it now fails with KAFKA_STORAGE_ERROR until the broker restarts");
        let listener = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = listener.as_ref() {
            f(&self.dir);
        }
    }

    /// Registers the function told when the directory goes offline; called at
    /// once if it already is.
    pub fn on_offline(&self, f: OfflineListener) {
        let mut listener = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_offline() {
            f(&self.dir);
        }
        *listener = Some(f);
    }

    /// `Err(LogDirOffline)` once the directory is offline.
    ///
    /// # Errors
    /// [`StorageError::LogDirOffline`].
    pub fn check(&self) -> Result<(), StorageError> {
        match self.offline.get() {
            None => Ok(()),
            Some(reason) => {
                Err(StorageError::LogDirOffline { dir: self.dir.clone(), reason: reason.clone() })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn goes_offline_once_and_tells_the_listener() {
        let ch = LogDirFailureChannel::new("/data");
        let told = Arc::new(AtomicUsize::new(0));
        let t = told.clone();
        ch.on_offline(Box::new(move |_| {
            t.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(ch.check().is_ok());
        let cause = StorageError::Io {
            context: "fsync",
            path: "/data/t-0/0.log".into(),
            source: std::io::Error::from_raw_os_error(5),
        };
        ch.mark_offline(&cause);
        ch.mark_offline(&cause);
        assert_eq!(told.load(Ordering::SeqCst), 1);
        assert!(matches!(ch.check(), Err(StorageError::LogDirOffline { .. })));
    }
}
