//! io_uring for gathers: a group of ranges queued and submitted together, up to [`DEPTH`] in
//! flight, instead of one `pread`/`pwrite` system call per range.
//!
//! How to use:
//! 1. [`probe`] says once per process whether io_uring works here, or why not (missing,
//!    refused by the kernel or a seccomp policy, too old); [`crate::plan::choose_host_io`]
//!    turns that and the `io_uring` setting into the decision a request reports.
//! 2. [`transfer`] moves a list of [`Piece`]s on this thread's ring (made on the thread's first
//!    use, kept for the thread's life). Short transfers, `EINTR` and `EAGAIN` are finished with
//!    `pread`/`pwrite`, so a caller sees the same results and errors as on the fallback.
//!
//! The file descriptors of a group of at least [`FIXED_MIN`] ranges are registered with the
//! ring for the group (two update calls per group): each queued op then skips the shared file
//! table's reference count, and no ring keeps a file open once its group is done. Buffers are not registered: the
//! destinations are the caller's memory, new with every request, and registering them pins
//! their pages, which costs about what the copy it would save does.

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use io_uring::{opcode, types, IoUring, Probe};

use crate::error::{Error, Op, Result};
use crate::plan::HostIoReason;
use crate::posix;
use crate::request::Direction;

/// Ops in flight on one ring: deep enough that one worker keeps a disk's queue full for cold
/// `O_DIRECT` ranges (NVMe random reads saturate near depth 64).
pub const DEPTH: u32 = 64;

/// Fewest pieces of a group whose descriptors are registered with the ring (two extra calls
/// per group, against one reference count per piece saved).
pub const FIXED_MIN: usize = 16;

/// One transfer of a group: `len` bytes at `offset` of `fd`, to or from memory at `ptr`.
#[derive(Clone, Copy, Debug)]
pub struct Piece {
    /// The descriptor (buffered, or the file's `O_DIRECT` one).
    pub fd: RawFd,
    /// The memory.
    pub ptr: *mut u8,
    /// Bytes.
    pub len: usize,
    /// File offset.
    pub offset: u64,
}

/// Whether io_uring can run a gather here (a text saying what was found), or why not; asked of
/// the kernel once per process.
pub fn probe() -> std::result::Result<String, HostIoReason> {
    static PROBED: OnceLock<std::result::Result<String, HostIoReason>> = OnceLock::new();
    PROBED.get_or_init(probe_now).clone()
}

fn probe_now() -> std::result::Result<String, HostIoReason> {
    let ring = IoUring::new(2).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSYS) => {
            HostIoReason::Missing("io_uring_setup(2) is not in this kernel (ENOSYS)".into())
        }
        Some(libc::EPERM) => HostIoReason::Refused(
            "io_uring_setup(2) is not permitted (EPERM): kernel.io_uring_disabled or a seccomp \
             policy (containers often refuse it)"
                .into(),
        ),
        _ => HostIoReason::Refused(format!("io_uring_setup(2) failed: {e}")),
    })?;
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| {
        HostIoReason::OldKernel(format!(
            "IORING_REGISTER_PROBE failed ({e}): Linux older than 5.6"
        ))
    })?;
    for (code, name) in [
        (opcode::Read::CODE, "IORING_OP_READ"),
        (opcode::Write::CODE, "IORING_OP_WRITE"),
    ] {
        if !probe.is_supported(code) {
            return Err(HostIoReason::OldKernel(format!(
                "{name} unsupported: Linux older than 5.6"
            )));
        }
    }
    Ok("IORING_OP_READ and IORING_OP_WRITE supported".into())
}

/// A worker's ring.
struct Ring {
    ring: IoUring,
    /// The process that made it: a forked child must not use its parent's ring (both would
    /// share its queues).
    pid: u32,
    /// Whether the ring has a table of two registered files (Linux 5.19 makes sparse tables;
    /// older kernels use the descriptors as they are).
    fixed: bool,
    /// Its submission failed with ops in flight: it is never used again.
    dead: bool,
}

impl Ring {
    fn new() -> std::io::Result<Ring> {
        let ring = IoUring::new(DEPTH)?;
        let fixed = ring.submitter().register_files_sparse(2).is_ok();
        Ok(Ring {
            ring,
            pid: posix::pid(),
            fixed,
            dead: false,
        })
    }
}

thread_local! {
    static RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// Moves every piece (reads into or writes from its memory, as `direction` says) on this
/// thread's ring; pieces whose ring cannot be made go through `pread`/`pwrite`. `fds` are the
/// two descriptors the pieces use (the buffered one and the `O_DIRECT` one, or -1). Returns
/// when no piece is in flight any more, with the first error, if any (errors name `path`).
///
/// # Safety
/// Every piece's memory must be valid for `len` bytes in the direction of the transfer (writable
/// for a read) and untouched by anyone else until this returns.
pub unsafe fn transfer(
    direction: Direction,
    fds: [RawFd; 2],
    path: &Path,
    pieces: &[Piece],
    progress: &AtomicU64,
) -> Result<()> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_some_and(|r| r.dead) {
            // SAFETY: the caller's contract.
            return unsafe { fallback(direction, path, pieces, progress) };
        }
        if slot.as_ref().is_some_and(|r| r.pid != posix::pid()) {
            // The parent's ring: closing it here would cancel the parent's ops.
            std::mem::forget(slot.take());
        }
        if slot.is_none() {
            *slot = Ring::new().ok();
        }
        match slot.as_mut() {
            // SAFETY: the caller's contract.
            Some(ring) => unsafe { run(ring, direction, fds, path, pieces, progress) },
            // SAFETY: the caller's contract.
            None => unsafe { fallback(direction, path, pieces, progress) },
        }
    })
}

/// Every piece through `pread`/`pwrite`, one after the other.
///
/// # Safety
/// As for [`transfer`].
pub unsafe fn fallback(
    direction: Direction,
    path: &Path,
    pieces: &[Piece],
    progress: &AtomicU64,
) -> Result<()> {
    for p in pieces {
        // SAFETY: the caller's contract, per piece.
        unsafe { finish(direction, path, *p, 0, progress) }?;
    }
    Ok(())
}

/// Finishes piece `p` from byte `done` on with `pread`/`pwrite`.
///
/// # Safety
/// As for [`transfer`], for `p`.
unsafe fn finish(
    direction: Direction,
    path: &Path,
    p: Piece,
    done: usize,
    progress: &AtomicU64,
) -> Result<()> {
    let (ptr, len, at) = (
        p.ptr.wrapping_add(done),
        p.len - done,
        p.offset + done as u64,
    );
    // SAFETY: `ptr..ptr + len` is the rest of the piece's memory (the caller's contract).
    unsafe {
        match direction {
            Direction::Read => posix::pread_all(p.fd, path, ptr, len, at, progress),
            Direction::Write => posix::pwrite_all(p.fd, path, ptr, len, at, progress),
        }
    }
    .map(drop)
}

/// How long a ring whose submission fails waits for the ops it has in flight before it is
/// abandoned (never seen: `io_uring_enter` fails only on a broken ring).
const DRAIN_TRIES: u32 = 10_000;

/// [`transfer`] on `ring`.
///
/// # Safety
/// As for [`transfer`].
unsafe fn run(
    ring: &mut Ring,
    direction: Direction,
    fds: [RawFd; 2],
    path: &Path,
    pieces: &[Piece],
    progress: &AtomicU64,
) -> Result<()> {
    // Registering costs two calls per group: worth it for groups of many ranges only.
    let fixed = ring.fixed
        && pieces.len() >= FIXED_MIN
        && ring.ring.submitter().register_files_update(0, &fds).is_ok();
    let op = match direction {
        Direction::Read => Op::Read,
        Direction::Write => Op::Write,
    };
    let (mut next, mut in_flight) = (0usize, 0usize);
    let mut first: Option<Error> = None;
    let mut broken = false;
    let mut tries = 0u32;
    while (next < pieces.len() && first.is_none()) || in_flight > 0 {
        {
            let mut sq = ring.ring.submission();
            while next < pieces.len() && in_flight < DEPTH as usize && first.is_none() && !broken {
                let p = pieces[next];
                let entry = entry(direction, p, fixed, &fds).user_data(next as u64);
                // SAFETY: the piece's memory stays valid until its completion is reaped below
                // (this function returns only with nothing in flight).
                if unsafe { sq.push(&entry) }.is_err() {
                    break;
                }
                next += 1;
                in_flight += 1;
            }
        }
        match ring.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => {
                // A broken ring: no more ops go on it; those in flight are waited for.
                if !broken {
                    first.get_or_insert(Error::os(op, path, 0, 0, e));
                    broken = true;
                }
                tries += 1;
                if tries > DRAIN_TRIES {
                    // Nothing more can be known of its ops: the ring is never used again.
                    ring.dead = true;
                    return Err(first.unwrap_or(Error::Cancelled));
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
        for cqe in ring.ring.completion() {
            in_flight -= 1;
            let p = pieces[cqe.user_data() as usize];
            let res = cqe.result();
            if res >= 0 && res as usize == p.len {
                progress.fetch_add(p.len as u64, Ordering::Relaxed);
                continue;
            }
            let r = match res {
                // Short, interrupted or would block: finished as the fallback would.
                n if n >= 0 || n == -libc::EINTR || n == -libc::EAGAIN => {
                    let done = n.max(0) as usize;
                    progress.fetch_add(done as u64, Ordering::Relaxed);
                    // SAFETY: the caller's contract, for the rest of this piece.
                    unsafe { finish(direction, path, p, done, progress) }
                }
                errno => Err(Error::os(
                    op,
                    path,
                    p.offset,
                    p.len,
                    std::io::Error::from_raw_os_error(-errno),
                )),
            };
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        }
    }
    if fixed {
        // The ring holds no file once its group is done.
        let _ = ring.ring.submitter().register_files_update(0, &[-1, -1]);
    }
    first.map_or(Ok(()), Err)
}

/// The queue entry of `p`: on the registered file where the ring has the table.
fn entry(direction: Direction, p: Piece, fixed: bool, fds: &[RawFd; 2]) -> io_uring::squeue::Entry {
    let len = u32::try_from(p.len).unwrap_or(u32::MAX);
    let slot = u32::from(p.fd != fds[0]);
    macro_rules! build {
        ($target:expr) => {
            match direction {
                Direction::Read => opcode::Read::new($target, p.ptr, len)
                    .offset(p.offset)
                    .build(),
                Direction::Write => opcode::Write::new($target, p.ptr.cast_const(), len)
                    .offset(p.offset)
                    .build(),
            }
        };
    }
    match fixed {
        true => build!(types::Fixed(slot)),
        false => build!(types::Fd(p.fd)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    /// Skips a test (saying why) where io_uring does not run here.
    macro_rules! require_io_uring {
        () => {
            if let Err(why) = probe() {
                eprintln!("skipped: {why}");
                return;
            }
        };
    }

    #[test]
    fn a_group_of_reads_lands_byte_exact_and_past_the_end_is_eof() {
        require_io_uring!();
        let data: Vec<u8> = (0..1 << 20)
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        let fd = f.as_file().as_raw_fd();
        let n = 300; // more than DEPTH: the queue refills
        let mut out = vec![0u8; n * 997];
        let pieces: Vec<Piece> = (0..n)
            .map(|i| Piece {
                fd,
                ptr: out.as_mut_ptr().wrapping_add(i * 997),
                len: 997,
                offset: ((i * 7919) % 1000 * 1000) as u64,
            })
            .collect();
        let progress = AtomicU64::new(0);
        // SAFETY: every piece lies in `out`, borrowed by nobody else during the call.
        unsafe { transfer(Direction::Read, [fd, -1], f.path(), &pieces, &progress) }.unwrap();
        for i in 0..n {
            let at = (i * 7919) % 1000 * 1000;
            assert_eq!(&out[i * 997..][..997], &data[at..at + 997], "piece {i}");
        }
        assert_eq!(progress.load(Ordering::Relaxed), (n * 997) as u64);
        // A piece past the end: the short read is finished by pread, which says EOF.
        let mut tail = vec![0u8; 100];
        let past = [Piece {
            fd,
            ptr: tail.as_mut_ptr(),
            len: 100,
            offset: (1 << 20) - 50,
        }];
        // SAFETY: as above.
        let e = unsafe { transfer(Direction::Read, [fd, -1], f.path(), &past, &progress) };
        assert!(matches!(e, Err(Error::UnexpectedEof { .. })), "{e:?}");
        assert_eq!(&tail[..50], &data[(1 << 20) - 50..]);
    }

    #[test]
    fn a_bad_descriptor_fails_with_the_os_error_of_its_range() {
        require_io_uring!();
        let mut buf = vec![0u8; 10];
        let pieces = [Piece {
            fd: 1 << 20,
            ptr: buf.as_mut_ptr(),
            len: 10,
            offset: 40,
        }];
        let progress = AtomicU64::new(0);
        // SAFETY: the piece lies in `buf`.
        let e = unsafe {
            transfer(
                Direction::Read,
                [1 << 20, -1],
                Path::new("/nonexistent"),
                &pieces,
                &progress,
            )
        };
        match e {
            Err(Error::Os {
                errno, offset, len, ..
            }) => {
                assert_eq!((errno, offset, len), (libc::EBADF, 40, 10));
            }
            other => panic!("{other:?}"),
        }
    }
}
