//! A FUSE filesystem that loses what was not fsynced, for power-loss tests
//! (LazyFS is the model). It passes through to a backing directory, but
//! file data written is kept in memory, page by page, until the file is
//! fsynced (or fdatasynced); [`LazyHandle::power_cut`] throws every unsynced
//! page and size change away, as a power failure loses a disk's volatile
//! cache. Names (create, mkdir, rename, unlink) reach the backing directory
//! at once: like LazyFS, only data is lazy.
//!
//! Files are opened with direct I/O, and attributes are never cached, so
//! the kernel keeps no copy of what a power cut drops.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

const PAGE: u64 = 4096;
/// Attributes change under the kernel (a power cut shrinks files): never cached.
const TTL: Duration = Duration::ZERO;

/// A file's writes since its last fsync.
#[derive(Default)]
struct Dirty {
    pages: BTreeMap<u64, Box<[u8]>>,
    /// The file's size as writes and truncates left it.
    size: u64,
}

#[derive(Default)]
struct State {
    /// Inode → its paths relative to the backing directory ("" is the
    /// root); more than one after a hard link.
    paths: HashMap<u64, Vec<PathBuf>>,
    dirty: HashMap<u64, Dirty>,
    /// Open handles: inode, backing file, opened for appending.
    handles: HashMap<u64, (u64, Arc<File>, bool)>,
    next_fh: u64,
    /// Bytes written, and bytes a power cut dropped, over the mount's life.
    written: u64,
    dropped: u64,
    syncs: u64,
}

struct LazyFs {
    backing: PathBuf,
    state: Arc<Mutex<State>>,
}

/// A mounted lazy filesystem; unmounted when dropped.
pub struct LazyHandle {
    state: Arc<Mutex<State>>,
    session: Option<fuser::BackgroundSession>,
    pub mountpoint: PathBuf,
}

/// What the filesystem saw: bytes written, fsyncs, bytes a cut dropped.
#[derive(Debug, Clone, Copy)]
pub struct LazyStats {
    pub written: u64,
    pub syncs: u64,
    pub dropped: u64,
}

impl LazyHandle {
    /// Mounts `backing` (which must exist) at `mountpoint`. Fails loudly
    /// when FUSE is not there: power-loss tests need it.
    pub fn mount(backing: &Path, mountpoint: &Path) -> LazyHandle {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: the power-loss tests need FUSE"
        );
        let state = Arc::new(Mutex::new(State {
            next_fh: 1,
            ..State::default()
        }));
        state
            .lock()
            .unwrap()
            .paths
            .insert(INodeNo::ROOT.0, vec![PathBuf::new()]);
        let fs = LazyFs {
            backing: backing.to_owned(),
            state: state.clone(),
        };
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("strobe-lazyfs".into())];
        config.n_threads = Some(4);
        let session = fuser::spawn_mount(fs, mountpoint, &config)
            .unwrap_or_else(|e| panic!("mounting the lazy filesystem at {mountpoint:?}: {e}"));
        LazyHandle {
            state,
            session: Some(session),
            mountpoint: mountpoint.to_owned(),
        }
    }

    /// A power failure: every write not yet fsynced is lost. Call it with
    /// every process using the filesystem stopped.
    pub fn power_cut(&self) -> u64 {
        let mut st = self.state.lock().unwrap();
        let lost: u64 = st.dirty.values().map(|d| d.pages.len() as u64 * PAGE).sum();
        st.dirty.clear();
        st.dropped += lost;
        lost
    }

    pub fn stats(&self) -> LazyStats {
        let st = self.state.lock().unwrap();
        LazyStats {
            written: st.written,
            syncs: st.syncs,
            dropped: st.dropped,
        }
    }
}

impl Drop for LazyHandle {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            // Busy (a process still holds a file): detach it instead.
            if s.umount_and_join().is_err() {
                let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
            }
        }
    }
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

fn kind_of(m: &std::fs::Metadata) -> FileType {
    let t = m.file_type();
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    }
}

impl LazyFs {
    fn full(&self, rel: &Path) -> PathBuf {
        self.backing.join(rel)
    }

    /// A path of `ino` that still names it: the backing filesystem reuses
    /// a deleted file's inode number, so a remembered path is checked.
    fn path_of(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        if ino == INodeNo::ROOT {
            return Ok(PathBuf::new());
        }
        let mut st = self.state.lock().unwrap();
        let known = st.paths.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
        known.retain(|p| {
            std::fs::symlink_metadata(self.backing.join(p)).is_ok_and(|m| m.ino() == ino.0)
        });
        known.first().cloned().ok_or(Errno::ENOENT)
    }

    /// The backing file's attributes with the unsynced size, under the
    /// inode the kernel knows it by (the root is always 1).
    fn attr(&self, rel: &Path) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(self.full(rel)).map_err(errno)?;
        let ino = if rel.as_os_str().is_empty() {
            INodeNo::ROOT.0
        } else {
            m.ino()
        };
        let size = match self.state.lock().unwrap().dirty.get(&ino) {
            Some(d) => d.size,
            None => m.len(),
        };
        let t = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns as u32);
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: t(m.atime(), m.atime_nsec()),
            mtime: t(m.mtime(), m.mtime_nsec()),
            ctime: t(m.ctime(), m.ctime_nsec()),
            crtime: t(m.ctime(), m.ctime_nsec()),
            kind: kind_of(&m),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: PAGE as u32,
            flags: 0,
        })
    }

    /// Looks `name` up under `parent` and remembers its inode's path.
    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<(PathBuf, FileAttr), Errno> {
        let rel = self.path_of(parent)?.join(name);
        let attr = self.attr(&rel)?;
        let mut st = self.state.lock().unwrap();
        let known = st.paths.entry(attr.ino.0).or_default();
        if !known.contains(&rel) {
            known.push(rel.clone());
        }
        Ok((rel, attr))
    }

    fn open_handle(&self, ino: u64, file: File, append: bool) -> u64 {
        let mut st = self.state.lock().unwrap();
        let fh = st.next_fh;
        st.next_fh += 1;
        st.handles.insert(fh, (ino, Arc::new(file), append));
        fh
    }

    fn handle(&self, fh: FileHandle) -> Result<(u64, Arc<File>, bool), Errno> {
        self.state
            .lock()
            .unwrap()
            .handles
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }
}

/// Page `n` of `file` as stored (zeros past its end).
fn stored_page(file: &File, n: u64) -> std::io::Result<Box<[u8]>> {
    let mut buf = vec![0u8; PAGE as usize].into_boxed_slice();
    let mut at = 0usize;
    while at < buf.len() {
        match file.read_at(&mut buf[at..], n * PAGE + at as u64)? {
            0 => break,
            k => at += k,
        }
    }
    Ok(buf)
}

/// Writes `d` through to `file` (an fsync).
fn flush_dirty(file: &File, d: &Dirty) -> std::io::Result<()> {
    for (n, page) in &d.pages {
        let start = n * PAGE;
        if start >= d.size {
            continue;
        }
        let len = (d.size - start).min(PAGE) as usize;
        file.write_all_at(&page[..len], start)?;
    }
    file.set_len(d.size)
}

impl Filesystem for LazyFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name) {
            Ok((_, attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.path_of(ino).and_then(|p| self.attr(&p)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
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
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = (|| {
            let rel = self.path_of(ino)?;
            let full = self.full(&rel);
            if let Some(mode) = mode {
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode))
                    .map_err(errno)?;
            }
            if let Some(size) = size {
                // A truncate is data: lazy until the next fsync.
                let file = File::open(&full).map_err(errno)?;
                let mut st = self.state.lock().unwrap();
                let stored = file.metadata().map_err(errno)?.len();
                let d = st.dirty.entry(ino.0).or_insert_with(|| Dirty {
                    pages: BTreeMap::new(),
                    size: stored,
                });
                if size < d.size {
                    // What lies past the new end reads as zeros if the file grows again.
                    let keep = size.div_ceil(PAGE);
                    d.pages.retain(|n, _| *n < keep);
                    if size % PAGE != 0 {
                        let n = size / PAGE;
                        let page = match d.pages.entry(n) {
                            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                            std::collections::btree_map::Entry::Vacant(e) => {
                                e.insert(stored_page(&file, n).map_err(errno)?)
                            }
                        };
                        page[(size % PAGE) as usize..].fill(0);
                    }
                    // Stored pages past the end must not show through later.
                    for n in keep..stored.div_ceil(PAGE) {
                        d.pages
                            .insert(n, vec![0u8; PAGE as usize].into_boxed_slice());
                    }
                }
                d.size = size;
            }
            self.attr(&rel)
        })();
        match result {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
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
        let result = (|| {
            let rel = self.path_of(parent)?.join(name);
            std::fs::create_dir(self.full(&rel)).map_err(errno)?;
            let _ = std::fs::set_permissions(
                self.full(&rel),
                std::fs::Permissions::from_mode(mode & !umask),
            );
            self.child(parent, name)
        })();
        match result {
            Ok((_, a)) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = (|| {
            let (rel, attr) = self.child(parent, name)?;
            std::fs::remove_file(self.full(&rel)).map_err(errno)?;
            let mut st = self.state.lock().unwrap();
            if attr.nlink <= 1 {
                st.dirty.remove(&attr.ino.0);
                st.paths.remove(&attr.ino.0);
            } else if let Some(v) = st.paths.get_mut(&attr.ino.0) {
                v.retain(|p| *p != rel);
            }
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = (|| {
            let (rel, attr) = self.child(parent, name)?;
            std::fs::remove_dir(self.full(&rel)).map_err(errno)?;
            self.state.lock().unwrap().paths.remove(&attr.ino.0);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
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
        let result = (|| {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            let from = self.path_of(parent)?.join(name);
            let to = self.path_of(newparent)?.join(newname);
            // A file the rename replaces is gone, with its unsynced data.
            let replaced = std::fs::symlink_metadata(self.full(&to))
                .ok()
                .map(|m| (m.ino(), m.nlink()));
            std::fs::rename(self.full(&from), self.full(&to)).map_err(errno)?;
            let mut st = self.state.lock().unwrap();
            match replaced {
                Some((ino, links)) if links <= 1 => {
                    st.dirty.remove(&ino);
                    st.paths.remove(&ino);
                }
                Some((ino, _)) => {
                    if let Some(v) = st.paths.get_mut(&ino) {
                        v.retain(|p| *p != to);
                    }
                }
                None => {}
            }
            for p in st.paths.values_mut().flatten() {
                if let Ok(rest) = p.strip_prefix(&from) {
                    // (Joining an empty rest would add a trailing slash.)
                    *p = if rest.as_os_str().is_empty() {
                        to.clone()
                    } else {
                        to.join(rest)
                    };
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // A create-only put (object_store's local store) links its temporary
        // file to the object's name; the data, synced or not, is shared.
        let result = (|| {
            let from = self.path_of(ino)?;
            let to = self.path_of(newparent)?.join(newname);
            std::fs::hard_link(self.full(&from), self.full(&to)).map_err(errno)?;
            self.child(newparent, newname)
        })();
        match result {
            Ok((_, a)) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = (|| {
            let rel = self.path_of(ino)?;
            let full = self.full(&rel);
            let raw = flags.0;
            let file = OpenOptions::new()
                .read(true)
                .write(raw & libc::O_ACCMODE != libc::O_RDONLY)
                .open(&full)
                .map_err(errno)?;
            if raw & libc::O_TRUNC != 0 {
                let mut st = self.state.lock().unwrap();
                let stored = file.metadata().map_err(errno)?.len();
                let d = st.dirty.entry(ino.0).or_default();
                d.pages.clear();
                for n in 0..stored.div_ceil(PAGE) {
                    d.pages
                        .insert(n, vec![0u8; PAGE as usize].into_boxed_slice());
                }
                d.size = 0;
            }
            Ok(self.open_handle(ino.0, file, raw & libc::O_APPEND != 0))
        })();
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
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
        let result = (|| {
            let rel = self.path_of(parent)?.join(name);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(flags & libc::O_TRUNC != 0)
                .custom_flags(flags & libc::O_EXCL)
                .mode(mode & !umask)
                .open(self.full(&rel))
                .map_err(errno)?;
            let (_, attr) = self.child(parent, name)?;
            let fh = self.open_handle(attr.ino.0, file, flags & libc::O_APPEND != 0);
            Ok((attr, fh))
        })();
        match result {
            Ok((attr, fh)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = (|| {
            let (ino, file, _) = self.handle(fh)?;
            let st = self.state.lock().unwrap();
            let Some(d) = st.dirty.get(&ino) else {
                drop(st);
                let mut buf = vec![0u8; size as usize];
                let mut at = 0usize;
                while at < buf.len() {
                    match file
                        .read_at(&mut buf[at..], offset + at as u64)
                        .map_err(errno)?
                    {
                        0 => break,
                        k => at += k,
                    }
                }
                buf.truncate(at);
                return Ok(buf);
            };
            let end = (offset + size as u64).min(d.size);
            let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
            let mut at = offset;
            while at < end {
                let n = at / PAGE;
                let within = (at % PAGE) as usize;
                let take = ((PAGE - at % PAGE) as usize).min((end - at) as usize);
                match d.pages.get(&n) {
                    Some(p) => out.extend_from_slice(&p[within..within + take]),
                    None => {
                        let p = stored_page(&file, n).map_err(errno)?;
                        out.extend_from_slice(&p[within..within + take]);
                    }
                }
                at += take as u64;
            }
            Ok(out)
        })();
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = (|| {
            let (ino, file, append) = self.handle(fh)?;
            let mut st = self.state.lock().unwrap();
            let d = match st.dirty.entry(ino) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(Dirty {
                    pages: BTreeMap::new(),
                    size: file.metadata().map_err(errno)?.len(),
                }),
            };
            let offset = if append { d.size } else { offset };
            let mut at = offset;
            let mut rest = data;
            while !rest.is_empty() {
                let n = at / PAGE;
                let within = (at % PAGE) as usize;
                let take = ((PAGE as usize) - within).min(rest.len());
                if !d.pages.contains_key(&n) {
                    // Past the old end a page starts as zeros.
                    let p = if n * PAGE < d.size {
                        stored_page(&file, n).map_err(errno)?
                    } else {
                        vec![0u8; PAGE as usize].into_boxed_slice()
                    };
                    d.pages.insert(n, p);
                }
                d.pages.get_mut(&n).expect("just made")[within..within + take]
                    .copy_from_slice(&rest[..take]);
                rest = &rest[take..];
                at += take as u64;
            }
            d.size = d.size.max(offset + data.len() as u64);
            st.written += data.len() as u64;
            Ok(data.len() as u32)
        })();
        match result {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
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
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.state.lock().unwrap().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = (|| {
            let (ino, file, _) = self.handle(fh)?;
            let mut st = self.state.lock().unwrap();
            if let Some(d) = st.dirty.remove(&ino) {
                // The backing file now holds it: what a power cut keeps.
                if let Err(e) = flush_dirty(&file, &d) {
                    st.dirty.insert(ino, d);
                    return Err(errno(e));
                }
            }
            st.syncs += 1;
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = (|| {
            let rel = self.path_of(ino)?;
            let mut entries: Vec<(u64, FileType, std::ffi::OsString)> = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            let mut names: Vec<_> = std::fs::read_dir(self.full(&rel))
                .map_err(errno)?
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let m = e.metadata().ok()?;
                    Some((m.ino(), kind_of(&m), e.file_name()))
                })
                .collect();
            names.sort_by(|a, b| a.2.cmp(&b.2));
            entries.extend(names);
            Ok(entries)
        })();
        match result {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), i as u64 + 1, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Names are never lazy here.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match nix::sys::statvfs::statvfs(&self.backing) {
            Ok(s) => reply.statfs(
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.files(),
                s.files_free(),
                s.block_size() as u32,
                s.name_max() as u32,
                s.fragment_size() as u32,
            ),
            Err(e) => reply.error(Errno::from_i32(e as i32)),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}
