//! The simulated disk: every inode's current state and the state a power cut
//! would leave behind, kept apart.
//!
//! The model is the strict reading of POSIX that crash-consistency work
//! assumes, not what ext4 `data=ordered` happens to give:
//! - a file's bytes and length become durable only when that file is fsynced
//!   (`fsync` or `fdatasync`: metadata other than the length is not modelled);
//! - a directory's entries (creates, unlinks, renames, mkdirs) become durable
//!   only when that directory is fsynced. Fsyncing a file does not make its
//!   name durable, and a rename between two directories is durable in each
//!   directory only once that directory is fsynced;
//! - [`Disk::power_cut`] reverts every inode to its durable state and drops
//!   the inodes no durable entry reaches from the root.
//! - [`Disk::persist_some`], called before a cut, first lets a random part of
//!   the unsynced changes reach the "disk", as a real one may have written
//!   some of its cache before the power went: each 4 KiB page of a file's
//!   unsynced bytes independently, the file's length as either the old or the
//!   new one (a longer length without its pages reads as zeros), and each
//!   changed directory entry independently.
//!
//! Everything lives in memory; the FUSE adapter (`fs.rs`) is a thin layer
//! over this, so the model is tested here without a mount.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

/// The root directory's inode number (FUSE's).
pub const ROOT: u64 = 1;

/// The unit in which [`Disk::persist_some`] lets unsynced bytes through.
const PAGE: usize = 4096;

/// A small seeded generator (xorshift64): the rig needs replayable coin flips, not quality.
struct XorShift(u64);

impl XorShift {
    fn coin(&mut self) -> bool {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 & 1 == 1
    }
}

/// Why an operation failed; each maps to one errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsError {
    NotFound,
    Exists,
    NotDir,
    IsDir,
    NotEmpty,
    Invalid,
}

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// The attributes the FUSE adapter reports.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub perm: u16,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

/// What a power cut threw away.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CutReport {
    /// Files whose current bytes differed from their durable bytes.
    pub files_reverted: u64,
    /// Bytes of those files' current contents beyond their durable length.
    pub bytes_dropped: u64,
    /// Directories whose current entries differed from their durable entries.
    pub dirs_reverted: u64,
    /// Inodes no durable entry reached (created and never made durable, or durably unlinked).
    pub inodes_dropped: u64,
    /// Current paths of the reverted files and directories (for the log; an
    /// unlinked file shows as `<unlinked N>`).
    pub reverted: Vec<String>,
}

/// Counters of the sync calls served, for the test's log.
#[derive(Debug, Default, Clone, Copy)]
pub struct SyncCounts {
    pub file_syncs: u64,
    pub dir_syncs: u64,
}

#[derive(Debug)]
struct FileBody {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Byte range `[lo, hi)` outside which `data` and `durable` agree (up to
    /// the shorter length), so an fsync copies only what changed.
    dirty: Option<(usize, usize)>,
}

impl FileBody {
    fn mark(&mut self, lo: usize, hi: usize) {
        self.dirty = Some(match self.dirty {
            Some((a, b)) => (a.min(lo), b.max(hi)),
            None => (lo, hi),
        });
    }
}

#[derive(Debug)]
struct DirBody {
    entries: BTreeMap<OsString, u64>,
    durable: BTreeMap<OsString, u64>,
    /// For `..` and for refusing to move a directory under itself.
    parent: u64,
}

#[derive(Debug)]
enum Body {
    File(FileBody),
    Dir(DirBody),
}

#[derive(Debug)]
struct Inode {
    body: Body,
    perm: u16,
    mtime: SystemTime,
    ctime: SystemTime,
}

impl Inode {
    fn new(body: Body, perm: u16) -> Self {
        let now = SystemTime::now();
        Self { body, perm, mtime: now, ctime: now }
    }

    fn kind(&self) -> Kind {
        match self.body {
            Body::File(_) => Kind::File,
            Body::Dir(_) => Kind::Dir,
        }
    }

    fn touch(&mut self) {
        let now = SystemTime::now();
        self.mtime = now;
        self.ctime = now;
    }
}

/// The whole filesystem. Not thread-safe by itself: the adapter holds it in a mutex.
/// Inode numbers are never reused (a power cut keeps the survivors' numbers),
/// so a generation of 0 is always right.
#[derive(Debug)]
pub struct Disk {
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    syncs: SyncCounts,
}

impl Default for Disk {
    fn default() -> Self {
        Self::new()
    }
}

impl Disk {
    /// An empty filesystem: a root directory, durable from the start (as a
    /// freshly made filesystem's root is).
    pub fn new() -> Self {
        let root = DirBody { entries: BTreeMap::new(), durable: BTreeMap::new(), parent: ROOT };
        let mut inodes = HashMap::new();
        inodes.insert(ROOT, Inode::new(Body::Dir(root), 0o755));
        Self { inodes, next_ino: ROOT + 1, syncs: SyncCounts::default() }
    }

    pub fn syncs(&self) -> SyncCounts {
        self.syncs
    }

    fn inode(&self, ino: u64) -> Result<&Inode, FsError> {
        self.inodes.get(&ino).ok_or(FsError::NotFound)
    }

    fn inode_mut(&mut self, ino: u64) -> Result<&mut Inode, FsError> {
        self.inodes.get_mut(&ino).ok_or(FsError::NotFound)
    }

    fn dir(&self, ino: u64) -> Result<&DirBody, FsError> {
        match &self.inode(ino)?.body {
            Body::Dir(d) => Ok(d),
            Body::File(_) => Err(FsError::NotDir),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut DirBody, FsError> {
        match &mut self.inode_mut(ino)?.body {
            Body::Dir(d) => Ok(d),
            Body::File(_) => Err(FsError::NotDir),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Result<&mut FileBody, FsError> {
        match &mut self.inode_mut(ino)?.body {
            Body::File(f) => Ok(f),
            Body::Dir(_) => Err(FsError::IsDir),
        }
    }

    /// The attributes of an inode.
    ///
    /// # Errors
    /// [`FsError::NotFound`] for an unknown inode.
    pub fn attr(&self, ino: u64) -> Result<Attr, FsError> {
        let i = self.inode(ino)?;
        let size = match &i.body {
            Body::File(f) => f.data.len() as u64,
            Body::Dir(d) => d.entries.len() as u64,
        };
        Ok(Attr { ino, kind: i.kind(), size, perm: i.perm, mtime: i.mtime, ctime: i.ctime })
    }

    /// The inode `name` names in directory `parent`.
    ///
    /// # Errors
    /// [`FsError::NotFound`], or [`FsError::NotDir`] if `parent` is a file.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<u64, FsError> {
        let d = self.dir(parent)?;
        if name == "." {
            return Ok(parent);
        }
        if name == ".." {
            return Ok(d.parent);
        }
        d.entries.get(name).copied().ok_or(FsError::NotFound)
    }

    /// Creates a file or directory `name` in `parent`; the new entry is not durable.
    ///
    /// # Errors
    /// [`FsError::Exists`] if the name is taken; [`FsError::NotDir`]/[`FsError::NotFound`] for a bad parent.
    pub fn create(
        &mut self,
        parent: u64,
        name: &OsStr,
        kind: Kind,
        perm: u16,
    ) -> Result<u64, FsError> {
        if name == "." || name == ".." {
            return Err(FsError::Exists);
        }
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(FsError::Exists);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let body = match kind {
            Kind::File => {
                Body::File(FileBody { data: Vec::new(), durable: Vec::new(), dirty: None })
            }
            Kind::Dir => {
                Body::Dir(DirBody { entries: BTreeMap::new(), durable: BTreeMap::new(), parent })
            }
        };
        self.inodes.insert(ino, Inode::new(body, perm));
        self.dir_mut(parent)?.entries.insert(name.to_owned(), ino);
        self.inode_mut(parent)?.touch();
        Ok(ino)
    }

    /// Removes a file's entry (`want_dir` false) or an empty directory (`want_dir` true).
    /// The inode stays readable through open handles (we never free inodes before a cut).
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::IsDir`]/[`FsError::NotDir`] for the wrong kind, [`FsError::NotEmpty`].
    pub fn remove(&mut self, parent: u64, name: &OsStr, want_dir: bool) -> Result<(), FsError> {
        let ino = self.lookup(parent, name)?;
        if name == "." || name == ".." {
            return Err(FsError::Invalid);
        }
        match (&self.inode(ino)?.body, want_dir) {
            (Body::Dir(_), false) => return Err(FsError::IsDir),
            (Body::File(_), true) => return Err(FsError::NotDir),
            (Body::Dir(d), true) if !d.entries.is_empty() => return Err(FsError::NotEmpty),
            _ => {}
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.inode_mut(parent)?.touch();
        Ok(())
    }

    /// Moves `name` in `parent` to `new_name` in `new_parent`, replacing a file
    /// (or an empty directory, when a directory moves) that is there. With
    /// `no_replace`, an existing target is an error.
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::Exists`] (no_replace), [`FsError::IsDir`]/[`FsError::NotDir`]
    /// for mismatched kinds, [`FsError::NotEmpty`], [`FsError::Invalid`] for moving a directory under itself.
    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        no_replace: bool,
    ) -> Result<(), FsError> {
        let ino = self.lookup(parent, name)?;
        self.dir(new_parent)?;
        if [name, new_name].iter().any(|n| *n == "." || *n == "..") {
            return Err(FsError::Invalid);
        }
        let moving_dir = self.inode(ino)?.kind() == Kind::Dir;
        if moving_dir {
            // Walk up from the new parent: it must not be the moved directory or inside it.
            let mut at = new_parent;
            loop {
                if at == ino {
                    return Err(FsError::Invalid);
                }
                if at == ROOT {
                    break;
                }
                at = self.dir(at)?.parent;
            }
        }
        if let Some(&target) = self.dir(new_parent)?.entries.get(new_name) {
            if target == ino {
                return Ok(());
            }
            if no_replace {
                return Err(FsError::Exists);
            }
            match (&self.inode(target)?.body, moving_dir) {
                (Body::Dir(_), false) => return Err(FsError::IsDir),
                (Body::File(_), true) => return Err(FsError::NotDir),
                (Body::Dir(d), true) if !d.entries.is_empty() => return Err(FsError::NotEmpty),
                _ => {}
            }
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.dir_mut(new_parent)?.entries.insert(new_name.to_owned(), ino);
        if moving_dir {
            self.dir_mut(ino)?.parent = new_parent;
        }
        self.inode_mut(parent)?.touch();
        self.inode_mut(new_parent)?.touch();
        Ok(())
    }

    /// Up to `size` bytes of a file from `offset`.
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::IsDir`].
    pub fn read(&mut self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let f = self.file_mut(ino)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(f.data.len());
        let end = start.saturating_add(size as usize).min(f.data.len());
        Ok(f.data[start..end].to_vec())
    }

    /// Writes `bytes` at `offset`, zero-filling any gap past the end. Not durable.
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::IsDir`], [`FsError::Invalid`] for an offset past memory.
    pub fn write(&mut self, ino: u64, offset: u64, bytes: &[u8]) -> Result<usize, FsError> {
        let f = self.file_mut(ino)?;
        let start = usize::try_from(offset).map_err(|_| FsError::Invalid)?;
        let end = start.checked_add(bytes.len()).ok_or(FsError::Invalid)?;
        let old_len = f.data.len();
        if end > old_len {
            f.data.resize(end, 0);
        }
        f.data[start..end].copy_from_slice(bytes);
        f.mark(start.min(old_len), end);
        self.inode_mut(ino)?.touch();
        Ok(bytes.len())
    }

    /// Sets a file's length (shrinking or zero-extending). Not durable.
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::IsDir`], [`FsError::Invalid`] for a size past memory.
    pub fn truncate(&mut self, ino: u64, size: u64) -> Result<(), FsError> {
        let f = self.file_mut(ino)?;
        let new_len = usize::try_from(size).map_err(|_| FsError::Invalid)?;
        let old_len = f.data.len();
        f.data.resize(new_len, 0);
        f.mark(old_len.min(new_len), old_len.max(new_len));
        self.inode_mut(ino)?.touch();
        Ok(())
    }

    /// Sets permission bits (not part of the durability model).
    ///
    /// # Errors
    /// [`FsError::NotFound`].
    pub fn set_perm(&mut self, ino: u64, perm: u16) -> Result<(), FsError> {
        let i = self.inode_mut(ino)?;
        i.perm = perm & 0o7777;
        i.ctime = SystemTime::now();
        Ok(())
    }

    /// Sets the modification time.
    ///
    /// # Errors
    /// [`FsError::NotFound`].
    pub fn set_mtime(&mut self, ino: u64, mtime: SystemTime) -> Result<(), FsError> {
        self.inode_mut(ino)?.mtime = mtime;
        Ok(())
    }

    /// `fsync`/`fdatasync` on a file: its bytes and length become durable.
    /// On a directory it does what [`Disk::sync_dir`] does (Linux sends
    /// FSYNCDIR for directories, but be liberal).
    ///
    /// # Errors
    /// [`FsError::NotFound`].
    pub fn sync_file(&mut self, ino: u64) -> Result<(), FsError> {
        if self.inode(ino)?.kind() == Kind::Dir {
            return self.sync_dir(ino);
        }
        self.syncs.file_syncs += 1;
        let f = self.file_mut(ino)?;
        if let Some((lo, hi)) = f.dirty.take() {
            let len = f.data.len();
            f.durable.resize(len, 0);
            let hi = hi.min(len);
            if lo < hi {
                f.durable[lo..hi].copy_from_slice(&f.data[lo..hi]);
            }
        }
        Ok(())
    }

    /// `fsync` on a directory: its current entries become its durable entries.
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::NotDir`].
    pub fn sync_dir(&mut self, ino: u64) -> Result<(), FsError> {
        self.syncs.dir_syncs += 1;
        let d = self.dir_mut(ino)?;
        d.durable.clone_from(&d.entries);
        Ok(())
    }

    /// A directory's entries (without `.` and `..`), by name.
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::NotDir`].
    pub fn entries(&self, ino: u64) -> Result<Vec<(OsString, u64, Kind)>, FsError> {
        let d = self.dir(ino)?;
        d.entries.iter().map(|(n, &i)| Ok((n.clone(), i, self.inode(i)?.kind()))).collect()
    }

    /// The directory's parent (for `..`).
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::NotDir`].
    pub fn parent(&self, ino: u64) -> Result<u64, FsError> {
        Ok(self.dir(ino)?.parent)
    }

    /// Makes a random part of the unsynced changes durable (seeded, so a
    /// failing schedule replays); see the module docs for the granularity.
    pub fn persist_some(&mut self, seed: u64) {
        let mut rng = XorShift(seed.max(1));
        for inode in self.inodes.values_mut() {
            match &mut inode.body {
                Body::File(f) => {
                    let Some((lo, hi)) = f.dirty else { continue };
                    let len = if rng.coin() { f.data.len() } else { f.durable.len() };
                    f.durable.resize(len, 0);
                    let end = hi.min(len).min(f.data.len());
                    let mut page = lo - lo % PAGE;
                    while page < end {
                        let (a, b) = (page.max(lo), (page + PAGE).min(end));
                        if rng.coin() {
                            f.durable[a..b].copy_from_slice(&f.data[a..b]);
                        }
                        page += PAGE;
                    }
                }
                Body::Dir(d) => {
                    let names: Vec<OsString> = d
                        .entries
                        .keys()
                        .chain(d.durable.keys())
                        .filter(|n| d.entries.get(*n) != d.durable.get(*n))
                        .cloned()
                        .collect();
                    for name in names {
                        if rng.coin() {
                            match d.entries.get(&name) {
                                Some(&ino) => d.durable.insert(name, ino),
                                None => d.durable.remove(&name),
                            };
                        }
                    }
                }
            }
        }
    }

    /// Loses power: every directory's entries and every file's bytes revert to
    /// their durable state, and inodes that no durable entry reaches from the
    /// root are gone.
    pub fn power_cut(&mut self) -> CutReport {
        let mut report = CutReport::default();
        let paths = self.current_paths();
        let name =
            |ino: u64| paths.get(&ino).cloned().unwrap_or_else(|| format!("<unlinked {ino}>"));
        // What survives: reachable from the root through durable entries only.
        let mut reachable = HashSet::from([ROOT]);
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            if let Some(Inode { body: Body::Dir(d), .. }) = self.inodes.get(&ino) {
                for &child in d.durable.values() {
                    if reachable.insert(child) {
                        stack.push(child);
                    }
                }
            }
        }
        let before = self.inodes.len() as u64;
        self.inodes.retain(|ino, _| reachable.contains(ino));
        report.inodes_dropped = before - self.inodes.len() as u64;
        // A directory reached through two durable entries (a rename made durable
        // in the new parent only) takes the parent it was reached from last;
        // `..` is not part of the model.
        let mut parents = Vec::new();
        for (&ino, inode) in &mut self.inodes {
            match &mut inode.body {
                Body::File(f) => {
                    if f.dirty.is_some() || f.data.len() != f.durable.len() {
                        report.files_reverted += 1;
                        report.reverted.push(name(ino));
                        report.bytes_dropped += f.data.len().saturating_sub(f.durable.len()) as u64;
                    }
                    f.data.clone_from(&f.durable);
                    f.dirty = None;
                }
                Body::Dir(d) => {
                    if d.entries != d.durable {
                        report.dirs_reverted += 1;
                        report.reverted.push(format!("{}/", name(ino)));
                    }
                    d.entries.clone_from(&d.durable);
                    for &child in d.entries.values() {
                        parents.push((child, ino));
                    }
                }
            }
        }
        for (child, parent) in parents {
            if let Ok(d) = self.dir_mut(child) {
                d.parent = parent;
            }
        }
        report.reverted.sort();
        report
    }

    /// Every inode the current entries reach, with its path from the root.
    fn current_paths(&self) -> HashMap<u64, String> {
        let mut paths = HashMap::from([(ROOT, String::new())]);
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            let Some(Inode { body: Body::Dir(d), .. }) = self.inodes.get(&ino) else {
                continue;
            };
            let prefix = paths.get(&ino).cloned().unwrap_or_default();
            for (n, &child) in &d.entries {
                if let Entry::Vacant(e) = paths.entry(child) {
                    e.insert(format!("{prefix}/{}", n.to_string_lossy()));
                    stack.push(child);
                }
            }
        }
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    fn content(d: &mut Disk, ino: u64) -> Vec<u8> {
        d.read(ino, 0, u32::MAX).unwrap()
    }

    #[test]
    fn unsynced_bytes_are_lost_synced_bytes_survive() {
        let mut d = Disk::new();
        let f = d.create(ROOT, n("a.log"), Kind::File, 0o644).unwrap();
        d.sync_dir(ROOT).unwrap();
        d.write(f, 0, b"hello").unwrap();
        d.sync_file(f).unwrap();
        d.write(f, 5, b" world").unwrap();
        d.write(f, 0, b"J").unwrap();
        let r = d.power_cut();
        assert_eq!(content(&mut d, f), b"hello");
        assert_eq!(r.files_reverted, 1);
        assert_eq!(r.bytes_dropped, 6);
        assert_eq!(r.reverted, ["/a.log"]);
        assert_eq!(d.power_cut(), CutReport::default(), "a second cut finds nothing unsynced");
    }

    #[test]
    fn truncate_and_regrow_sync_exactly() {
        let mut d = Disk::new();
        let f = d.create(ROOT, n("f"), Kind::File, 0o644).unwrap();
        d.sync_dir(ROOT).unwrap();
        d.write(f, 0, &[7u8; 100]).unwrap();
        d.sync_file(f).unwrap();
        d.truncate(f, 50).unwrap();
        d.write(f, 80, &[9u8; 10]).unwrap();
        d.sync_file(f).unwrap();
        let mut want = vec![7u8; 50];
        want.extend_from_slice(&[0u8; 30]);
        want.extend_from_slice(&[9u8; 10]);
        d.power_cut();
        assert_eq!(content(&mut d, f), want);
    }

    #[test]
    fn a_file_synced_but_its_directory_not_is_gone() {
        let mut d = Disk::new();
        let f = d.create(ROOT, n("new"), Kind::File, 0o644).unwrap();
        d.write(f, 0, b"data").unwrap();
        d.sync_file(f).unwrap();
        let r = d.power_cut();
        assert_eq!(d.lookup(ROOT, n("new")), Err(FsError::NotFound));
        assert_eq!(r.inodes_dropped, 1);
        assert_eq!(r.dirs_reverted, 1);
    }

    #[test]
    fn a_name_made_durable_without_its_bytes_is_empty() {
        let mut d = Disk::new();
        let f = d.create(ROOT, n("new"), Kind::File, 0o644).unwrap();
        d.write(f, 0, b"data").unwrap();
        d.sync_dir(ROOT).unwrap();
        d.power_cut();
        assert_eq!(d.lookup(ROOT, n("new")), Ok(f));
        assert!(content(&mut d, f).is_empty());
    }

    #[test]
    fn rename_needs_a_directory_sync() {
        let mut d = Disk::new();
        let old = d.create(ROOT, n("cp"), Kind::File, 0o644).unwrap();
        d.write(old, 0, b"v1").unwrap();
        d.sync_file(old).unwrap();
        d.sync_dir(ROOT).unwrap();
        let tmp = d.create(ROOT, n("cp.tmp"), Kind::File, 0o644).unwrap();
        d.write(tmp, 0, b"v2").unwrap();
        d.sync_file(tmp).unwrap();
        d.rename(ROOT, n("cp.tmp"), ROOT, n("cp"), false).unwrap();
        d.power_cut();
        let now = d.lookup(ROOT, n("cp")).unwrap();
        assert_eq!(content(&mut d, now), b"v1", "the rename was never made durable");
        assert_eq!(d.lookup(ROOT, n("cp.tmp")), Err(FsError::NotFound));

        let tmp = d.create(ROOT, n("cp.tmp"), Kind::File, 0o644).unwrap();
        d.write(tmp, 0, b"v2").unwrap();
        d.sync_file(tmp).unwrap();
        d.rename(ROOT, n("cp.tmp"), ROOT, n("cp"), false).unwrap();
        d.sync_dir(ROOT).unwrap();
        d.power_cut();
        let now = d.lookup(ROOT, n("cp")).unwrap();
        assert_eq!(content(&mut d, now), b"v2");
    }

    #[test]
    fn a_new_directory_needs_its_parent_synced() {
        let mut d = Disk::new();
        let dir = d.create(ROOT, n("topic-0"), Kind::Dir, 0o755).unwrap();
        let f = d.create(dir, n("0.log"), Kind::File, 0o644).unwrap();
        d.write(f, 0, b"batch").unwrap();
        d.sync_file(f).unwrap();
        d.sync_dir(dir).unwrap();
        d.power_cut();
        assert_eq!(d.lookup(ROOT, n("topic-0")), Err(FsError::NotFound));

        let dir = d.create(ROOT, n("topic-0"), Kind::Dir, 0o755).unwrap();
        let f = d.create(dir, n("0.log"), Kind::File, 0o644).unwrap();
        d.write(f, 0, b"batch").unwrap();
        d.sync_file(f).unwrap();
        d.sync_dir(dir).unwrap();
        d.sync_dir(ROOT).unwrap();
        d.power_cut();
        let f = d.lookup(d.lookup(ROOT, n("topic-0")).unwrap(), n("0.log")).unwrap();
        assert_eq!(content(&mut d, f), b"batch");
    }

    #[test]
    fn unlink_is_undone_by_a_cut_unless_synced() {
        let mut d = Disk::new();
        let f = d.create(ROOT, n("old.log"), Kind::File, 0o644).unwrap();
        d.sync_dir(ROOT).unwrap();
        d.remove(ROOT, n("old.log"), false).unwrap();
        d.power_cut();
        assert_eq!(d.lookup(ROOT, n("old.log")), Ok(f));
        d.remove(ROOT, n("old.log"), false).unwrap();
        d.sync_dir(ROOT).unwrap();
        d.power_cut();
        assert_eq!(d.lookup(ROOT, n("old.log")), Err(FsError::NotFound));
    }

    #[test]
    fn persist_some_keeps_whole_pages_of_either_version() {
        let mut seen_mixed = false;
        for seed in 1..40 {
            let mut d = Disk::new();
            let f = d.create(ROOT, n("seg.log"), Kind::File, 0o644).unwrap();
            d.sync_dir(ROOT).unwrap();
            d.write(f, 0, &[1u8; 3 * PAGE]).unwrap();
            d.sync_file(f).unwrap();
            d.write(f, 100, &[2u8; 3 * PAGE]).unwrap(); // overwrites three pages, extends into a fourth
            let other = d.create(ROOT, n("other"), Kind::File, 0o644).unwrap();
            d.persist_some(seed);
            d.power_cut();
            let got = content(&mut d, f);
            assert!(got.len() == 3 * PAGE || got.len() == 3 * PAGE + 100, "length {}", got.len());
            for (i, page) in got.chunks(PAGE).enumerate() {
                let lo = if i == 0 { 100 } else { 0 };
                let old = page[lo..].iter().all(|&b| b == if i == 3 { 0 } else { 1 });
                let new = page[lo..].iter().all(|&b| b == 2);
                assert!(old || new, "seed {seed}: page {i} mixes versions");
                assert!(page[..lo].iter().all(|&b| b == 1));
            }
            seen_mixed |= got.chunks(PAGE).any(|p| p[100..].iter().all(|&b| b == 2))
                && got.chunks(PAGE).any(|p| p[100..].iter().all(|&b| b == 1));
            // The new file's name may or may not have made it; either way it is empty.
            if let Ok(ino) = d.lookup(ROOT, n("other")) {
                assert_eq!(ino, other);
                assert!(content(&mut d, other).is_empty());
            }
        }
        assert!(seen_mixed, "no seed kept some new pages and some old ones");
    }

    #[test]
    fn kinds_and_emptiness_are_checked() {
        let mut d = Disk::new();
        let dir = d.create(ROOT, n("d"), Kind::Dir, 0o755).unwrap();
        d.create(dir, n("f"), Kind::File, 0o644).unwrap();
        assert_eq!(d.create(ROOT, n("d"), Kind::File, 0o644), Err(FsError::Exists));
        assert_eq!(d.remove(ROOT, n("d"), false), Err(FsError::IsDir));
        assert_eq!(d.remove(ROOT, n("d"), true), Err(FsError::NotEmpty));
        assert_eq!(d.remove(dir, n("f"), true), Err(FsError::NotDir));
        assert_eq!(d.rename(ROOT, n("d"), dir, n("inside"), false), Err(FsError::Invalid));
        assert_eq!(d.rename(dir, n("f"), ROOT, n("d"), false), Err(FsError::IsDir));
        d.create(ROOT, n("g"), Kind::File, 0o644).unwrap();
        assert_eq!(d.rename(dir, n("f"), ROOT, n("g"), true), Err(FsError::Exists));
        d.rename(dir, n("f"), ROOT, n("g"), false).unwrap();
        assert_eq!(d.entries(ROOT).unwrap().len(), 2);
        d.remove(ROOT, n("d"), true).unwrap();
    }
}
