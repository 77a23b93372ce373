//! The FUSE adapter: serves kernel requests from the shared [`Disk`].
//!
//! Handles are stateless (every handle is 0; requests name the inode), and
//! nothing here decides durability: `fsync` and `fsyncdir` call into the disk
//! model, every other request changes only the current state. The kernel is
//! not told of a power cut; the control loop unmounts before cutting and
//! mounts afresh after, so no page cache or dentry outlives the cut.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::disk::{Attr, Disk, FsError, Kind};

/// How long the kernel may cache attributes and entries. Every change reaches
/// the disk through the kernel itself, so its caches cannot go stale while
/// mounted; a cut remounts.
const TTL: Duration = Duration::from_secs(1);

/// The filesystem one FUSE session serves: a handle on the shared disk.
#[derive(Debug, Clone)]
pub struct PowerLossFs {
    disk: Arc<Mutex<Disk>>,
}

impl PowerLossFs {
    pub fn new(disk: Arc<Mutex<Disk>>) -> Self {
        Self { disk }
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        // A panic while holding the lock leaves the model as it was at the
        // panic; serving on is better than wedging the broker under test.
        self.disk.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn errno(e: FsError) -> Errno {
    match e {
        FsError::NotFound => Errno::ENOENT,
        FsError::Exists => Errno::EEXIST,
        FsError::NotDir => Errno::ENOTDIR,
        FsError::IsDir => Errno::EISDIR,
        FsError::NotEmpty => Errno::ENOTEMPTY,
        FsError::Invalid => Errno::EINVAL,
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
    }
}

fn file_attr(a: Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.ctime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: if a.kind == Kind::Dir { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl PowerLossFs {
    fn create_entry(
        &self,
        parent: INodeNo,
        name: &OsStr,
        kind: Kind,
        mode: u32,
        umask: u32,
    ) -> Result<Attr, FsError> {
        let mut disk = self.disk();
        let perm = (mode & !umask & 0o7777) as u16;
        let ino = disk.create(parent.0, name, kind, perm)?;
        disk.attr(ino)
    }
}

impl Filesystem for PowerLossFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let disk = self.disk();
        match disk.lookup(parent.0, name).and_then(|ino| disk.attr(ino)) {
            Ok(a) => reply.entry(&TTL, &file_attr(a), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.disk().attr(ino.0) {
            Ok(a) => reply.attr(&TTL, &file_attr(a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut disk = self.disk();
        let result = (|| {
            if let Some(m) = mode {
                disk.set_perm(ino.0, (m & 0o7777) as u16)?;
            }
            if let Some(s) = size {
                disk.truncate(ino.0, s)?;
            }
            if let Some(t) = mtime {
                let at = match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                };
                disk.set_mtime(ino.0, at)?;
            }
            disk.attr(ino.0)
        })();
        match result {
            Ok(a) => reply.attr(&TTL, &file_attr(a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & S_IFMT != S_IFREG {
            reply.error(Errno::EPERM);
            return;
        }
        match self.create_entry(parent, name, Kind::File, mode, umask) {
            Ok(a) => reply.entry(&TTL, &file_attr(a), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.create_entry(parent, name, Kind::Dir, mode, umask) {
            Ok(a) => reply.entry(&TTL, &file_attr(a), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.disk().remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.disk().remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // RENAME_EXCHANGE and RENAME_WHITEOUT are not modelled.
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            reply.error(Errno::EINVAL);
            return;
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match self.disk().rename(parent.0, name, newparent.0, newname, no_replace) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.disk().attr(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = {
            let mut disk = self.disk();
            match disk.lookup(parent.0, name) {
                // The kernel asked to create a name it believed absent; open what is there,
                // as open(2) without O_EXCL would.
                Ok(_) if flags & O_EXCL != 0 => Err(FsError::Exists),
                Ok(ino) => {
                    if flags & O_TRUNC != 0 {
                        disk.truncate(ino, 0).and_then(|()| disk.attr(ino))
                    } else {
                        disk.attr(ino)
                    }
                }
                Err(FsError::NotFound) => {
                    drop(disk);
                    self.create_entry(parent, name, Kind::File, mode, umask)
                }
                Err(e) => Err(e),
            }
        };
        match result {
            Ok(a) if a.kind == Kind::Dir => reply.error(Errno::EISDIR),
            Ok(a) => reply.created(
                &TTL,
                &file_attr(a),
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.disk().read(ino.0, offset, size) {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.disk().write(ino.0, offset, data) {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) is not a sync: nothing becomes durable here.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.disk().sync_file(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let disk = self.disk();
        let listing = disk.entries(ino.0).and_then(|e| Ok((disk.parent(ino.0)?, e)));
        let (parent, entries) = match listing {
            Ok(l) => l,
            Err(e) => {
                reply.error(errno(e));
                return;
            }
        };
        let all = [(".".into(), ino.0, Kind::Dir), ("..".into(), parent, Kind::Dir)]
            .into_iter()
            .chain(entries);
        // The offset handed back with each entry is the index of the next one.
        for (i, (name, child, kind)) in
            all.enumerate().skip(usize::try_from(offset).unwrap_or(usize::MAX))
        {
            if reply.add(INodeNo(child), i as u64 + 1, file_type(kind), &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.disk().sync_dir(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Plenty of room: space is not what this rig tests (test_faults.py has the full disk).
        let blocks = 1 << 24;
        reply.statfs(blocks, blocks, blocks, 1 << 20, 1 << 20, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EOPNOTSUPP);
    }
}

// open(2) flags and mode bits the adapter looks at (Linux values; the rig is Linux-only).
const O_EXCL: i32 = 0o200;
const O_TRUNC: i32 = 0o1000;
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
