//! gpufile's POSIX path for host memory: pread/pwrite loops that finish what they start.
//!
//! A regular file may return fewer bytes than asked (signals, very large requests: Linux moves at
//! most 0x7ffff000 bytes per call); these loops go on from where the kernel stopped, retry EINTR
//! and EAGAIN, and turn a 0-byte read into [`Error::UnexpectedEof`].

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Op, Result};

/// This process's id, cached: `getpid` is a system call, and the engine checks it on every
/// request (a forked child must not use its parent's workers). A `pthread_atfork` child handler,
/// registered on first use, clears the cache in every forked child; until it is registered (and
/// in a process where it could not be) the id is not cached.
///
/// The registration never blocks another caller: a child forked while a thread of its parent
/// was registering (a `Once` would then wait forever in the child) inherits a registration
/// "in progress" and asks `getpid` every time.
pub fn pid() -> u32 {
    use std::sync::atomic::{AtomicU32, AtomicU8};
    static PID: AtomicU32 = AtomicU32::new(0);
    /// 0: not registered; 1: being registered; 2: registered; 3: registration failed.
    static HOOK: AtomicU8 = AtomicU8::new(0);
    extern "C" fn forked() {
        PID.store(0, Ordering::Relaxed);
    }
    if HOOK.load(Ordering::Acquire) != 2 {
        if HOOK
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // SAFETY: registers a child handler that only stores to an atomic (async-signal-safe,
            // as a handler run in a forked child must be); the handler is a plain `extern "C"`
            // fn that lives for the whole process.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(forked)) };
            HOOK.store(if rc == 0 { 2 } else { 3 }, Ordering::Release);
        }
        if HOOK.load(Ordering::Acquire) != 2 {
            return std::process::id();
        }
    }
    match PID.load(Ordering::Relaxed) {
        0 => {
            let id = std::process::id();
            PID.store(id, Ordering::Relaxed);
            id
        }
        id => id,
    }
}

/// Opens `path` for I/O at offsets: a regular file or a block or character device. A FIFO or a
/// socket is [`Error::NotSeekable`] and a directory [`Error::Os`] with `EISDIR` (as Python's
/// `open`). The open itself does not block: `open(2)` of a FIFO waits for its other end, in the
/// kernel, where no signal ends the wait; so the file is opened with `O_NONBLOCK`, looked at,
/// and `O_NONBLOCK` is cleared once it is a file gpufile reads and writes.
///
/// `options` must carry no custom flags of its own (they are replaced).
pub(crate) fn open_file(options: &mut OpenOptions, path: &Path) -> Result<(File, Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    // A FIFO known by its path is refused without opening it: even a short open and close
    // would release a writer blocked on it or hand a reader an end of file.
    if let Some(refused) = std::fs::metadata(path)
        .ok()
        .and_then(|m| not_seekable(&m, path))
    {
        return Err(refused);
    }
    let file = match options.custom_flags(libc::O_NONBLOCK).open(path) {
        Ok(f) => f,
        // A regular file under a conflicting lease answers EWOULDBLOCK to a non-blocking open:
        // open it as usual, waiting for the lease as any other program would.
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => options
            .custom_flags(0)
            .open(path)
            .map_err(|e| Error::os(Op::Open, path, 0, 0, e))?,
        Err(e) => {
            // ENXIO: a FIFO opened for writing while no one reads it, or a socket.
            if e.raw_os_error() == Some(libc::ENXIO) {
                let meta = std::fs::metadata(path);
                if let Some(refused) = meta.ok().and_then(|m| not_seekable(&m, path)) {
                    return Err(refused);
                }
            }
            return Err(Error::os(Op::Open, path, 0, 0, e));
        }
    };
    let meta = seekable_blocking(&file, path)?;
    Ok((file, meta))
}

/// A FIFO or a socket as [`Error::NotSeekable`]; `None` for what gpufile reads at offsets.
fn not_seekable(meta: &Metadata, path: &Path) -> Option<Error> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = match () {
        _ if t.is_fifo() => "a FIFO",
        _ if t.is_socket() => "a socket",
        _ => return None,
    };
    Some(Error::NotSeekable {
        path: path.to_owned(),
        what,
    })
}

/// The metadata of `file` where it is a file gpufile reads and writes at offsets (not a FIFO,
/// socket, terminal or directory), its descriptor's flags left as they are.
pub(crate) fn seekable(file: &File, path: &Path) -> Result<Metadata> {
    let meta = file
        .metadata()
        .map_err(|e| Error::os(Op::Stat, path, 0, 0, e))?;
    if let Some(refused) = not_seekable(&meta, path) {
        return Err(refused);
    }
    if meta.is_dir() {
        let e = io::Error::from_raw_os_error(libc::EISDIR);
        return Err(Error::os(Op::Open, path, 0, 0, e));
    }
    Ok(meta)
}

/// For a file opened with `O_NONBLOCK` (see [`open_file`]): its metadata once it is a file
/// gpufile reads and writes at offsets (not a FIFO, a socket or a directory), with
/// `O_NONBLOCK` cleared.
pub(crate) fn seekable_blocking(file: &File, path: &Path) -> Result<Metadata> {
    let meta = seekable(file, path)?;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL and F_SETFL on the descriptor `file` owns; no memory is passed.
    let cleared = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if !cleared {
        return Err(Error::os(Op::Open, path, 0, 0, io::Error::last_os_error()));
    }
    Ok(meta)
}

/// A seam for tests: faults injected into gpufile's own `pread`/`pwrite` calls (host and device
/// paths alike). Off unless [`faults::set`] is called; when off it costs one relaxed load.
pub mod faults {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    /// Which call a rule applies to: [`Call::Read`] is `pread`, `Write` is `pwrite`.
    pub use crate::request::Direction as Call;

    /// What happens instead of (or to) the call.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Fault {
        /// The call fails with EINTR (gpufile retries).
        Eintr,
        /// The call fails with EAGAIN (gpufile retries).
        Eagain,
        /// The call moves at most half of what was asked (gpufile goes on).
        Short,
        /// The call fails with this errno.
        Errno(i32),
        /// The call waits until this many calls got this fault (at most [`TOGETHER_WAIT`]),
        /// then each fails with the errno: failures of concurrent tasks, as a full disk gives
        /// them, at once and on every run.
        Together(i32, u64),
        /// The call panics (what a bug in a task does): the request must fail with
        /// [`crate::Error::TaskPanicked`] and its worker go on.
        Panic,
    }

    /// Inject `fault` into `times` calls of kind `call`, after letting `after` calls through.
    #[derive(Clone, Copy, Debug)]
    pub struct Rule {
        /// The call.
        pub call: Call,
        /// Calls to let through first.
        pub after: u64,
        /// The fault.
        pub fault: Fault,
        /// How many calls to hit.
        pub times: u64,
    }

    static ACTIVE: AtomicBool = AtomicBool::new(false);
    static RULES: Mutex<Vec<(Rule, u64)>> = Mutex::new(Vec::new());
    /// Calls that reached a [`Fault::Together`], and the condvar they wait on.
    static ARRIVED: Mutex<u64> = Mutex::new(0);
    static MET: std::sync::Condvar = std::sync::Condvar::new();

    /// Longest a [`Fault::Together`] call waits for the others.
    pub const TOGETHER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

    /// Whether any rule is set (transfers that bypass the seam, such as io_uring's, then go
    /// through it instead).
    pub fn active() -> bool {
        ACTIVE.load(Ordering::Relaxed)
    }

    /// Replaces the rules (an empty list turns injection off).
    pub fn set(rules: Vec<Rule>) {
        let mut r = RULES.lock().unwrap_or_else(|e| e.into_inner());
        *r = rules.into_iter().map(|rule| (rule, 0)).collect();
        *ARRIVED.lock().unwrap_or_else(|e| e.into_inner()) = 0;
        ACTIVE.store(!r.is_empty(), Ordering::SeqCst);
    }

    /// Waits until `calls` calls have arrived here (or [`TOGETHER_WAIT`] passed).
    pub(crate) fn meet(calls: u64) {
        let mut arrived = ARRIVED.lock().unwrap_or_else(|e| e.into_inner());
        *arrived += 1;
        MET.notify_all();
        let _met = MET
            .wait_timeout_while(arrived, TOGETHER_WAIT, |n| *n < calls)
            .unwrap_or_else(|e| e.into_inner());
    }

    /// The fault for this call, if a rule says so.
    pub(crate) fn next(call: Call) -> Option<Fault> {
        if !ACTIVE.load(Ordering::Relaxed) {
            return None;
        }
        let mut rules = RULES.lock().unwrap_or_else(|e| e.into_inner());
        let mut hit = None;
        for (rule, seen) in rules.iter_mut().filter(|(r, _)| r.call == call) {
            *seen += 1;
            if hit.is_none() && *seen > rule.after && *seen <= rule.after + rule.times {
                hit = Some(rule.fault);
            }
        }
        hit
    }
}

/// `pread`/`pwrite` through the fault seam: `Ok(n)` or the errno.
///
/// # Safety
/// `buf` must be valid for `len` bytes (writes for a read, reads for a write).
unsafe fn transfer(call: faults::Call, fd: RawFd, buf: *mut u8, len: usize, at: u64) -> isize {
    let mut len = len;
    match faults::next(call) {
        Some(faults::Fault::Eintr) => return fail(libc::EINTR),
        Some(faults::Fault::Eagain) => return fail(libc::EAGAIN),
        Some(faults::Fault::Errno(e)) => return fail(e),
        Some(faults::Fault::Together(e, calls)) => {
            faults::meet(calls);
            return fail(e);
        }
        Some(faults::Fault::Short) => len = (len / 2).max(1),
        Some(faults::Fault::Panic) => {
            panic!("injected panic in {call:?} of {len} bytes at offset {at}")
        }
        None => {}
    }
    // SAFETY: the caller's contract.
    unsafe {
        match call {
            faults::Call::Read => libc::pread(fd, buf.cast(), len, at as libc::off_t),
            faults::Call::Write => libc::pwrite(fd, buf.cast(), len, at as libc::off_t),
        }
    }
}

fn fail(errno: i32) -> isize {
    // SAFETY: errno is thread-local; setting it is what a failing syscall does.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// Reads exactly `len` bytes at `offset` into `buf`.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes and not accessed by anyone else until this
/// returns.
pub(crate) unsafe fn pread_all(
    fd: RawFd,
    path: &Path,
    buf: *mut u8,
    len: usize,
    offset: u64,
    progress: &AtomicU64,
) -> Result<usize> {
    // SAFETY: the caller's contract, as `transfer_all` needs it for a read.
    unsafe { transfer_all(faults::Call::Read, fd, path, buf, len, offset, progress) }
}

/// Writes exactly `len` bytes of `buf` at `offset`.
///
/// # Safety
/// `buf` must be valid for reads of `len` bytes and not written by anyone until this returns.
pub(crate) unsafe fn pwrite_all(
    fd: RawFd,
    path: &Path,
    buf: *const u8,
    len: usize,
    offset: u64,
    progress: &AtomicU64,
) -> Result<usize> {
    // SAFETY: the caller's contract; a write only reads through the pointer.
    unsafe {
        transfer_all(
            faults::Call::Write,
            fd,
            path,
            buf.cast_mut(),
            len,
            offset,
            progress,
        )
    }
}

/// The loop of both: goes on after short transfers, retries EINTR/EAGAIN, and turns a 0-byte
/// transfer into end of file (reads) or a full device (writes).
///
/// # Safety
/// `buf` must be valid for `len` bytes in the direction of `call`.
unsafe fn transfer_all(
    call: faults::Call,
    fd: RawFd,
    path: &Path,
    buf: *mut u8,
    len: usize,
    offset: u64,
    progress: &AtomicU64,
) -> Result<usize> {
    let op = match call {
        faults::Call::Read => Op::Read,
        faults::Call::Write => Op::Write,
    };
    let mut done = 0usize;
    while done < len {
        let at = offset + done as u64;
        // SAFETY: `buf + done .. buf + len` lies inside the caller's buffer (see # Safety).
        let n = unsafe { transfer(call, fd, buf.add(done), len - done, at) };
        match n {
            // A read: the file shrank after the size check (or is not a regular file).
            0 if call == faults::Call::Read => {
                return Err(Error::UnexpectedEof {
                    path: path.to_owned(),
                    offset: at,
                    len: len - done,
                    file_size: size_now(fd).unwrap_or(at),
                });
            }
            // A write of a non-zero count returning 0: the device takes no more.
            0 => {
                let err = io::Error::from_raw_os_error(libc::ENOSPC);
                return Err(Error::os(op, path, at, len - done, err));
            }
            n if n > 0 => {
                done += n as usize;
                progress.fetch_add(n as u64, Ordering::Relaxed);
            }
            _ => {
                let err = io::Error::last_os_error();
                if !retryable(&err) {
                    return Err(Error::os(op, path, at, len - done, err));
                }
            }
        }
    }
    Ok(len)
}

/// The file's size now (`fstat`): what a read cut short by a shrinking file reports, rather
/// than the offset where it stopped. `None` where `fstat` fails.
pub(crate) fn size_now(fd: RawFd) -> Option<u64> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable stat buffer; fstat fills it on success.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    // SAFETY: fstat returned 0, so `st` is initialised.
    (rc == 0).then(|| unsafe { st.assume_init() }.st_size as u64)
}

fn retryable(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_forked_child_gets_its_own_pid_not_the_cached_one() {
        let parent = super::pid();
        assert_eq!(parent, std::process::id());
        assert_eq!(super::pid(), parent); // cached now
                                          // SAFETY: the child only calls `pid` (atomics and getpid) and `_exit`.
        match unsafe { libc::fork() } {
            0 => {
                // SAFETY: getpid has no preconditions.
                let own = unsafe { libc::getpid() } as u32;
                let ok = super::pid() == own && own != parent && super::pid() == own;
                // SAFETY: ends the child without running the parent's test harness.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            -1 => panic!("fork: {}", io::Error::last_os_error()),
            child => {
                let mut status = 0;
                // SAFETY: waits for the child just forked; `status` is a plain out-parameter.
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "the child saw its parent's pid (status {status:#x})"
                );
            }
        }
        assert_eq!(super::pid(), parent);
    }
    use super::*;
    use std::os::fd::AsRawFd;

    /// A file truncated after the size check: the read stops where the data ends and reports that
    /// offset and the size the file has now, not the offset again as the size.
    #[test]
    fn a_read_cut_short_by_truncation_reports_where_it_stopped_and_the_size_now() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shrinks.bin");
        std::fs::write(&path, vec![7u8; 100]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // Checked at 100 bytes; another process truncates it to 40 before the read runs.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(40)
            .unwrap();
        let mut buf = vec![0u8; 80];
        let progress = AtomicU64::new(0);
        // SAFETY: `buf` holds 80 writable bytes, used by nobody else during the call.
        let r = unsafe { pread_all(file.as_raw_fd(), &path, buf.as_mut_ptr(), 80, 10, &progress) };
        match r {
            Err(Error::UnexpectedEof {
                offset,
                len,
                file_size,
                ..
            }) => assert_eq!((offset, len, file_size), (40, 50, 40)),
            other => panic!("expected UnexpectedEof, got {other:?}"),
        }
        assert_eq!(progress.load(Ordering::Relaxed), 30);
        assert_eq!(&buf[..30], &[7u8; 30]);

        // Read from past the new end: nothing moves; the offset is the request's, the size 40.
        // SAFETY: as above (20 of the 80 bytes).
        let r = unsafe { pread_all(file.as_raw_fd(), &path, buf.as_mut_ptr(), 20, 60, &progress) };
        let e = r.unwrap_err();
        assert!(
            e.to_string().contains("at offset 60") && e.to_string().contains("(40 bytes)"),
            "{e}"
        );
    }
}
