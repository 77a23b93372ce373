//! A byte range of an open file: what a zero-copy transfer sends.

use std::fs::File;
use std::sync::Arc;

/// `len` bytes of `file` starting at `position`.
///
/// The file is shared: holding a region keeps the file descriptor open, so a
/// segment deleted by retention while a response is in flight is still
/// readable until the response has been written (unlinked files stay
/// readable through open descriptors).
#[derive(Debug, Clone)]
pub struct FileRegion {
    /// The open file, usually a segment's `.log`.
    pub file: Arc<File>,
    /// Byte position of the first byte of the range.
    pub position: u64,
    /// Length of the range in bytes.
    pub len: u32,
}

impl FileRegion {
    /// Reads the region into memory: the copying path, and tests.
    ///
    /// # Errors
    /// Any error of `pread(2)`, or `UnexpectedEof` if the file is shorter than the region.
    pub fn read_to_vec(&self) -> std::io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; self.len as usize];
        self.file.read_exact_at(&mut buf, self.position)?;
        Ok(buf)
    }
}
