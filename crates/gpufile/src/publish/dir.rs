//! The directory side of publishing: a lock that serializes the commits of saves sharing a
//! directory, and the removal of temporaries that killed saves left.
//!
//! How to use:
//! 1. [`DirLock::acquire`] the directory before a save commits (publishes the names that make
//!    its checkpoint) and removes what the previous checkpoint had; drop it after. Saves write
//!    their data under temporary names without it, so they run together and only their commits
//!    take turns.
//! 2. [`remove_stale_temporaries`] (under the lock) removes the temporaries of saves that can no
//!    longer publish them: written by a process of this host that is gone, and held by no
//!    writer's lock. A temporary of another host is left to that host (its process cannot be
//!    asked about from here).
//!
//! Why both a lock and owners in the names: a save removes, after its commit, what the
//! checkpoint it replaced had; without the lock two saves committing together each remove the
//! other's files, and the directory keeps an index that names nothing. A temporary is another
//! save's work in progress until its writer is gone: the writer holds `flock` on it, and its
//! name says which host and process wrote it.
//!
//! The lock is `flock(2)` on `.gpufile-lock` in the directory, which exists only while it is
//! held (the holder removes it before it lets go; a waiter that got the lock on a name removed
//! meanwhile tries again), plus a lock per directory within the process: on NFS, Linux's
//! `flock` is a POSIX lock of the whole process, which would not keep two threads apart.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};

use crate::error::{Error, Op, Result};
use crate::future::lock;

use super::TEMP_PREFIX;

/// The name of the lock file a committing save holds in its directory.
pub const LOCK_NAME: &str = ".gpufile-lock";

/// This host, as temporary names carry it: the host name's letters and digits (at most 32),
/// `unknown` where it has none.
pub fn host_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: `buf` is writable for its length; gethostname NUL-terminates within it or
        // truncates, and the last byte stays 0.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
        let name = match rc {
            0 => &buf[..buf.iter().position(|b| *b == 0).unwrap_or(0)],
            _ => &[][..],
        };
        let tag: String = name
            .iter()
            .filter(|b| b.is_ascii_alphanumeric())
            .take(32)
            .map(|b| *b as char)
            .collect();
        if tag.is_empty() {
            "unknown".to_owned()
        } else {
            tag
        }
    })
}

/// Who wrote a temporary, as its name says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TempOwner {
    /// The writer's host tag ([`host_tag`]); `None` for names of gpufile versions that wrote
    /// none, which were written on this host's file systems.
    pub host: Option<String>,
    /// The writer's process id.
    pub pid: u32,
}

/// The owner written into a temporary name (`.gpufile-tmp-h<host>-<pid>-...`, or the older
/// `.gpufile-tmp-<pid>-...`); `None` for a name that is no temporary of gpufile's.
pub fn temp_owner(name: &OsStr) -> Option<TempOwner> {
    let rest = name.as_bytes().strip_prefix(TEMP_PREFIX.as_bytes())?;
    let rest = std::str::from_utf8(rest).ok()?;
    let mut fields = rest.splitn(3, '-');
    let first = fields.next()?;
    let (host, pid) = match first.strip_prefix('h') {
        Some(host) => (Some(host.to_owned()), fields.next()?),
        None => (None, first),
    };
    Some(TempOwner {
        host,
        pid: pid.parse().ok()?,
    })
}

/// Whether process `pid` of this host is running (or cannot be asked: kept, to be safe).
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Whether some open file description holds `flock` on `path` (a live writer's temporary).
/// A file that cannot be opened counts as held (it is left alone).
fn held(path: &Path) -> bool {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let Ok(file) = opened else {
        return true;
    };
    // SAFETY: flock on a descriptor this function owns; released when `file` closes.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    rc != 0
}

/// Removes from `dir` the temporaries that no save will publish: written by a process of this
/// host that is gone, held by no writer's `flock`, and not named in `keep` (names an index
/// published before still points at). Returns how many were removed; one that cannot be
/// removed is left, said in a notice. Call it holding the directory's [`DirLock`].
pub fn remove_stale_temporaries(dir: &Path, keep: &HashSet<OsString>) -> Result<usize> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::os(Op::Open, dir, 0, 0, e))?;
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if keep.contains(&name) {
            continue;
        }
        let Some(owner) = temp_owner(&name) else {
            continue;
        };
        if owner.host.as_deref().is_some_and(|h| h != host_tag()) || process_alive(owner.pid) {
            continue;
        }
        let path = dir.join(&name);
        // Only a regular file is a temporary (a directory of that name is someone else's).
        let is_file = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
        if !is_file || held(&path) {
            continue;
        }
        // One that cannot be removed (another user's, in a sticky directory) stays, said in a
        // notice: it takes no final name, so saves go on beside it.
        match super::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(e) => crate::observe::notice(
                "stale-temporary",
                format!(
                    "{} is left in place ({e}): saves go on beside it",
                    path.display()
                ),
            ),
        }
    }
    Ok(removed)
}

/// Directories whose lock a thread of process `.0` holds (or waits for on the file), by device
/// and inode. A forked child finds its parent's table, whose threads it does not have: it
/// starts a table of its own, as the engine does (`Engine::global`).
static HELD: Mutex<Option<Held>> = Mutex::new(None);
static RELEASED: Condvar = Condvar::new();

/// A process id and the (device, inode) of the directories its threads hold.
type Held = (u32, HashSet<(u64, u64)>);

/// This process's set in `held`, made anew where it is another process's.
fn held_here(held: &mut Option<Held>) -> &mut HashSet<(u64, u64)> {
    let pid = crate::posix::pid();
    if held.as_ref().is_none_or(|(p, _)| *p != pid) {
        *held = Some((pid, HashSet::new()));
    }
    &mut held.as_mut().expect("set above").1
}

/// The commit lock of one directory (see the module's header); released when dropped.
#[derive(Debug)]
pub struct DirLock {
    key: (u64, u64),
    path: PathBuf,
    file: Option<File>,
    /// The process that took it: a forked child's copy is not its to release.
    pid: u32,
}

impl DirLock {
    /// Waits until no other save (thread, process, or host where the file system carries
    /// `flock`) holds `dir`'s lock, then holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let meta = std::fs::metadata(dir).map_err(|e| Error::os(Op::Stat, dir, 0, 0, e))?;
        let key = (meta.dev(), meta.ino());
        {
            let mut held = lock(&HELD);
            while held_here(&mut held).contains(&key) {
                held = RELEASED.wait(held).unwrap_or_else(|e| e.into_inner());
            }
            held_here(&mut held).insert(key);
        }
        let mut guard = DirLock {
            key,
            path: dir.join(LOCK_NAME),
            file: None,
            pid: crate::posix::pid(),
        };
        guard.file = Some(lock_file(&guard.path)?);
        Ok(guard)
    }
}

/// Opens (creating) and locks the lock file at `path`, until the name still holds the file
/// locked (a holder removes the name before it lets go).
///
/// The file is opened read-only (`flock` needs no more) and made readable by everyone: in a
/// directory shared by several users, one user's lock file (held, or left by a killed commit)
/// is another's to wait on and lock, never a `PermissionError`. One that this process may not
/// read is an error naming it and its owner.
fn lock_file(path: &Path) -> Result<File> {
    let dir = path.parent().unwrap_or(Path::new("."));
    loop {
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path);
        let file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let created = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(path);
                match created {
                    Ok(f) => {
                        // Readable whatever the umask: other users lock it too.
                        // SAFETY: fchmod on the descriptor `f` owns; no memory is passed.
                        unsafe { libc::fchmod(f.as_raw_fd(), 0o644) };
                        f
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(Error::os(Op::Create, dir, 0, 0, e)),
                }
            }
            Err(e) => return Err(unreadable_lock(path, e)),
        };
        loop {
            // SAFETY: flock on the descriptor `file` owns; released when it closes.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(Error::os(Op::Lock, path, 0, 0, e));
            }
        }
        let mine = file
            .metadata()
            .map_err(|e| Error::os(Op::Stat, path, 0, 0, e))?;
        match std::fs::symlink_metadata(path) {
            Ok(now) if now.dev() == mine.dev() && now.ino() == mine.ino() => return Ok(file),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::os(Op::Stat, path, 0, 0, e)),
        }
        // A name removed meanwhile: unlocked, not only closed, as a child forked while this
        // thread waited holds a copy of the descriptor, which would keep the lock held (and
        // a waiter of its own stuck on it) as long as it lives.
        // SAFETY: flock on the descriptor `file` owns, open until it drops.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The error of a lock file this process may not open: `open` of the file, its errno. Where it
/// is another user's that this process may not read, a notice says whose and what to do (a
/// lock file exists only while a commit holds it, or after one was killed).
fn unreadable_lock(path: &Path, e: io::Error) -> Error {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        crate::observe::notice(
            "commit-lock",
            format!(
                "the commit lock {} (owner uid {}, mode {:04o}) cannot be opened by this \
                 process ({e}), so no save can commit there; once no save is committing into \
                 the directory, remove the file",
                path.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        );
    }
    Error::os(Op::Open, path, 0, 0, e)
}

impl Drop for DirLock {
    fn drop(&mut self) {
        if self.pid != crate::posix::pid() {
            // A forked child's copy: the lock is its parent's, and so is the table's entry.
            // Closing the inherited descriptor leaves the parent's lock held.
            drop(self.file.take());
            return;
        }
        if let Some(file) = self.file.take() {
            // Removed while still locked, so that whoever opens the name next makes a new file
            // (see lock_file); then unlocked, not only closed: a child forked meanwhile holds
            // a copy of the descriptor, which would keep the lock held as long as it lives.
            let _ = std::fs::remove_file(&self.path);
            // SAFETY: flock on the descriptor `file` owns, open until it drops below.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
            drop(file);
        }
        let mut held = lock(&HELD);
        held_here(&mut held).remove(&self.key);
        RELEASED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn owners_are_read_from_new_and_old_names() {
        let name = format!(
            "{TEMP_PREFIX}h{}-1234-5-0000abcd.model.safetensors",
            host_tag()
        );
        assert_eq!(
            temp_owner(OsStr::new(&name)),
            Some(TempOwner {
                host: Some(host_tag().to_owned()),
                pid: 1234
            })
        );
        let old = format!("{TEMP_PREFIX}77-1-00000001.x.bin");
        assert_eq!(
            temp_owner(OsStr::new(&old)),
            Some(TempOwner {
                host: None,
                pid: 77
            })
        );
        assert_eq!(temp_owner(OsStr::new("model.safetensors")), None);
        assert_eq!(temp_owner(OsStr::new(&format!("{TEMP_PREFIX}hx-y"))), None);
    }

    /// A process id that is not running here (a child that has exited and been reaped).
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn only_this_hosts_temporaries_of_dead_unlocked_writers_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        let me = std::process::id();
        let here = host_tag();
        let names = [
            format!("{TEMP_PREFIX}h{here}-{dead}-1-00000000.a.bin"), // removed
            format!("{TEMP_PREFIX}{dead}-1-00000000.b.bin"),         // older name: removed
            format!("{TEMP_PREFIX}h{here}-{me}-1-00000000.c.bin"),   // live writer
            format!("{TEMP_PREFIX}hotherhost-{dead}-1-00000000.d.bin"), // another host's
            format!("{TEMP_PREFIX}h{here}-{dead}-2-00000000.e.bin"), // named by an index
            format!("{TEMP_PREFIX}h{here}-{dead}-3-00000000.f.bin"), // flock held
            "model.safetensors".to_owned(),
        ];
        for n in &names {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        let holder = File::open(dir.path().join(&names[5])).unwrap();
        // SAFETY: flock on a descriptor the test owns.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        let keep = HashSet::from([OsString::from(&names[4])]);
        assert_eq!(remove_stale_temporaries(dir.path(), &keep).unwrap(), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want: Vec<String> = names[2..].to_vec();
        want.sort();
        assert_eq!(left, want);
    }

    #[test]
    fn the_lock_keeps_threads_apart_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (dir, inside, most) = (dir.path().to_owned(), inside.clone(), most.clone());
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let _g = DirLock::acquire(&dir).unwrap();
                        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(200));
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(most.load(Ordering::SeqCst), 1);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let e = DirLock::acquire(&missing).unwrap_err();
        assert!(
            matches!(&e, Error::Os { errno, .. } if *errno == libc::ENOENT),
            "{e:?}"
        );
    }
}
