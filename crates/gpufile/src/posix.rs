//! gpufile's POSIX path for host memory: pread/pwrite loops that finish what they start.
//!
//! A regular file may return fewer bytes than asked (signals, very large requests: Linux moves at
//! most 0x7ffff000 bytes per call); these loops go on from where the kernel stopped, retry EINTR
//! and EAGAIN, and turn a 0-byte read into [`Error::UnexpectedEof`].

use std::io;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Op, Result};

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
    let mut done = 0usize;
    while done < len {
        let at = offset + done as u64;
        // SAFETY: `buf + done .. buf + len` lies inside the caller's buffer (see # Safety).
        let n = unsafe { libc::pread(fd, buf.add(done).cast(), len - done, at as libc::off_t) };
        match n {
            0 => {
                // The file shrank after the size check (or is not a regular file).
                return Err(Error::UnexpectedEof {
                    path: path.to_owned(),
                    offset: at,
                    len: len - done,
                    file_size: at,
                });
            }
            n if n > 0 => {
                done += n as usize;
                progress.fetch_add(n as u64, Ordering::Relaxed);
            }
            _ => {
                let err = io::Error::last_os_error();
                if !retryable(&err) {
                    return Err(Error::os(Op::Read, path, at, len - done, err));
                }
            }
        }
    }
    Ok(len)
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
    let mut done = 0usize;
    while done < len {
        let at = offset + done as u64;
        // SAFETY: `buf + done .. buf + len` lies inside the caller's buffer (see # Safety).
        let n = unsafe { libc::pwrite(fd, buf.add(done).cast(), len - done, at as libc::off_t) };
        match n {
            // pwrite returning 0 for a non-zero count means the device takes no more.
            0 => {
                let err = io::Error::from_raw_os_error(libc::ENOSPC);
                return Err(Error::os(Op::Write, path, at, len - done, err));
            }
            n if n > 0 => {
                done += n as usize;
                progress.fetch_add(n as u64, Ordering::Relaxed);
            }
            _ => {
                let err = io::Error::last_os_error();
                if !retryable(&err) {
                    return Err(Error::os(Op::Write, path, at, len - done, err));
                }
            }
        }
    }
    Ok(len)
}

fn retryable(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN))
}
