//! What kind of failure an [`Error`] is: the one classification the bindings map (the C ABI's
//! status codes, the Python exception classes), so that they cannot disagree.
//!
//! A failure of a source outside the core ([`Error::Source`]) is classified by the crate that
//! made it: that crate registers, once, a function that says the kind of its own errors
//! ([`register_source_kind`]); `gpufile-remote` does so before its first error reaches the core.

use std::sync::RwLock;

use super::Error;

/// The kind of an [`Error`] ([`Error::kind`]): what a caller branches on, finer than any one
/// binding's error types so that each binding maps it without looking at variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file does not exist (`ENOENT`).
    NotFound,
    /// The OS refused access (`EACCES`, `EPERM`).
    PermissionDenied,
    /// The path names a directory (`EISDIR`).
    IsADirectory,
    /// Another OS error, with its `errno`.
    Os(i32),
    /// The path names a file without offsets (a FIFO, a socket).
    NotSeekable,
    /// A read goes past the end of the file.
    EndOfFile,
    /// The handle is not open for the operation (a write to a read-only handle).
    UnsupportedOperation,
    /// An argument, setting value or environment variable is malformed or out of its range, or
    /// the handle is closed; also a caller's layout of remote writes that does not tile the
    /// object or needs more parts than the store allows.
    BadArgument,
    /// A setting name that is not known.
    UnknownName,
    /// A range outside what an object covers (a read outside a mapping's region).
    OutOfRange,
    /// A file that does not follow its format (a safetensors header, a checkpoint's index, a
    /// tensor's bounds): the bytes are wrong, not the arguments.
    InvalidData,
    /// The CUDA driver failed, or is missing where device memory needs it.
    Cuda,
    /// cuFile failed, cannot be used where the settings require it, or is busy.
    Cufile,
    /// A remote object's server or the network failed.
    Remote,
    /// A server ignored the byte range of a read and sent the whole object, which cannot serve
    /// the read.
    RangeNotSupported,
    /// The request was cancelled (an interrupt).
    Cancelled,
    /// The engine is shutting down and accepts no new request.
    ShuttingDown,
    /// A bug in gpufile (a task panicked).
    Internal,
    /// Anything else (threads that do not start, a source that says no kind).
    Other,
}

impl Error {
    /// What kind of failure this is; for [`Error::TasksFailed`] the first task's.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Os { errno, .. } => os_kind(*errno),
            Error::NotSeekable { .. } => ErrorKind::NotSeekable,
            Error::UnexpectedEof { .. } => ErrorKind::EndOfFile,
            Error::NotReadable { .. } | Error::NotWritable { .. } => {
                ErrorKind::UnsupportedOperation
            }
            Error::Closed
            | Error::InvalidArgument(_)
            | Error::InvalidSetting { .. }
            | Error::InvalidEnv { .. } => ErrorKind::BadArgument,
            Error::UnknownSetting { .. } => ErrorKind::UnknownName,
            Error::OutOfRange(_) => ErrorKind::OutOfRange,
            Error::Cuda { .. } | Error::CudaUnavailable { .. } => ErrorKind::Cuda,
            Error::Cufile { .. } | Error::CufileUnavailable { .. } | Error::CufileBusy { .. } => {
                ErrorKind::Cufile
            }
            Error::Source { what, source } => source_kind(what, &**source),
            Error::Cancelled => ErrorKind::Cancelled,
            Error::ShuttingDown => ErrorKind::ShuttingDown,
            Error::TaskPanicked { .. } => ErrorKind::Internal,
            // KvikIO's std::runtime_error: neither a bad value nor an unknown name.
            Error::Spawn { .. } | Error::SettingFixed { .. } => ErrorKind::Other,
            Error::TasksFailed { first, .. } => first.kind(),
        }
    }
}

/// The kind of an OS error number: the classes a caller branches on, else [`ErrorKind::Os`].
pub fn os_kind(errno: i32) -> ErrorKind {
    match errno {
        libc::ENOENT => ErrorKind::NotFound,
        libc::EACCES | libc::EPERM => ErrorKind::PermissionDenied,
        libc::EISDIR => ErrorKind::IsADirectory,
        n => ErrorKind::Os(n),
    }
}

/// Says the kind of an error that a crate outside the core put into [`Error::Source`]; `None`
/// where it is not one of that crate's.
pub type SourceKindFn = fn(&(dyn std::error::Error + 'static)) -> Option<ErrorKind>;

/// The registered classifiers, by [`Error::Source`]'s `what`.
static SOURCE_KINDS: RwLock<Vec<(&'static str, SourceKindFn)>> = RwLock::new(Vec::new());

/// Registers how the errors of source kind `what` are classified (a second registration of
/// `what` replaces the first). A crate calls it before its first error reaches the core; an
/// [`Error::Source`] of a kind nobody registered is [`ErrorKind::Other`].
pub fn register_source_kind(what: &'static str, classify: SourceKindFn) {
    let mut kinds = SOURCE_KINDS.write().unwrap_or_else(|p| p.into_inner());
    kinds.retain(|(w, _)| *w != what);
    kinds.push((what, classify));
}

fn source_kind(what: &str, source: &(dyn std::error::Error + Send + Sync + 'static)) -> ErrorKind {
    let kinds = SOURCE_KINDS.read().unwrap_or_else(|p| p.into_inner());
    kinds
        .iter()
        .find(|(w, _)| *w == what)
        .and_then(|(_, classify)| classify(source))
        .unwrap_or(ErrorKind::Other)
}

/// One error of each variant (several OS errors, one of each errno class), for the bindings'
/// tests that check every variant maps as their table says. Not for use outside tests.
#[doc(hidden)]
pub fn one_of_each() -> Vec<Error> {
    use std::path::PathBuf;
    let path = || PathBuf::from("/data/x.bin");
    let os = |errno| Error::Os {
        op: super::Op::Read,
        path: path(),
        offset: 0,
        len: 1,
        errno,
    };
    vec![
        os(libc::ENOENT),
        os(libc::EACCES),
        os(libc::EPERM),
        os(libc::EISDIR),
        os(libc::EIO),
        os(libc::EEXIST),
        Error::UnexpectedEof {
            path: path(),
            offset: 8,
            len: 8,
            file_size: 10,
        },
        Error::NotReadable {
            path: path(),
            flags: "w".into(),
        },
        Error::NotWritable {
            path: path(),
            flags: "r".into(),
        },
        Error::Closed,
        Error::InvalidArgument("size must not be negative".into()),
        Error::OutOfRange("offset 9 is past the region".into()),
        Error::Spawn {
            threads: 4,
            source: std::sync::Arc::new(std::io::Error::from_raw_os_error(libc::EAGAIN)),
        },
        Error::Cancelled,
        Error::ShuttingDown,
        Error::UnknownSetting {
            name: "nope".into(),
            known: "task_size".into(),
        },
        Error::InvalidSetting {
            name: "task_size",
            value: "0".into(),
            reason: "must be a positive integer".into(),
        },
        Error::Cuda {
            call: "cuMemcpyHtoD",
            code: 1,
            name: "CUDA_ERROR_INVALID_VALUE".into(),
            message: "invalid argument".into(),
        },
        Error::CudaUnavailable {
            reason: "libcuda.so.1 not found".into(),
        },
        Error::Cufile {
            call: "cuFileRead",
            code: 5001,
            name: "CU_FILE_DRIVER_NOT_INITIALIZED".into(),
            cuda_code: 0,
        },
        Error::CufileUnavailable {
            reason: "libcufile.so.0 not found".into(),
        },
        Error::CufileBusy { registered: 1 },
        Error::InvalidEnv {
            var: "KVIKIO_NTHREADS".into(),
            value: "x".into(),
            reason: "not an integer".into(),
        },
        Error::TaskPanicked {
            message: "boom".into(),
        },
        Error::TasksFailed {
            first: Box::new(os(libc::ENOENT)),
            others: vec![Error::Cancelled],
            not_shown: 0,
            bytes_done: 0,
        },
        Error::from_source(
            "not-registered",
            std::io::Error::other("a source's failure"),
        ),
        Error::NotSeekable {
            path: path(),
            what: "a FIFO",
        },
        Error::SettingFixed {
            name: "remote_io_num_reactors",
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many variants [`Error`] has.
    const VARIANTS: usize = 23;

    /// The position of `e`'s variant. The match is exhaustive: a new variant fails to compile
    /// here until it is numbered, then fails [`one_of_each_lists_every_variant`] until
    /// [`one_of_each`] has a sample of it.
    fn variant_number(e: &Error) -> usize {
        match e {
            Error::Os { .. } => 0,
            Error::UnexpectedEof { .. } => 1,
            Error::NotReadable { .. } => 2,
            Error::NotWritable { .. } => 3,
            Error::Closed => 4,
            Error::InvalidArgument(_) => 5,
            Error::OutOfRange(_) => 6,
            Error::Spawn { .. } => 7,
            Error::Cancelled => 8,
            Error::ShuttingDown => 9,
            Error::UnknownSetting { .. } => 10,
            Error::InvalidSetting { .. } => 11,
            Error::Cuda { .. } => 12,
            Error::CudaUnavailable { .. } => 13,
            Error::Cufile { .. } => 14,
            Error::CufileUnavailable { .. } => 15,
            Error::CufileBusy { .. } => 16,
            Error::InvalidEnv { .. } => 17,
            Error::TaskPanicked { .. } => 18,
            Error::TasksFailed { .. } => 19,
            Error::Source { .. } => 20,
            Error::NotSeekable { .. } => 21,
            Error::SettingFixed { .. } => 22,
        }
    }

    /// Every variant has a sample in [`one_of_each`] (so the bindings' table tests see it).
    #[test]
    fn one_of_each_lists_every_variant() {
        let mut seen = [false; VARIANTS];
        for e in one_of_each() {
            seen[variant_number(&e)] = true;
        }
        let missing: Vec<usize> = (0..VARIANTS).filter(|i| !seen[*i]).collect();
        assert!(missing.is_empty(), "variants without a sample: {missing:?}");
    }

    /// A task list's kind is its first task's; a source nobody registered is `Other`, and a
    /// registered classifier decides for its own errors.
    #[test]
    fn tasks_take_the_first_kind_and_sources_their_registered_kind() {
        let first = Error::UnexpectedEof {
            path: "/f".into(),
            offset: 0,
            len: 1,
            file_size: 0,
        };
        let e = Error::TasksFailed {
            first: Box::new(first),
            others: vec![],
            not_shown: 0,
            bytes_done: 0,
        };
        assert_eq!(e.kind(), ErrorKind::EndOfFile);
        let src = || Error::from_source("kind-test", std::io::Error::other("x"));
        assert_eq!(src().kind(), ErrorKind::Other);
        register_source_kind("kind-test", |e| {
            e.downcast_ref::<std::io::Error>()
                .map(|_| ErrorKind::Remote)
        });
        assert_eq!(src().kind(), ErrorKind::Remote);
    }
}
