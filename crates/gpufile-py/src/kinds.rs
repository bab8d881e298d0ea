//! The Python exception class of each kind of error: the binding's whole error table (the core's
//! `Error::kind` classifies; this maps). Pure Rust, so the crate's table test reads it too.

use gpufile::ErrorKind;

/// The name of the class raised for an error of `kind`: a builtin (`"ValueError"`), `io`'s
/// `"UnsupportedOperation"`, or one of gpufile's own (`"GpufileError"`, `"EndOfFileError"`,
/// `"CudaError"`, `"CufileError"`). An `OSError` subclass is raised as its twin that is also a
/// `RuntimeError`; `"OSError"` is the class Python's own `OSError(errno, ...)` picks for the
/// errno.
pub(crate) fn python_class(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NotFound => "FileNotFoundError",
        ErrorKind::PermissionDenied => "PermissionError",
        ErrorKind::IsADirectory => "IsADirectoryError",
        // FileExistsError, TimeoutError, ...: Python's errno table decides.
        ErrorKind::Os(_) => "OSError",
        // What pread answers for a FIFO (ESPIPE), and what Python's `open` types an OS refusal as.
        ErrorKind::NotSeekable => "OSError",
        ErrorKind::EndOfFile => "EndOfFileError",
        ErrorKind::UnsupportedOperation => "UnsupportedOperation",
        ErrorKind::BadArgument => "ValueError",
        ErrorKind::UnknownName => "KeyError",
        ErrorKind::OutOfRange => "IndexError",
        // A file that breaks the safetensors format: gpufile's own ValueError.
        ErrorKind::InvalidData => "SafetensorError",
        ErrorKind::Cuda => "CudaError",
        ErrorKind::Cufile => "CufileError",
        // KvikIO's types for remote failures: a server that ignores ranges is an OverflowError,
        // other server and network failures RuntimeError.
        ErrorKind::Remote => "RuntimeError",
        ErrorKind::RangeNotSupported => "OverflowError",
        ErrorKind::Cancelled | ErrorKind::ShuttingDown | ErrorKind::Internal | ErrorKind::Other => {
            "GpufileError"
        }
        // A kind added to the core later: gpufile's base class, a RuntimeError.
        _ => "GpufileError",
    }
}

/// A call whose errors a caller expects as another class than their kind's (KvikIO's types):
/// the binding's overrides, each a row of the table as the kinds are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// Any call: the kind's class ([`python_class`]).
    Any,
    /// Opening a remote object or a checkpoint by URL: KvikIO's `RemoteHandle` constructors
    /// raise `RuntimeError` for a bad URL or argument.
    RemoteOpen,
}

/// The class raised for an error of `kind` from `call`: its override where the call has one,
/// else [`python_class`].
pub(crate) fn python_class_in(call: Call, kind: ErrorKind) -> &'static str {
    match (call, kind) {
        (Call::RemoteOpen, ErrorKind::BadArgument) => "RuntimeError",
        _ => python_class(kind),
    }
}
