//! Both bindings map the core's error kinds, never its variants: every variant of
//! `gpufile::Error` (and every remote failure) goes through the C ABI's `status_of` and this
//! crate's `python_class`, and each kind gets the status and the class the table below says.
//! A new variant fails the core's `one_of_each_lists_every_variant` until it has a sample; a
//! sample of a new kind fails here until the kind has a row. Format errors (`FormatError::kind`)
//! go through the same table, and the binding's overrides (a call whose errors take KvikIO's
//! class) are rows of their own.

#[path = "../src/kinds.rs"]
#[allow(dead_code)]
mod kinds;

use gpufile::safetensors::FormatError;
use gpufile::{Error, ErrorKind};
use gpufile_capi_for_tests::gpufile_status::{self, *};
use gpufile_remote::{RemoteError, RemoteFailure};

/// Each kind: the C status and the Python class it is raised as.
fn table() -> Vec<(ErrorKind, gpufile_status, &'static str)> {
    use ErrorKind::*;
    vec![
        (NotFound, GPUFILE_NOT_FOUND, "FileNotFoundError"),
        (PermissionDenied, GPUFILE_PERMISSION, "PermissionError"),
        (IsADirectory, GPUFILE_IS_A_DIRECTORY, "IsADirectoryError"),
        // Python picks the OSError subclass by errno (FileExistsError for EEXIST); C says
        // OTHER and the errno.
        (Os(libc::EIO), GPUFILE_OTHER, "OSError"),
        (Os(libc::EEXIST), GPUFILE_OTHER, "OSError"),
        // An I/O failure without an errno (a safetensors file's read that ended early).
        (Os(0), GPUFILE_OTHER, "OSError"),
        // A FIFO or a socket: C's bad argument (errno ESPIPE), Python's OSError ESPIPE (what
        // os.pread raises for it).
        (NotSeekable, GPUFILE_BAD_ARGUMENT, "OSError"),
        (EndOfFile, GPUFILE_END_OF_FILE, "EndOfFileError"),
        // Not open for the operation: C's PERMISSION (errno EBADF), io.UnsupportedOperation.
        (
            UnsupportedOperation,
            GPUFILE_PERMISSION,
            "UnsupportedOperation",
        ),
        (BadArgument, GPUFILE_BAD_ARGUMENT, "ValueError"),
        (UnknownName, GPUFILE_BAD_ARGUMENT, "KeyError"),
        (OutOfRange, GPUFILE_OUT_OF_RANGE, "IndexError"),
        // A file that breaks the safetensors format: C's bad argument (the message names the
        // file and the tensor), Python's SafetensorError (a ValueError).
        (InvalidData, GPUFILE_BAD_ARGUMENT, "SafetensorError"),
        (Cuda, GPUFILE_CUDA, "CudaError"),
        (Cufile, GPUFILE_CUFILE, "CufileError"),
        (Remote, GPUFILE_REMOTE, "RuntimeError"),
        // KvikIO's OverflowError ("maybe the server doesn't support file ranges?").
        (RangeNotSupported, GPUFILE_REMOTE, "OverflowError"),
        (Cancelled, GPUFILE_OTHER, "GpufileError"),
        (ShuttingDown, GPUFILE_OTHER, "GpufileError"),
        (Internal, GPUFILE_OTHER, "GpufileError"),
        (Other, GPUFILE_OTHER, "GpufileError"),
    ]
}

/// One error of each core variant, and one of each remote failure as the core holds it.
fn every_error() -> Vec<Error> {
    let mut all = gpufile::__private::error::one_of_each();
    all.extend(RemoteFailure::one_of_each().into_iter().map(|kind| {
        Error::from(RemoteError {
            url: "http://127.0.0.1:1/a".into(),
            kind,
            reason: "a reason".into(),
        })
    }));
    all
}

/// The kind of every core error, remote failure and format error, each with what it is.
fn every_kind() -> Vec<(ErrorKind, String)> {
    let core = every_error()
        .into_iter()
        .map(|e| (e.kind(), format!("{e:?}")));
    let formats = FormatError::one_of_each()
        .into_iter()
        .map(|e| (e.kind(), format!("{e:?}")));
    core.chain(formats).collect()
}

/// The binding's overrides: a call whose errors of a kind take another class than the kind's
/// (KvikIO's types); the C status stays the kind's.
fn overrides() -> Vec<(kinds::Call, ErrorKind, &'static str)> {
    // KvikIO's RemoteHandle constructors raise RuntimeError for a bad URL or argument.
    vec![(
        kinds::Call::RemoteOpen,
        ErrorKind::BadArgument,
        "RuntimeError",
    )]
}

#[test]
fn every_error_gets_the_status_and_class_its_kind_has_in_the_table() {
    let table = table();
    let mut used = vec![false; table.len()];
    for (kind, e) in every_kind() {
        let Some(row) = table.iter().position(|(k, _, _)| *k == kind) else {
            panic!("{kind:?} (of {e:?}) has no row in the table");
        };
        used[row] = true;
        let (_, status, class) = table[row];
        assert_eq!(
            gpufile_capi_for_tests::status_of(kind),
            status,
            "C status of {e}"
        );
        assert_eq!(kinds::python_class(kind), class, "Python class of {e}");
        for call in [kinds::Call::Any, kinds::Call::RemoteOpen] {
            let over = overrides()
                .into_iter()
                .find(|(c, k, _)| *c == call && *k == kind);
            let want = over.map_or(class, |(_, _, class)| class);
            assert_eq!(
                kinds::python_class_in(call, kind),
                want,
                "Python class of {e} from {call:?}"
            );
        }
    }
    for (call, kind, _) in overrides() {
        assert!(
            every_kind().iter().any(|(k, _)| *k == kind),
            "the override of {call:?} for {kind:?} is reached by no error"
        );
    }
    let unused: Vec<_> = table
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(row, _)| row.0)
        .collect();
    assert!(unused.is_empty(), "rows no error reaches: {unused:?}");
}

/// The remote failures a caller causes (writes that do not tile the object, more parts than S3
/// takes) are bad arguments in both bindings, not server failures.
#[test]
fn a_callers_remote_write_layout_is_a_bad_argument_in_both_bindings() {
    for kind in [RemoteFailure::NotTiled, RemoteFailure::PartLimit] {
        let e = Error::from(RemoteError {
            url: "s3://b/k".into(),
            kind,
            reason: "a write of bytes 0-9 overlaps bytes 5-14 written before".into(),
        });
        assert_eq!(e.kind(), ErrorKind::BadArgument);
        assert_eq!(
            gpufile_capi_for_tests::status_of(e.kind()),
            GPUFILE_BAD_ARGUMENT
        );
        assert_eq!(kinds::python_class(e.kind()), "ValueError");
    }
}
