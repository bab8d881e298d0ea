//! Files that appear whole or not at all: written under a temporary name beside their final
//! name, synced, then renamed over it.
//!
//! How to use:
//! 1. [`PendingFile::create`] the final path: a new, empty file under a hidden temporary name
//!    in the same directory (`O_CREAT | O_EXCL | O_NOFOLLOW`: never an existing file, never
//!    through a symlink), and a [`FileHandle`] on it whose errors name the final path.
//! 2. Write through [`PendingFile::handle`] (any request of the engine).
//! 3. [`PendingFile::publish`]: `fsync` the file, rename it over the final name, `fsync` the
//!    directory (with `durable`; without, only the rename). Until the rename, whatever held
//!    the final name is untouched; after it, the final name holds every byte written.
//! 4. Dropping a file that was not published removes its temporary name (an error, a panic or an
//!    interrupt leaves nothing behind); a killed process leaves only the hidden temporary, which
//!    [`is_temporary`] recognises.
//!
//! While a large file is written for a durable publish, [`PendingFile::write_behind`] has the
//! disk write its dirty pages as they come, so that the final `fsync` finds little left.
//!
//! With `durable`, the bytes are on the disk when `publish` returns (a power loss keeps either
//! the old file or the new one). Without, a crash of the process still leaves one of the two
//! whole, but a crash of the machine may leave the new name with missing data.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Op, Result};
use crate::file::{FileHandle, OpenMode};

mod dir;
mod seam;
pub use dir::{host_tag, remove_stale_temporaries, DirLock};
#[cfg(test)]
pub(crate) use seam::with_hook;
pub(crate) use seam::{before, Step};

/// What every temporary name starts with (after the dot that hides it).
pub const TEMP_PREFIX: &str = ".gpufile-tmp-";

/// Whether `name` (a file name, no directory) is one of gpufile's temporary names: a leftover
/// of a process killed before it published.
pub fn is_temporary(name: &std::ffi::OsStr) -> bool {
    name.as_bytes().starts_with(TEMP_PREFIX.as_bytes())
}

/// A file being written under a temporary name, published by renaming it over its final name.
#[derive(Debug)]
pub struct PendingFile {
    final_path: PathBuf,
    temp_path: PathBuf,
    dir: PathBuf,
    handle: FileHandle,
    /// The temporary name still exists (not renamed away, not removed).
    temp_exists: bool,
    /// The file is at its final name (renamed there, whatever failed after).
    published: bool,
}

/// `fsync` of the directory `dir`: makes the names created, renamed or removed in it durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| Error::os(Op::Open, dir, 0, 0, e))?;
    before(Step::SyncDir, dir)
        .and_then(|()| d.sync_all())
        .map_err(|e| Error::os(Op::Sync, dir, 0, 0, e))
}

/// Removes the file at `path`; one that is already gone is no error.
pub(crate) fn remove_file(path: &Path) -> Result<()> {
    match before(Step::Remove, path).and_then(|()| std::fs::remove_file(path)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::os(Op::Remove, path, 0, 0, e)),
    }
}

/// The directory a path's file lives in (`.` for a bare name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// A temporary name for `final_name` that no other process or thread picks: the host, the
/// process id, a counter and the clock, then the final name (so the extension stays the
/// same). Host and process say whose it is ([`temp_owner`]).
fn temp_name(final_name: &std::ffi::OsStr) -> OsString {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut name = OsString::from(format!(
        "{TEMP_PREFIX}h{}-{}-{seq:x}-{nanos:08x}.",
        host_tag(),
        crate::posix::pid()
    ));
    name.push(final_name);
    name
}

impl PendingFile {
    /// Creates the temporary file for `path` in `path`'s directory, opened for writing (and
    /// reading); `path` itself is not touched. A directory that does not exist is an error
    /// naming the directory ([`Op::Create`]), as is one that refuses new files.
    pub fn create(path: impl AsRef<Path>) -> Result<PendingFile> {
        let final_path = path.as_ref().to_owned();
        let Some(name) = final_path.file_name() else {
            return Err(Error::InvalidArgument(format!(
                "{}: not a file name to publish to",
                final_path.display()
            )));
        };
        let dir = parent_dir(&final_path);
        let mut last = None;
        // A name taken by another process (same pid reused across containers, a clock that
        // stands still) is retried with the next counter value.
        for _ in 0..16 {
            let temp_path = dir.join(temp_name(name));
            let opened = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o666)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&temp_path);
            match opened {
                Ok(file) => {
                    // The writer's mark: a temporary held by a `flock` is work in progress,
                    // whoever asks (remove_stale_temporaries). Where the file system has no
                    // flock, the owner in the name still protects it.
                    // SAFETY: flock on the descriptor `file` owns (kept by the handle).
                    let _ = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                    let meta = file
                        .metadata()
                        .map_err(|e| Error::os(Op::Stat, &final_path, 0, 0, e))?;
                    let handle =
                        FileHandle::from_file(file, meta, &final_path, OpenMode::WriteRead);
                    return Ok(PendingFile {
                        final_path,
                        temp_path,
                        dir,
                        handle,
                        temp_exists: true,
                        published: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                // The directory refused a new file: it is what the error names, not the final
                // name, which was not opened.
                Err(e) => return Err(Error::os(Op::Create, &dir, 0, 0, e)),
            }
        }
        let e = last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EEXIST));
        Err(Error::os(Op::Create, &dir, 0, 0, e))
    }

    /// The handle to write through (errors name the final path).
    pub fn handle(&self) -> &FileHandle {
        &self.handle
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.final_path
    }

    /// The temporary path (where the bytes are until [`PendingFile::publish`]).
    pub fn temp_path(&self) -> &Path {
        &self.temp_path
    }

    /// `fsync` of the file's data and size.
    pub fn sync(&self) -> Result<()> {
        before(Step::SyncFile, &self.final_path)
            .map_err(|e| Error::os(Op::Sync, &self.final_path, 0, 0, e))?;
        let fd = self.handle.fd();
        // SAFETY: fsync on the descriptor the handle owns and keeps open; no memory is passed.
        if unsafe { libc::fsync(fd) } != 0 {
            let e = io::Error::last_os_error();
            return Err(Error::os(Op::Sync, &self.final_path, 0, 0, e));
        }
        Ok(())
    }

    /// Publishes the file under its final name: with `durable`, `fsync` the file first and the
    /// directory after the rename. With `keep_temp`, the temporary name stays too (a second
    /// name of the same file, renamed over the final one), so that something still naming the
    /// temporary (an index published before) goes on finding it until [`PendingFile::discard`].
    ///
    /// On an error the final name holds what it held before (unless the error is the
    /// directory's `fsync`, after the rename).
    pub fn publish(&mut self, durable: bool, keep_temp: bool) -> Result<()> {
        if !self.temp_exists {
            return Err(Error::InvalidArgument(format!(
                "{}: already published or discarded",
                self.final_path.display()
            )));
        }
        self.take_over_mode()?;
        if durable {
            self.sync()?;
        }
        let rename_err = |e| Error::os(Op::Rename, &self.final_path, 0, 0, e);
        if keep_temp {
            let link = self
                .dir
                .join(temp_name(self.final_path.file_name().unwrap_or_default()));
            before(Step::Link, &self.final_path)
                .and_then(|()| std::fs::hard_link(&self.temp_path, &link))
                .map_err(rename_err)?;
            let renamed = before(Step::Rename, &self.final_path)
                .and_then(|()| std::fs::rename(&link, &self.final_path));
            if let Err(e) = renamed {
                let _ = std::fs::remove_file(&link);
                return Err(rename_err(e));
            }
            self.published = true;
        } else {
            before(Step::Rename, &self.final_path)
                .and_then(|()| std::fs::rename(&self.temp_path, &self.final_path))
                .map_err(rename_err)?;
            self.temp_exists = false;
            self.published = true;
        }
        if durable {
            sync_dir(&self.dir).map_err(|e| match e {
                Error::Os { op, errno, .. } => Error::Os {
                    op,
                    path: self.final_path.clone(),
                    offset: 0,
                    len: 0,
                    errno,
                },
                other => other,
            })?;
        }
        Ok(())
    }

    /// Gives the file the owner, group and mode of the regular file it replaces, as an
    /// overwrite in place would keep them (a 0600 file stays 0600). The owner and group are set
    /// where the process may (root; a group it is in), and quietly kept otherwise. A new file
    /// keeps what its creation gave it: 0666 less the umask.
    fn take_over_mode(&self) -> Result<()> {
        let old = match std::fs::symlink_metadata(&self.final_path) {
            Ok(m) if m.file_type().is_file() => m,
            _ => return Ok(()),
        };
        let fd = self.handle.fd();
        // SAFETY: a zeroed stat (plain integers) is a valid value.
        let mut mine: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on the descriptor the handle owns, into a stat that outlives the call.
        if unsafe { libc::fstat(fd, &mut mine) } != 0 {
            let e = io::Error::last_os_error();
            return Err(Error::os(Op::Stat, &self.final_path, 0, 0, e));
        }
        if (mine.st_uid, mine.st_gid) != (old.uid(), old.gid()) {
            // First, as a change of owner clears the set-user-ID and set-group-ID bits.
            // SAFETY: fchown on the descriptor the handle owns; no memory is passed.
            let rc = unsafe { libc::fchown(fd, old.uid(), old.gid()) };
            if rc != 0 {
                // Not permitted: try the group alone (a group the process is in).
                // SAFETY: as above; -1 leaves the owner.
                let _ = unsafe { libc::fchown(fd, u32::MAX, old.gid()) };
            }
        }
        let mode = old.mode() & 0o7777;
        if mine.st_mode & 0o7777 != mode {
            // SAFETY: fchmod on the descriptor the handle owns; no memory is passed.
            if unsafe { libc::fchmod(fd, mode) } != 0 {
                let e = io::Error::last_os_error();
                return Err(Error::os(Op::Chmod, &self.final_path, 0, 0, e));
            }
        }
        Ok(())
    }

    /// Has the kernel start writing the file's dirty pages to the disk every
    /// [`WRITE_BEHIND_EVERY`] until the returned guard drops (`sync_file_range` with
    /// `SYNC_FILE_RANGE_WRITE`, on a thread of its own; it waits for nothing).
    ///
    /// Why: the kernel starts writing back on its own only past `dirty_background_ratio` of the
    /// memory (gigabytes on a GPU machine), so a save of a few gigabytes would land in the page
    /// cache first and be written by the final `fsync`, one after the other. Written behind,
    /// the disk works while the engine writes, and the `fsync` finds little left. It does not
    /// make the file durable: [`PendingFile::publish`] still syncs.
    pub fn write_behind(&self) -> WriteBehind {
        WriteBehind::start(self.handle.clone())
    }

    /// Whether the file is at its final name: [`PendingFile::publish`] renamed it there (even
    /// where the directory's `fsync` after the rename failed).
    pub fn published(&self) -> bool {
        self.published
    }

    /// Lets the file go and leaves its temporary name in place (a published index names it).
    pub fn leave(mut self) {
        self.temp_exists = false;
    }

    /// Removes the temporary name (if it is still there); the final name is not touched.
    pub fn discard(&mut self) -> Result<()> {
        if !self.temp_exists {
            return Ok(());
        }
        self.temp_exists = false;
        remove_file(&self.temp_path)
    }
}

/// How often [`PendingFile::write_behind`] starts the write-back of what was written since: a
/// few tens of megabytes at the page cache's write rate, enough for the disk's queue.
pub const WRITE_BEHIND_EVERY: Duration = Duration::from_millis(20);

/// The write-behind of a [`PendingFile`] (see [`PendingFile::write_behind`]); dropping it stops
/// the thread and waits for it.
#[derive(Debug)]
pub struct WriteBehind {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl WriteBehind {
    fn start(handle: FileHandle) -> WriteBehind {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("gpufile-write-behind".into())
            .spawn(move || {
                let (lock, cv) = &*flag;
                loop {
                    let stopped = *cv
                        .wait_timeout(crate::future::lock(lock), WRITE_BEHIND_EVERY)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    // Called without the lock, so that a drop never waits behind the disk's
                    // queue. SAFETY: the handle is held by this thread, so the descriptor stays
                    // open; no memory is passed. An error (a file system without write-back
                    // control) only means the final fsync does all the writing, as without this.
                    unsafe {
                        libc::sync_file_range(handle.fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE)
                    };
                    if stopped {
                        break;
                    }
                }
            });
        // Without a thread (none can be made), the save runs as it would without write-behind.
        WriteBehind {
            stop,
            thread: spawned.ok(),
        }
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *crate::future::lock(lock) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        let _ = self.discard();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dir::temp_owner;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Pages of `fd` that are dirty or under write-back (`cachestat`, Linux 6.5; its number is
    /// 451 on every architecture), `None` where the kernel lacks it.
    fn unwritten_pages(fd: std::os::fd::RawFd) -> Option<u64> {
        const SYS_CACHESTAT: libc::c_long = 451;
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct Stat {
            cache: u64,
            dirty: u64,
            writeback: u64,
            evicted: u64,
            recently_evicted: u64,
        }
        let range = Range { off: 0, len: 0 };
        let mut st = Stat::default();
        // SAFETY: both structs are the kernel's layout and live across the call.
        let rc = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                fd,
                &range as *const Range,
                &mut st as *mut Stat,
                0u32,
            )
        };
        (rc == 0).then_some(st.dirty + st.writeback)
    }

    /// Whether `dir` is on a file system whose dirty pages are written back to a disk.
    fn writes_back(dir: &Path) -> bool {
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: a zeroed statfs (plain integers) is a valid value.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated path and `st` a statfs that outlives the call.
        let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
        rc == 0 && st.f_type != libc::TMPFS_MAGIC
    }

    #[test]
    fn write_behind_has_the_disk_write_the_pages_before_any_sync_and_stops_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![7u8; 8 << 20];
        let control = PendingFile::create(dir.path().join("control.bin")).unwrap();
        control.handle().write(&data, 0, None).unwrap();
        let p = PendingFile::create(dir.path().join("model.safetensors")).unwrap();
        let behind = p.write_behind();
        p.handle().write(&data, 0, None).unwrap();
        let observable = writes_back(dir.path())
            && unwritten_pages(control.handle().fd()).is_some_and(|n| n > 0);
        if observable {
            let t0 = std::time::Instant::now();
            while unwritten_pages(p.handle().fd()) != Some(0) {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "{:?} pages still unwritten after 10 s of write-behind",
                    unwritten_pages(p.handle().fd())
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            // The control, written first and never synced, is still waiting for the kernel's
            // own write-back (30 s by default): what write-behind saves the final fsync.
            assert!(unwritten_pages(control.handle().fd()).is_some_and(|n| n > 0));
        } else {
            eprintln!("no cachestat or no write-back here: only the guard's stop is checked");
        }
        let t0 = std::time::Instant::now();
        drop(behind);
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "the guard stops promptly"
        );
    }

    #[test]
    fn the_final_name_keeps_its_old_bytes_until_publish_then_holds_the_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        std::fs::write(&path, b"old").unwrap();
        let mut p = PendingFile::create(&path).unwrap();
        assert!(is_temporary(p.temp_path().file_name().unwrap()));
        assert!(p
            .temp_path()
            .to_string_lossy()
            .ends_with(".model.safetensors"));
        p.handle().write(b"new bytes", 0, None).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        p.publish(true, false).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new bytes");
        assert_eq!(names(dir.path()), ["model.safetensors"]);
        assert!(
            p.publish(true, false).is_err(),
            "a second publish is refused"
        );
    }

    #[test]
    fn a_dropped_pending_file_leaves_nothing_and_keep_temp_leaves_two_names_until_discard() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        {
            let p = PendingFile::create(&path).unwrap();
            p.handle().write(b"xyz", 0, None).unwrap();
        }
        assert!(names(dir.path()).is_empty());
        let mut p = PendingFile::create(&path).unwrap();
        p.handle().write(b"xyz", 0, None).unwrap();
        p.publish(false, true).unwrap();
        assert_eq!(std::fs::read(p.temp_path()).unwrap(), b"xyz");
        assert_eq!(std::fs::read(&path).unwrap(), b"xyz");
        p.discard().unwrap();
        assert_eq!(names(dir.path()), ["a.bin"]);
    }

    #[test]
    fn a_symlink_at_the_final_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        let path = dir.path().join("link.bin");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let mut p = PendingFile::create(&path).unwrap();
        p.handle().write(b"new", 0, None).unwrap();
        p.publish(true, false).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/f.bin");
        let e = PendingFile::create(&path).unwrap_err();
        let want = dir.path().join("no/such/dir");
        assert!(
            matches!(&e, Error::Os { errno, op: Op::Create, path: p, .. }
                if *errno == libc::ENOENT && *p == want),
            "{e:?}"
        );
    }

    #[test]
    fn a_replaced_file_keeps_its_mode_and_a_new_one_gets_the_umasks() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.safetensors");
        std::fs::write(&path, b"old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut p = PendingFile::create(&path).unwrap();
        p.handle().write(b"new", 0, None).unwrap();
        p.publish(false, false).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"new");

        // The process's mask, read by setting it and putting it back at once (umask has no
        // read-only form; other tests see the same mask throughout).
        // SAFETY: umask only sets the process's mask.
        let mask = unsafe { libc::umask(0o022) };
        // SAFETY: as above.
        unsafe { libc::umask(mask) };
        let fresh = dir.path().join("fresh.bin");
        let mut p = PendingFile::create(&fresh).unwrap();
        p.publish(false, false).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o666 & !mask);
    }

    #[test]
    fn temporaries_carry_this_host_and_process_and_are_locked_while_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = PendingFile::create(dir.path().join("a.bin")).unwrap();
        let owner = temp_owner(p.temp_path().file_name().unwrap()).unwrap();
        assert_eq!(owner.host.as_deref(), Some(host_tag()));
        assert_eq!(owner.pid, std::process::id());
        let other = File::open(p.temp_path()).unwrap();
        // SAFETY: flock on a descriptor the test owns.
        let rc = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_ne!(rc, 0, "the writer holds the temporary's lock");
    }
}
