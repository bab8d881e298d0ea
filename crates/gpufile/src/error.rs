//! The one error type of gpufile.
//!
//! Every failure carries the context a user needs to act on it: the file, the offset and length
//! of the request, and the OS `errno` where the kernel said no. Errors are `Clone` (the errno is
//! stored, not the `io::Error`) so that a future can hand the same error to every `get()`.
//! [`Error::kind`] says what kind of failure each one is: the one table the C ABI's statuses and
//! the Python exception classes are mapped from.

use std::fmt;
use std::io;
use std::path::PathBuf;

mod kind;

#[doc(hidden)]
pub use kind::one_of_each;
pub use kind::{os_kind, register_source_kind, ErrorKind};

/// Result alias used across gpufile.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a failed system call was doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `open(2)`.
    Open,
    /// `pread(2)`.
    Read,
    /// `pwrite(2)`.
    Write,
    /// `fstat(2)`.
    Stat,
    /// `mmap(2)`.
    Map,
    /// `fsync(2)`.
    Sync,
    /// `rename(2)` (or the `link(2)` before it).
    Rename,
    /// `unlink(2)`.
    Remove,
    /// `flock(2)`.
    Lock,
    /// `fchmod(2)`.
    Chmod,
    /// `open(2)` of a new file in a directory (the path is the directory's).
    Create,
    /// `posix_fadvise(2)`.
    Advise,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Open => "open",
            Op::Read => "pread",
            Op::Write => "pwrite",
            Op::Stat => "fstat",
            Op::Map => "mmap",
            Op::Sync => "fsync",
            Op::Rename => "rename",
            Op::Remove => "unlink",
            Op::Lock => "flock",
            Op::Chmod => "fchmod",
            Op::Create => "create a file in",
            Op::Advise => "posix_fadvise",
        })
    }
}

/// Every way a gpufile call can fail.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed; `errno` is the OS error number.
    #[error("{}: {}", self.os_context(), os_message(*.errno))]
    Os {
        /// The call that failed.
        op: Op,
        /// The file.
        path: PathBuf,
        /// File offset of the failed transfer (0 for open/stat).
        offset: u64,
        /// Bytes the transfer asked for (0 for open/stat).
        len: usize,
        /// The OS error number.
        errno: i32,
    },
    /// A read reached the end of the file before the requested range was complete.
    ///
    /// KvikIO fails the same way (its POSIX path raises "EOF"); gpufile checks the file size before
    /// any byte is transferred, so the destination is left untouched.
    #[error(
        "read of {len} bytes at offset {offset} goes past the end of {path} ({file_size} bytes)"
    )]
    UnexpectedEof {
        /// The file.
        path: PathBuf,
        /// Requested file offset.
        offset: u64,
        /// Requested length.
        len: usize,
        /// File size seen when the request ran.
        file_size: u64,
    },
    /// The handle was opened without read access.
    #[error("{path} is not open for reading (flags {flags:?})")]
    NotReadable {
        /// The file.
        path: PathBuf,
        /// The flags it was opened with.
        flags: String,
    },
    /// The handle was opened without write access.
    #[error("{path} is not open for writing (flags {flags:?})")]
    NotWritable {
        /// The file.
        path: PathBuf,
        /// The flags it was opened with.
        flags: String,
    },
    /// An operation on a handle that was closed.
    #[error("I/O operation on closed file")]
    Closed,
    /// An argument of a call is out of range or malformed.
    #[error("{0}")]
    InvalidArgument(String),
    /// A range outside what an object covers (a read outside a mapping's region: KvikIO's
    /// `std::out_of_range`, Python's `IndexError`).
    #[error("{0}")]
    OutOfRange(String),
    /// The worker threads could not be started.
    #[error("cannot start {threads} worker threads: {source}")]
    Spawn {
        /// Threads asked for.
        threads: usize,
        /// The OS's reason.
        source: std::sync::Arc<io::Error>,
    },
    /// The request was cancelled (an interrupt) before all of its tasks ran; the tasks that
    /// had started finished first.
    #[error("the request was cancelled")]
    Cancelled,
    /// The engine is shutting down (interpreter exit): no new request is accepted.
    #[error("gpufile is shutting down: no new I/O is accepted")]
    ShuttingDown,
    /// A setting name that gpufile does not know.
    #[error("unknown setting {name:?}; known settings: {known}")]
    UnknownSetting {
        /// The name asked for.
        name: String,
        /// Every known name, comma separated.
        known: String,
    },
    /// A setting value that does not parse or is out of range.
    #[error("invalid value {value} for setting {name:?}: {reason}")]
    InvalidSetting {
        /// The setting.
        name: &'static str,
        /// The value as given.
        value: String,
        /// What would have been accepted.
        reason: String,
    },
    /// A setting KvikIO fixes for the rest of the process once its `MULTI_POLL` reactor pool
    /// has started ([`Name::fixed_once_remote_io_starts`](crate::config::Name::fixed_once_remote_io_starts)),
    /// set after that (KvikIO's `std::runtime_error`).
    #[error(
        "{name} cannot be changed after the MULTI_POLL reactor pool has already started: it is \
         fixed for the rest of the process once a remote read has run under remote_io_backend \
         MULTI_POLL"
    )]
    SettingFixed {
        /// The setting.
        name: &'static str,
    },
    /// A CUDA driver call failed.
    #[error("{call} failed: {name} ({code}): {message}")]
    Cuda {
        /// The driver function.
        call: &'static str,
        /// The `CUresult` code.
        code: i32,
        /// The code's name (`CUDA_ERROR_INVALID_VALUE`).
        name: String,
        /// The driver's text for it.
        message: String,
    },
    /// A device buffer was given but the CUDA driver cannot be used here.
    #[error("CUDA is not available: {reason}")]
    CudaUnavailable {
        /// Why (library missing, no device, ...).
        reason: String,
    },
    /// A cuFile call failed.
    #[error("{call} failed: {name} ({code}){}", cuda_detail(*.cuda_code))]
    Cufile {
        /// The cuFile function.
        call: &'static str,
        /// The `CUfileOpError` code (or a negated errno for I/O calls that set errno).
        code: i32,
        /// The code's name.
        name: String,
        /// The CUDA driver's code where cuFile reports one (0 otherwise).
        cuda_code: i32,
    },
    /// cuFile was required (compat_mode OFF) but cannot be used.
    #[error("cuFile cannot be used: {reason}")]
    CufileUnavailable {
        /// Why.
        reason: String,
    },
    /// The cuFile driver was asked to close while files are registered with it.
    #[error(
        "cannot close the cuFile driver: {registered} file handle(s) are still registered with \
         it (close those files, and let their requests in flight finish, first)"
    )]
    CufileBusy {
        /// Files registered now.
        registered: usize,
    },
    /// An environment variable whose value does not parse.
    #[error("environment variable {var}={value:?} is invalid: {reason}")]
    InvalidEnv {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What would have been accepted.
        reason: String,
    },
    /// A task of the request panicked (a bug in gpufile): the request fails with the panic's
    /// message, the worker that ran it goes on, and later requests run.
    #[error("a task of the request panicked (a bug in gpufile; the request failed, later requests run): {message}")]
    TaskPanicked {
        /// The panic's message.
        message: String,
    },
    /// Several tasks of one request failed: the first error, the others, and the bytes moved by
    /// the tasks that succeeded (a failed task may have moved part of its range, and tasks not
    /// started once the request stopped moved nothing).
    #[error("{first}; {} other task(s) of the request failed too: {}; {bytes_done} bytes were moved by the tasks that succeeded", others.len() + not_shown, others_text(others, *not_shown))]
    TasksFailed {
        /// The first task's error.
        first: Box<Error>,
        /// The other tasks' errors, in the order they ended (at most `MAX_TASK_ERRORS`).
        others: Vec<Error>,
        /// Further failed tasks not listed.
        not_shown: usize,
        /// Bytes moved by the tasks that succeeded.
        bytes_done: usize,
    },
    /// A source or sink outside the core failed (a remote object, ...): its crate's own error,
    /// shown as it is, with `what` naming the kind of source in kebab case (`"remote"`, the
    /// CLI's error type). Callers that know that crate downcast it ([`Error::source_error`]).
    #[error("{source}")]
    Source {
        /// The kind of source, in kebab case: `"remote"` for `gpufile-remote`'s objects.
        what: &'static str,
        /// The source's own error (`gpufile_remote::RemoteError`, ...); shared, so that the
        /// error stays `Clone`.
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
    /// A file that has no offsets to read or write at (a FIFO, a socket): refused when it is
    /// opened, before `open(2)` can wait for the other end. Regular files and block and
    /// character devices are opened.
    #[error(
        "{} is {what}: gpufile reads and writes at file offsets (pread/pwrite), which {what} \
         does not have",
        path.display()
    )]
    NotSeekable {
        /// The file.
        path: PathBuf,
        /// What it is ("a FIFO", "a socket").
        what: &'static str,
    },
}

impl Error {
    /// An [`Error::Source`] of kind `what` carrying `source`.
    pub fn from_source(
        what: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Source {
            what,
            source: std::sync::Arc::new(source),
        }
    }

    /// The source's own error, where this is an [`Error::Source`] holding an `E`.
    pub fn source_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Source { source, .. } => source.downcast_ref::<E>(),
            _ => None,
        }
    }

    /// The OS error number, where the kernel reported one (of the first task's error, where
    /// several failed).
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Os { errno, .. } => Some(*errno),
            Error::TasksFailed { first, .. } => first.errno(),
            // What pread/pwrite would answer for it.
            Error::NotSeekable { .. } => Some(libc::ESPIPE),
            _ => None,
        }
    }

    /// The file ranges `(offset, len)` that failed, as the failed calls name them: one for an
    /// OS error of a transfer, each listed task's for [`Error::TasksFailed`]; empty where the
    /// error names no range.
    pub fn failed_ranges(&self) -> Vec<(u64, usize)> {
        match self {
            Error::Os {
                op: Op::Read | Op::Write,
                offset,
                len,
                ..
            } => vec![(*offset, *len)],
            Error::UnexpectedEof { offset, len, .. } => vec![(*offset, *len)],
            Error::TasksFailed { first, others, .. } => std::iter::once(&**first)
                .chain(others)
                .flat_map(Error::failed_ranges)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// For [`Error::Os`]: what was being done, without the OS's reason ("pread of 10 bytes at
    /// offset 4096 in /data/x.bin").
    pub fn os_context(&self) -> String {
        match self {
            Error::Os {
                op: op @ (Op::Read | Op::Write | Op::Map | Op::Advise),
                path,
                offset,
                len,
                ..
            } => {
                format!(
                    "{op} of {len} bytes at offset {offset} in {}",
                    path.display()
                )
            }
            Error::Os { op, path, .. } => format!("{op} {}", path.display()),
            other => other.to_string(),
        }
    }

    /// An OS error of `op` on `path`. An error the kernel gave no errno for (a path with a NUL
    /// byte, refused before any system call) is an argument error, not EIO.
    pub(crate) fn os(
        op: Op,
        path: &std::path::Path,
        offset: u64,
        len: usize,
        err: io::Error,
    ) -> Self {
        match err.raw_os_error() {
            Some(errno) => Error::Os {
                op,
                path: path.to_owned(),
                offset,
                len,
                errno,
            },
            None => Error::InvalidArgument(format!("{op} {:?}: {err}", path)),
        }
    }
}

/// Most other task errors an [`Error::TasksFailed`] lists (the rest are counted).
pub const MAX_TASK_ERRORS: usize = 16;

fn others_text(others: &[Error], not_shown: usize) -> String {
    let mut parts: Vec<String> = others
        .iter()
        .map(|e| match e {
            Error::Os { errno, .. } => format!("{} ({})", e.os_context(), os_message(*errno)),
            e => e.to_string(),
        })
        .collect();
    if not_shown > 0 {
        parts.push(format!("{not_shown} more"));
    }
    parts.join("; ")
}

fn cuda_detail(code: i32) -> String {
    if code == 0 {
        String::new()
    } else {
        format!(", CUDA error {code}")
    }
}

/// The OS's text for `errno` ("No such file or directory").
pub fn os_message(errno: i32) -> String {
    let text = io::Error::from_raw_os_error(errno).to_string();
    // io::Error appends " (os error N)"; keep the text, the errno is shown elsewhere.
    match text.rfind(" (os error") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_error_names_call_path_offset_and_reason() {
        let e = Error::os(
            Op::Read,
            std::path::Path::new("/data/x.bin"),
            4096,
            10,
            io::Error::from_raw_os_error(libc::EIO),
        );
        let text = e.to_string();
        assert!(text.contains("pread"), "{text}");
        assert!(text.contains("/data/x.bin"), "{text}");
        assert!(text.contains("offset 4096"), "{text}");
        assert!(text.contains("Input/output error"), "{text}");
        assert_eq!(e.errno(), Some(libc::EIO));
    }
}
