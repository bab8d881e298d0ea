//! Statuses, the thread-local last error, and the guard every exported function runs its body
//! in (a panic becomes [`gpufile_status::GPUFILE_OTHER`], never an unwind into C).

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use gpufile_core::safetensors::FormatError;
use gpufile_core::Op;
use gpufile_core::{Error, ErrorKind};

/// What every call returns: `GPUFILE_OK`, or the type of the error it stored as the calling
/// thread's last error (the same value `gpufile_last_error_type` gives).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum gpufile_status {
    /// Success.
    GPUFILE_OK = 0,
    /// The file does not exist (`ENOENT`).
    GPUFILE_NOT_FOUND = 1,
    /// The OS refused access (`EACCES`, `EPERM`), or the handle is not open for the operation.
    GPUFILE_PERMISSION = 2,
    /// The path names a directory (`EISDIR`).
    GPUFILE_IS_A_DIRECTORY = 3,
    /// A read goes past the end of the file.
    GPUFILE_END_OF_FILE = 4,
    /// A null pointer, a bad size, flag, setting name or value.
    GPUFILE_BAD_ARGUMENT = 5,
    /// The CUDA driver failed or is missing where device memory needs it.
    GPUFILE_CUDA = 6,
    /// cuFile failed or cannot be used where the settings require it.
    GPUFILE_CUFILE = 7,
    /// `gpufile_future_wait_for` gave up before the request ended.
    GPUFILE_TIMEOUT = 8,
    /// Anything else (other OS errors: see `gpufile_last_error_errno`).
    GPUFILE_OTHER = 9,
    /// A remote object's server or network failed (an HTTP error status, a refused
    /// connection, missing credentials); the message says which.
    GPUFILE_REMOTE = 10,
    /// A range outside what an object covers: an `Mmap` region or offset past the end of the
    /// file, a read outside the mapped region (KvikIO's `std::out_of_range`).
    GPUFILE_OUT_OF_RANGE = 11,
}

use gpufile_status::*;

/// The calling thread's last error.
struct LastError {
    status: gpufile_status,
    errno: i32,
    /// NUL-free text (interior NULs are replaced).
    message: String,
    path: Option<String>,
}

thread_local! {
    static LAST: RefCell<Option<LastError>> = const { RefCell::new(None) };
}

/// An error of a call: its type, errno, text and path.
pub(crate) struct CallError {
    status: gpufile_status,
    errno: i32,
    message: String,
    path: Option<String>,
}

impl CallError {
    /// A bad argument, said in `message`.
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        CallError {
            status: GPUFILE_BAD_ARGUMENT,
            errno: libc::EINVAL,
            message: message.into(),
            path: None,
        }
    }

    /// The error with `prefix` before its text (what the call was doing).
    pub(crate) fn prefixed(mut self, prefix: &str) -> Self {
        self.message.insert_str(0, prefix);
        self
    }

    /// The error with `suffix` after its text.
    pub(crate) fn suffixed(mut self, suffix: &str) -> Self {
        self.message.push_str(suffix);
        self
    }

    /// A timeout, said in `message`.
    pub(crate) fn timeout(message: impl Into<String>) -> Self {
        CallError {
            status: GPUFILE_TIMEOUT,
            errno: libc::ETIMEDOUT,
            message: message.into(),
            path: None,
        }
    }
}

impl From<Error> for CallError {
    fn from(e: Error) -> Self {
        let message = e.to_string();
        // The first failed task of a request decides the type and path; the text is the whole.
        let first = match &e {
            Error::TasksFailed { first, .. } => &**first,
            other => other,
        };
        let errno = first.errno().unwrap_or(0);
        let status = status_of(first.kind());
        let errno = match (errno, status) {
            (0, GPUFILE_BAD_ARGUMENT | GPUFILE_OUT_OF_RANGE) => libc::EINVAL,
            (0, GPUFILE_PERMISSION) => libc::EBADF,
            (0, GPUFILE_END_OF_FILE) => 0,
            (n, _) => n,
        };
        let path = match first {
            Error::Os { path, .. }
            | Error::UnexpectedEof { path, .. }
            | Error::NotReadable { path, .. }
            | Error::NotWritable { path, .. }
            | Error::NotSeekable { path, .. } => Some(display(path)),
            _ => None,
        };
        CallError {
            status,
            errno,
            message,
            path,
        }
    }
}

impl From<FormatError> for CallError {
    /// A refused checkpoint, file or selection by its kind in the table ([`status_of`]): an OS
    /// error as the OS said it (the file named), anything else naming the file and the tensor.
    fn from(e: FormatError) -> Self {
        if let FormatError::Io { path, source } = &e {
            if let Some(errno) = source.raw_os_error() {
                return CallError::from(Error::Os {
                    op: Op::Open,
                    path: path.clone(),
                    offset: 0,
                    len: 0,
                    errno,
                });
            }
        }
        let status = status_of(e.kind());
        let errno = match (e.errno(), status) {
            (Some(n), _) => n,
            (None, GPUFILE_BAD_ARGUMENT | GPUFILE_OUT_OF_RANGE) => libc::EINVAL,
            (None, _) => 0,
        };
        CallError {
            status,
            errno,
            message: e.to_string(),
            path: None,
        }
    }
}

/// The status of an error of `kind`: the C ABI's whole error table (the core's
/// [`Error::kind`] classifies; this maps).
pub fn status_of(kind: ErrorKind) -> gpufile_status {
    match kind {
        ErrorKind::NotFound => GPUFILE_NOT_FOUND,
        ErrorKind::PermissionDenied | ErrorKind::UnsupportedOperation => GPUFILE_PERMISSION,
        ErrorKind::IsADirectory => GPUFILE_IS_A_DIRECTORY,
        ErrorKind::EndOfFile => GPUFILE_END_OF_FILE,
        // A FIFO or a socket: the path cannot be used (errno ESPIPE says why).
        // A file that breaks its format: the call cannot be made with it (the message names
        // the file and the tensor).
        ErrorKind::BadArgument
        | ErrorKind::UnknownName
        | ErrorKind::NotSeekable
        | ErrorKind::InvalidData => GPUFILE_BAD_ARGUMENT,
        ErrorKind::OutOfRange => GPUFILE_OUT_OF_RANGE,
        ErrorKind::Cuda => GPUFILE_CUDA,
        ErrorKind::Cufile => GPUFILE_CUFILE,
        ErrorKind::Remote | ErrorKind::RangeNotSupported => GPUFILE_REMOTE,
        ErrorKind::Os(_)
        | ErrorKind::Cancelled
        | ErrorKind::ShuttingDown
        | ErrorKind::Internal
        | ErrorKind::Other => GPUFILE_OTHER,
        // A kind added to the core later: the errno and message still say what it is.
        _ => GPUFILE_OTHER,
    }
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Runs `body`, storing its error (or its panic) as the thread's last error; the status.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), CallError>) -> gpufile_status {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(CallError {
            status: GPUFILE_OTHER,
            errno: 0,
            message: format!("internal error in gpufile (a bug; please report it): {what}"),
            path: None,
        })
    });
    match outcome {
        Ok(()) => GPUFILE_OK,
        Err(e) => {
            let status = e.status;
            let last = LastError {
                status,
                errno: e.errno,
                message: e.message.replace('\0', "\\0"),
                path: e.path.map(|p| p.replace('\0', "\\0")),
            };
            // A thread being torn down has no last error to keep; the status still says it.
            let _ = LAST.try_with(|l| *l.borrow_mut() = Some(last));
            status
        }
    }
}

/// Copies `text` and a NUL into `buf` (at most `len` bytes, cut at a character boundary);
/// the bytes the whole text and its NUL need.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes.
pub(crate) unsafe fn copy_out(text: &str, buf: *mut c_char, len: usize) -> usize {
    let needed = text.len() + 1;
    if buf.is_null() || len == 0 {
        return needed;
    }
    let mut n = text.len().min(len - 1);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: `n + 1 <= len` bytes of `buf` are writable (the caller's contract); `text` is
    // Rust memory, which cannot overlap the caller's buffer it is copied into.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    needed
}

/// Copies `text` out as [`copy_out`] does and stores the bytes it needs in `*needed` (if not
/// null): the out-parameter form of the functions that return a status.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes; `needed` is null or valid for a write.
pub(crate) unsafe fn give_text(text: &str, buf: *mut c_char, len: usize, needed: *mut usize) {
    // SAFETY: the caller's contract.
    let n = unsafe { copy_out(text, buf, len) };
    if !needed.is_null() {
        // SAFETY: non-null; the caller's contract.
        unsafe { crate::put(needed, n) };
    }
}

/// Reads the last error of this thread through `f` (`None`: no call failed yet).
fn with_last<T>(f: impl FnOnce(Option<&LastError>) -> T) -> T {
    LAST.with(|l| f(l.borrow().as_ref()))
}

/// The type of the calling thread's last error (`GPUFILE_OK` where no call of this thread has
/// failed yet). Successful calls leave the last error as it was.
#[no_mangle]
pub extern "C" fn gpufile_last_error_type() -> gpufile_status {
    catch_unwind(|| with_last(|l| l.map_or(GPUFILE_OK, |l| l.status))).unwrap_or(GPUFILE_OTHER)
}

/// The OS error number of the calling thread's last error: the kernel's answer for OS
/// errors (2 for a missing file), `EINVAL` for bad arguments, `EBADF` for a handle not open
/// for the operation, `ETIMEDOUT` for a timeout, 0 where there is none.
#[no_mangle]
pub extern "C" fn gpufile_last_error_errno() -> i32 {
    catch_unwind(|| with_last(|l| l.map_or(0, |l| l.errno))).unwrap_or(0)
}

/// Copies the message of the calling thread's last error into `buf` (at most `len` bytes,
/// always NUL-terminated where `len > 0`, cut at a UTF-8 character boundary); returns the
/// bytes the whole message and its NUL need (1 where there is no error). `buf` may be null
/// (with any `len`) to ask for the length.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpufile_last_error_message(buf: *mut c_char, len: usize) -> usize {
    catch_unwind(AssertUnwindSafe(|| {
        with_last(|l| {
            let text = l.map_or("", |l| l.message.as_str());
            // SAFETY: the caller's contract.
            unsafe { copy_out(text, buf, len) }
        })
    }))
    .unwrap_or(0)
}

/// Copies the path of the file the calling thread's last error is about into `buf`, as
/// `gpufile_last_error_message` does; an empty string (needing 1 byte) where the error names
/// no file.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpufile_last_error_path(buf: *mut c_char, len: usize) -> usize {
    catch_unwind(AssertUnwindSafe(|| {
        with_last(|l| {
            let text = l.and_then(|l| l.path.as_deref()).unwrap_or("");
            // SAFETY: the caller's contract.
            unsafe { copy_out(text, buf, len) }
        })
    }))
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> String {
        let mut buf = vec![0 as c_char; 256];
        // SAFETY: `buf` holds 256 writable bytes.
        let needed = unsafe { gpufile_last_error_message(buf.as_mut_ptr(), buf.len()) };
        assert!(needed <= buf.len());
        // SAFETY: the copy-out NUL-terminates within `buf`.
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_is_a_status_and_a_message_never_an_unwind() {
        let status = guard(|| panic!("boom {}", 7));
        assert_eq!(status, GPUFILE_OTHER);
        assert_eq!(gpufile_last_error_type(), GPUFILE_OTHER);
        let text = message();
        assert!(
            text.contains("internal error") && text.contains("boom 7"),
            "{text}"
        );
    }

    #[test]
    fn copy_out_cuts_at_a_character_boundary_and_terminates() {
        let mut buf = [b'#' as c_char; 8];
        // "é" is 2 bytes: 4 bytes of room hold "aé" and the NUL, not half of the next "é".
        // SAFETY: `buf` holds 8 writable bytes.
        let needed = unsafe { copy_out("aéé", buf.as_mut_ptr(), 5) };
        assert_eq!(needed, 6);
        let got: Vec<u8> = buf.iter().map(|c| *c as u8).collect();
        assert_eq!(&got[..5], b"a\xc3\xa9\0#");
    }
}
