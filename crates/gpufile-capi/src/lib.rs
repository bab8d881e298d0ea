//! The C ABI of gpufile: `libgpufile.so` / `libgpufile.a` and `include/gpufile/gpufile.h`
//! (generated from this crate by cbindgen; `tests/header.rs` fails when it is stale).
//!
//! A thin layer over the core: a call checks its pointers, builds the core's [`Request`] and
//! hands it to [`Engine::submit`] on the file's endpoint under the process settings, as the
//! Python binding does; the core checks the ranges, plans the path and moves the bytes. Every
//! function returns a [`gpufile_status`] (the last error of the calling thread says more) and
//! runs its body under `catch_unwind`: a Rust panic never unwinds into C.

// The exported types keep their C names (`gpufile_file`), which the header shows.
#![allow(non_camel_case_types)]

mod batch;
mod diag;
mod driver;
mod error;
mod future;
mod handles;
mod io_path;
mod load;
mod mmap;
mod remote;
mod save;
mod settings;
mod statistics;
mod stream;

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use gpufile_core::__private::cuda::{self, MemoryKind, PointerInfo};
use gpufile_core::source::Endpoint;
use gpufile_core::CompatMode;
use gpufile_core::{Buffer, Direction, Engine, Error, FileHandle, IoFuture, Request, Settings};
use gpufile_core::{Range, Ranges};

pub use batch::{gpufile_batch_op, gpufile_batch_submit};
pub use error::{
    gpufile_last_error_errno, gpufile_last_error_message, gpufile_last_error_path,
    gpufile_last_error_type, gpufile_status, status_of,
};
use error::{guard, CallError};
pub(crate) use future::give_future;
pub use future::{
    gpufile_future_cancel, gpufile_future_done, gpufile_future_free, gpufile_future_on_done,
    gpufile_future_wait, gpufile_future_wait_for,
};
use handles::Table;
pub use io_path::{gpufile_file_io_path, gpufile_file_request_io_path};
pub use load::{gpufile_load_checkpoint, gpufile_tensor_buffer};
pub use remote::{
    GPUFILE_REMOTE_AUTO, GPUFILE_REMOTE_HTTP, GPUFILE_REMOTE_S3, GPUFILE_REMOTE_S3_PRESIGNED_URL,
    GPUFILE_REMOTE_S3_PUBLIC, GPUFILE_REMOTE_WEBHDFS,
};
pub use save::{gpufile_save_checkpoint, gpufile_tensor};
pub use settings::{
    gpufile_settings_get_int, gpufile_settings_get_str, gpufile_settings_set_int,
    gpufile_settings_set_str,
};
pub use statistics::{
    gpufile_clock_anchor, gpufile_counters_get, gpufile_io_backend_name, gpufile_monitor_register,
    gpufile_monitor_unregister, gpufile_summary_deserialize, gpufile_summary_free,
    gpufile_summary_monitor_free, gpufile_summary_monitor_get, gpufile_summary_monitor_new,
    gpufile_summary_monitor_reset_or_stop, gpufile_summary_serialize, gpufile_summary_since,
    gpufile_summary_text, gpufile_summary_values_get,
};
pub use stream::gpufile_stream_order;

/// The ABI version this header describes; `gpufile_abi_version()` gives the library's. It
/// changes when a function's signature or a type's layout changes.
pub const GPUFILE_ABI_VERSION: u32 = 1;

/// `memory` argument of `gpufile_file_io_path`: host memory.
pub const GPUFILE_MEMORY_HOST: c_int = 0;
/// `memory` argument of `gpufile_file_io_path`: device (GPU) memory.
pub const GPUFILE_MEMORY_DEVICE: c_int = 1;

/// What moves the bytes of a request (`gpufile_file_io_path`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum gpufile_backend {
    /// gpufile's own POSIX path (host memory, or device memory through bounce buffers).
    GPUFILE_BACKEND_POSIX = 0,
    /// cuFile (GPUDirect Storage, or cuFile's own compatibility mode).
    GPUFILE_BACKEND_CUFILE = 1,
}

/// An open local file (opaque; from `gpufile_file_open`, freed by `gpufile_file_close`). A
/// handle closed already is refused with `GPUFILE_BAD_ARGUMENT`.
pub struct gpufile_file {
    _opaque: (),
}

/// A request that may still be running (opaque; from `gpufile_file_pread` /
/// `gpufile_file_pwrite`, freed by `gpufile_future_free`). A future freed already is refused
/// with `GPUFILE_BAD_ARGUMENT`.
pub struct gpufile_future {
    _opaque: (),
}

/// The open files, by the number their `gpufile_file*` is.
static FILES: Table<FileHandle> = Table::new("file");

/// The open file `file` names.
pub(crate) fn file_of(file: *const gpufile_file) -> Result<std::sync::Arc<FileHandle>, CallError> {
    FILES.get(file as usize)
}

/// The ABI version of the library (compare with `GPUFILE_ABI_VERSION`).
#[no_mangle]
pub extern "C" fn gpufile_abi_version() -> u32 {
    GPUFILE_ABI_VERSION
}

/// `ptr` as text, or a bad-argument error naming `what`.
///
/// # Safety
/// `ptr` is null or a NUL-terminated string.
pub(crate) unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, CallError> {
    if ptr.is_null() {
        return Err(CallError::bad(format!("{what} is NULL")));
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str()
        .map_err(|_| CallError::bad(format!("{what} is not UTF-8: {:?}", s.to_string_lossy())))
}

/// Stores `value` through `out` (which the caller checked is not null).
///
/// # Safety
/// `out` is valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) {
    // SAFETY: the caller's contract.
    unsafe { out.write(value) }
}

/// A null check for an out-parameter.
pub(crate) fn out_arg<T>(out: *mut T, what: &str) -> Result<(), CallError> {
    match out.is_null() {
        true => Err(CallError::bad(format!("{what} is NULL"))),
        false => Ok(()),
    }
}

/// Opens the local file `path` with KvikIO's `flags` ("r", "r+", "w", "w+", each optionally
/// with "b"); stores the handle in `*out`. A missing file is `GPUFILE_NOT_FOUND` (errno 2), a
/// directory `GPUFILE_IS_A_DIRECTORY`, other flags `GPUFILE_BAD_ARGUMENT`. A file the open
/// creates gets mode 0644, masked by the umask (`gpufile_file_open_mode` takes another).
///
/// # Safety
/// `path` and `flags` are null or NUL-terminated strings; `out` is null or valid for a write
/// of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_open(
    path: *const c_char,
    flags: *const c_char,
    out: *mut *mut gpufile_file,
) -> gpufile_status {
    // SAFETY: the caller's contract.
    unsafe { gpufile_file_open_mode(path, flags, 0o644, out) }
}

/// As `gpufile_file_open`, a file the open creates getting `mode` as open(2) gives it (its
/// third argument: masked by the umask, set-id bits as the kernel keeps them); an existing
/// file's mode is left alone. Bits outside 07777 are `GPUFILE_BAD_ARGUMENT`, nothing opened.
///
/// # Safety
/// As `gpufile_file_open`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_open_mode(
    path: *const c_char,
    flags: *const c_char,
    mode: u32,
    out: *mut *mut gpufile_file,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        if path.is_null() {
            return Err(CallError::bad("path is NULL"));
        }
        // SAFETY: non-null, NUL-terminated by the caller's contract. A path is bytes, which
        // need not be UTF-8.
        let path = Path::new(OsStr::from_bytes(
            unsafe { CStr::from_ptr(path) }.to_bytes(),
        ));
        // SAFETY: the caller's contract.
        let flags = unsafe { text(flags, "flags")? };
        let id = FILES.insert(FileHandle::open_with_mode(path, flags, mode)?);
        // SAFETY: checked non-null; valid by the caller's contract.
        unsafe { put(out, id as *mut gpufile_file) };
        Ok(())
    })
}

/// Opens a handle on the file the open descriptor `fd` refers to, with `fd`'s access mode
/// (NIXL's FILE descriptors, a descriptor another library opened): reads and writes go to that
/// file at their offsets and leave `fd` and its offset alone; `fd` stays the caller's to
/// close. The handle has its own descriptor of the file, opened through `/proc/self/fd`
/// (without `fd`'s `O_APPEND` or `O_DIRECT`); `name` (may be NULL: "fd N") is what errors call
/// the file. A descriptor that is not open is `GPUFILE_OTHER` with errno `EBADF`.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `out` is null or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_from_fd(
    fd: c_int,
    name: *const c_char,
    out: *mut *mut gpufile_file,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let name = if name.is_null() {
            std::path::PathBuf::from(format!("fd {fd}"))
        } else {
            // SAFETY: non-null, NUL-terminated by the caller's contract.
            let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
            Path::new(OsStr::from_bytes(bytes)).to_path_buf()
        };
        if fd < 0 {
            return Err(CallError::bad(format!(
                "{}: fd {fd} is negative",
                name.display()
            )));
        }
        // SAFETY: F_GETFD on a plain integer; no memory is passed.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EBADF);
            let (offset, len, op) = (0, 0, gpufile_core::Op::Stat);
            return Err(Error::Os {
                op,
                path: name,
                offset,
                len,
                errno,
            }
            .into());
        }
        // SAFETY: `fd` was open just above and the caller keeps it open during the call (the
        // contract of every descriptor passed in); `from_fd` only asks its flags and reopens
        // the file through it.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let id = FILES.insert(FileHandle::from_fd(borrowed, &name)?);
        // SAFETY: checked non-null; valid by the caller's contract.
        unsafe { put(out, id as *mut gpufile_file) };
        Ok(())
    })
}

/// Closes `file` and frees its handle. Requests still running keep the file open until they
/// end (their futures stay valid). A handle closed already, or NULL, is `GPUFILE_BAD_ARGUMENT`.
#[no_mangle]
pub extern "C" fn gpufile_file_close(file: *mut gpufile_file) -> gpufile_status {
    guard(|| {
        FILES.remove(file as usize)?;
        Ok(())
    })
}

/// Stores the file's current size in bytes in `*out`.
///
/// # Safety
/// `out` is null or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_nbytes(
    file: *const gpufile_file,
    out: *mut u64,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let file = file_of(file)?;
        let size = file.size()?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, size) };
        Ok(())
    })
}

/// The core's description of `size` bytes at `ptr`: device memory where the CUDA driver says
/// the address is device or managed memory, else host memory (also wherever there is no
/// driver or no device: then no address is device memory).
pub(crate) fn buffer(
    ptr: *mut c_void,
    size: usize,
) -> Result<(Buffer, Option<PointerInfo>), CallError> {
    if ptr.is_null() {
        return Err(CallError::bad("buf is NULL"));
    }
    if size > isize::MAX as usize || (ptr as usize).checked_add(size).is_none() {
        return Err(CallError::bad(format!(
            "size {size} at buf {ptr:p} goes past the end of the address space"
        )));
    }
    let host = Buffer::Host {
        ptr: ptr.cast(),
        len: size,
    };
    let addr = ptr as usize as u64;
    match cuda::classify(addr) {
        Ok(info) if matches!(info.kind, MemoryKind::Device | MemoryKind::Managed) => {
            Ok((Buffer::Device { addr, len: size }, Some(info)))
        }
        Ok(_) | Err(Error::CudaUnavailable { .. }) => Ok((host, None)),
        // cuInit fails where the driver has no device.
        Err(Error::Cuda { call: "cuInit", .. }) => Ok((host, None)),
        Err(e) => Err(e.into()),
    }
}

/// Per-request options of the `_ranges` calls (`NULL`: the settings' values for all).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct gpufile_io_options {
    /// Largest piece one worker moves; 0 takes the `task_size` setting.
    pub task_size: usize,
    /// Device requests smaller than this take gpufile's POSIX path (KvikIO's
    /// `gds_threshold`); -1 takes the `gds_threshold` setting.
    pub gds_threshold: i64,
    /// compat_mode for this request (OFF 0, ON 1, AUTO 2: KvikIO's per-file `compat_mode`);
    /// -1 takes the `compat_mode` setting.
    pub compat_mode: i32,
}

/// One range of a many-range request: `size` bytes at `file_offset` in the file and at
/// `buf_offset` in the buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpufile_range {
    /// Offset in the file.
    pub file_offset: u64,
    /// Bytes.
    pub size: usize,
    /// Offset in the buffer.
    pub buf_offset: usize,
}

/// What a request moves: one range of the whole buffer, or the caller's list.
pub(crate) enum What {
    /// The whole buffer at a file offset.
    Whole(u64),
    /// A list of ranges of the buffer.
    Ranges(Ranges),
}

/// `n` ranges at `ranges` as the core's list.
///
/// # Safety
/// `ranges` is null or valid for reads of `n` `gpufile_range`s.
unsafe fn ranges_of(ranges: *const gpufile_range, n: usize) -> Result<Ranges, CallError> {
    if n == 0 {
        return Ok(Ranges::Many(Vec::new().into()));
    }
    if ranges.is_null() {
        return Err(CallError::bad(format!("ranges is NULL (nranges {n})")));
    }
    if n > isize::MAX as usize / std::mem::size_of::<gpufile_range>() {
        return Err(CallError::bad(format!(
            "nranges {n} is past the address space"
        )));
    }
    // SAFETY: non-null and valid for `n` elements by the caller's contract.
    let list = unsafe { std::slice::from_raw_parts(ranges, n) };
    Ok(Ranges::Many(
        list.iter()
            .map(|r| Range {
                file_offset: r.file_offset,
                len: r.size,
                buf_offset: r.buf_offset,
            })
            .collect::<Vec<_>>()
            .into(),
    ))
}

/// The settings a request runs under: the process's, with `opts` applied.
///
/// # Safety
/// `opts` is null or valid for a read of a `gpufile_io_options`.
unsafe fn settings_for(
    opts: *const gpufile_io_options,
) -> Result<(std::sync::Arc<Settings>, Option<usize>), CallError> {
    let engine = Engine::global()?;
    let shared = engine.shared_settings();
    if opts.is_null() {
        return Ok((shared, None));
    }
    // SAFETY: non-null; the caller's contract.
    let opts = unsafe { opts.read() };
    let task_size = (opts.task_size > 0).then_some(opts.task_size);
    let gds_threshold = match opts.gds_threshold {
        -1 => None,
        t if t < 0 => {
            return Err(CallError::bad(format!(
                "gds_threshold {t} is negative (-1 takes the setting)"
            )))
        }
        t => Some(usize::try_from(t).unwrap_or(usize::MAX)),
    };
    let compat_mode = match opts.compat_mode {
        -1 => None,
        0 => Some(CompatMode::Off),
        1 => Some(CompatMode::On),
        2 => Some(CompatMode::Auto),
        m => {
            return Err(CallError::bad(format!(
                "compat_mode {m} is none of OFF 0, ON 1, AUTO 2 (-1 takes the setting)"
            )))
        }
    };
    if gds_threshold.is_none() && compat_mode.is_none() {
        return Ok((shared, task_size));
    }
    let mut s = (*shared).clone();
    s.gds_threshold = gds_threshold.unwrap_or(s.gds_threshold);
    s.compat_mode = compat_mode.unwrap_or(s.compat_mode);
    Ok((std::sync::Arc::new(s), task_size))
}

/// Starts a request between the buffer of `size` bytes at `buf` and `endpoint` on the process
/// engine under `settings`.
///
/// # Safety
/// `buf` is null or valid for `size` bytes (writable for a read) until the returned future is
/// done, and not used otherwise meanwhile.
pub(crate) unsafe fn start_on(
    endpoint: &Endpoint,
    buf: *mut c_void,
    size: usize,
    what: What,
    settings: &Settings,
    task_size: Option<usize>,
    caller_waits: bool,
) -> Result<IoFuture, CallError> {
    let req = request_of(endpoint, buf, size, what, task_size, caller_waits)?;
    let engine = Engine::global()?;
    // SAFETY: the buffer's validity is the caller's contract; `info` is what `cuda::classify`
    // said of its first address.
    Ok(unsafe { engine.submit(endpoint, req, settings) }?)
}

/// The core's request between the buffer of `size` bytes at `buf` and `endpoint`, its ranges
/// checked against the buffer.
fn request_of(
    endpoint: &Endpoint,
    buf: *mut c_void,
    size: usize,
    what: What,
    task_size: Option<usize>,
    caller_waits: bool,
) -> Result<Request, CallError> {
    let (buffer, info) = buffer(buf, size)?;
    let req = match (endpoint.direction(), what) {
        (Direction::Read, What::Whole(off)) => Request::read(buffer, off),
        (Direction::Write, What::Whole(off)) => Request::write(buffer, off),
        (Direction::Read, What::Ranges(r)) => Request::read_ranges(buffer, r),
        (Direction::Write, What::Ranges(r)) => Request::write_ranges(buffer, r),
    };
    req.ranges.check(req.direction, size)?;
    Ok(req
        .pointer_info(info)
        .caller_waits(caller_waits)
        .task_size(task_size))
}

/// Starts a request of `size` bytes between `buf` and `file` at `file_offset` on the process
/// engine under the process settings.
///
/// # Safety
/// As [`start_on`].
unsafe fn start(
    file: *const gpufile_file,
    dir: Direction,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    caller_waits: bool,
) -> Result<IoFuture, CallError> {
    let file = file_of(file)?;
    let settings = Engine::global()?.shared_settings();
    let what = What::Whole(file_offset);
    // SAFETY: the caller's contract.
    unsafe {
        start_on(
            &file.endpoint(dir),
            buf,
            size,
            what,
            &settings,
            None,
            caller_waits,
        )
    }
}

/// A blocking request; stores the bytes moved in `*out_bytes` (if not null).
///
/// # Safety
/// As [`start`]; `out_bytes` is null or valid for a write of a `size_t`.
unsafe fn blocking(
    file: *const gpufile_file,
    dir: Direction,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    out_bytes: *mut usize,
) -> gpufile_status {
    guard(|| {
        // SAFETY: the caller's contract; the buffer is used until `wait` returns only.
        let n = unsafe { start(file, dir, buf, size, file_offset, true)? }.wait()?;
        if !out_bytes.is_null() {
            // SAFETY: non-null; the caller's contract.
            unsafe { put(out_bytes, n) };
        }
        Ok(())
    })
}

/// Reads `size` bytes at `file_offset` of `file` into `buf` (host or device memory); blocks
/// until done and stores the bytes read in `*out_bytes` (if not null). A read past the end
/// of the file is `GPUFILE_END_OF_FILE` (the last error names the file), before any byte
/// moves.
///
/// # Safety
/// `buf` is null or valid for writes of `size` bytes; `out_bytes` is null or valid for a write
/// of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_read(
    file: *const gpufile_file,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    out_bytes: *mut usize,
) -> gpufile_status {
    // SAFETY: the caller's contract.
    unsafe { blocking(file, Direction::Read, buf, size, file_offset, out_bytes) }
}

/// Writes `size` bytes of `buf` (host or device memory) at `file_offset` of `file`; blocks
/// until done and stores the bytes written in `*out_bytes` (if not null).
///
/// # Safety
/// `buf` is null or valid for reads of `size` bytes; `out_bytes` is null or valid for a write
/// of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_write(
    file: *const gpufile_file,
    buf: *const c_void,
    size: usize,
    file_offset: u64,
    out_bytes: *mut usize,
) -> gpufile_status {
    // A write only reads the buffer.
    let buf = buf.cast_mut();
    // SAFETY: the caller's contract.
    unsafe { blocking(file, Direction::Write, buf, size, file_offset, out_bytes) }
}

/// A started request as a future handle in `*out`.
///
/// # Safety
/// As [`start`]; `out` is null or valid for a write of a pointer.
unsafe fn nonblocking(
    file: *const gpufile_file,
    dir: Direction,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    out: *mut *mut gpufile_future,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        // SAFETY: the caller's contract.
        let future = unsafe { start(file, dir, buf, size, file_offset, false)? };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { give_future(future, out) };
        Ok(())
    })
}

/// Starts reading `size` bytes at `file_offset` of `file` into `buf` (host or device memory)
/// and stores a future of it in `*out`. Argument errors (a read past the end, a file not open
/// for reading) come back here, before any byte moves.
///
/// # Safety
/// `buf` is null or valid for writes of `size` bytes until the future is done (waited on,
/// seen done or freed), and not used otherwise meanwhile; `out` is null or valid for a write
/// of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_pread(
    file: *const gpufile_file,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    out: *mut *mut gpufile_future,
) -> gpufile_status {
    // SAFETY: the caller's contract.
    unsafe { nonblocking(file, Direction::Read, buf, size, file_offset, out) }
}

/// Starts writing `size` bytes of `buf` (host or device memory) at `file_offset` of `file`
/// and stores a future of it in `*out`.
///
/// # Safety
/// `buf` is null or valid for reads of `size` bytes and not written until the future is done
/// (waited on, seen done or freed); `out` is null or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_pwrite(
    file: *const gpufile_file,
    buf: *const c_void,
    size: usize,
    file_offset: u64,
    out: *mut *mut gpufile_future,
) -> gpufile_status {
    // A write only reads the buffer.
    let buf = buf.cast_mut();
    // SAFETY: the caller's contract.
    unsafe { nonblocking(file, Direction::Write, buf, size, file_offset, out) }
}

/// A many-range request on `file` in direction `dir`.
///
/// # Safety
/// As [`gpufile_file_pread_ranges`].
#[allow(clippy::too_many_arguments)]
unsafe fn ranges_request(
    file: *const gpufile_file,
    dir: Direction,
    buf: *mut c_void,
    buf_size: usize,
    ranges: *const gpufile_range,
    nranges: usize,
    opts: *const gpufile_io_options,
    out: *mut *mut gpufile_future,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let file = file_of(file)?;
        // SAFETY: the caller's contract.
        let (list, (settings, task_size)) =
            unsafe { (ranges_of(ranges, nranges)?, settings_for(opts)?) };
        let endpoint = file.endpoint(dir);
        // SAFETY: the caller's contract.
        let future = unsafe {
            start_on(
                &endpoint,
                buf,
                buf_size,
                What::Ranges(list),
                &settings,
                task_size,
                false,
            )?
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { give_future(future, out) };
        Ok(())
    })
}

/// Starts one read of `nranges` ranges of `file` into the buffer of `buf_size` bytes at `buf`
/// (host or device memory): each range's bytes land at its `buf_offset`. `opts` may be NULL
/// (the settings' task size and gds_threshold). A range past the buffer, ranges overlapping
/// in the buffer, or a range past the end of the file is refused here, before any byte moves.
/// One range with `opts` is how a read with its own task size is asked for.
///
/// # Safety
/// `buf` is null or valid for writes of `buf_size` bytes until the future is done, and not
/// used otherwise meanwhile; `ranges` is null or valid for reads of `nranges` ranges (read
/// during the call only); `opts` is null or valid for a read; `out` is null or valid for a
/// write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_pread_ranges(
    file: *const gpufile_file,
    buf: *mut c_void,
    buf_size: usize,
    ranges: *const gpufile_range,
    nranges: usize,
    opts: *const gpufile_io_options,
    out: *mut *mut gpufile_future,
) -> gpufile_status {
    // SAFETY: the caller's contract.
    unsafe {
        ranges_request(
            file,
            Direction::Read,
            buf,
            buf_size,
            ranges,
            nranges,
            opts,
            out,
        )
    }
}

/// Starts one write of `nranges` ranges of the buffer of `buf_size` bytes at `buf` to `file`
/// (each range's bytes from its `buf_offset`). Ranges overlapping in the file are refused.
///
/// # Safety
/// As `gpufile_file_pread_ranges`, the buffer read (not written) until the future is done.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_pwrite_ranges(
    file: *const gpufile_file,
    buf: *const c_void,
    buf_size: usize,
    ranges: *const gpufile_range,
    nranges: usize,
    opts: *const gpufile_io_options,
    out: *mut *mut gpufile_future,
) -> gpufile_status {
    // SAFETY: the caller's contract.
    unsafe {
        ranges_request(
            file,
            Direction::Write,
            buf.cast_mut(),
            buf_size,
            ranges,
            nranges,
            opts,
            out,
        )
    }
}

/// Checks a many-range request as `gpufile_file_pread_ranges` (`is_write` 0) or
/// `gpufile_file_pwrite_ranges` (1) checks it, and starts nothing: `GPUFILE_OK` where that call
/// would start it now, else the error it would give (a read past the end, a handle not open
/// for the direction, a range past the buffer, ...). A caller starting several requests as one
/// (KvikIO's `BatchHandle::submit`) checks them all first, so that a refusal moves no byte.
/// The file can still change before the request starts (another process truncating it).
///
/// # Safety
/// `ranges` is null or valid for reads of `nranges` ranges; `opts` is null or valid for a
/// read. `buf` is not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_check_request(
    file: *const gpufile_file,
    is_write: c_int,
    buf: *const c_void,
    buf_size: usize,
    ranges: *const gpufile_range,
    nranges: usize,
    opts: *const gpufile_io_options,
) -> gpufile_status {
    guard(|| {
        let file = file_of(file)?;
        let dir = direction_of(is_write)?;
        // SAFETY: the caller's contract.
        let (list, (settings, task_size)) =
            unsafe { (ranges_of(ranges, nranges)?, settings_for(opts)?) };
        let endpoint = file.endpoint(dir);
        let req = request_of(
            &endpoint,
            buf.cast_mut(),
            buf_size,
            What::Ranges(list),
            task_size,
            false,
        )?;
        Ok(Engine::global()?.check(&endpoint, &req, &settings)?)
    })
}

/// A read (`is_write` 0) or a write (1).
fn direction_of(is_write: c_int) -> Result<Direction, CallError> {
    match is_write {
        0 => Ok(Direction::Read),
        1 => Ok(Direction::Write),
        other => Err(CallError::bad(format!(
            "is_write {other} is neither 0 (a read) nor 1 (a write)"
        ))),
    }
}
