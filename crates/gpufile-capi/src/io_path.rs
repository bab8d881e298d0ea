//! Path reports before a request runs: what would move its bytes, and why.

use std::ffi::{c_char, c_int, c_void};

use gpufile_core::{Backend, Engine, Memory};

use crate::error::{give_text, guard, CallError};
use crate::{
    buffer, direction_of, file_of, gpufile_backend, gpufile_file, gpufile_io_options,
    gpufile_range, gpufile_status, out_arg, put, ranges_of, settings_for, GPUFILE_MEMORY_DEVICE,
    GPUFILE_MEMORY_HOST,
};

/// The path report of `file`: what would move the bytes of a read of `size` bytes into
/// `memory` (`GPUFILE_MEMORY_HOST` or `GPUFILE_MEMORY_DEVICE`) under the current settings
/// (`*out_backend`), and why (copied into `reason`, at most `len` bytes, NUL-terminated where
/// `len > 0`; the bytes the whole text and its NUL need in `*needed`, if not null). Where
/// compat_mode OFF cannot be honoured, the error says why (`GPUFILE_CUFILE`).
///
/// # Safety
/// `out_backend` is null or valid for a write of a
/// `gpufile_backend`; `reason` is null or valid for writes of `len` bytes; `needed` is null or
/// valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_io_path(
    file: *const gpufile_file,
    memory: c_int,
    size: usize,
    out_backend: *mut gpufile_backend,
    reason: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        out_arg(out_backend, "out_backend")?;
        let file = file_of(file)?;
        let memory = match memory {
            GPUFILE_MEMORY_HOST => Memory::Host,
            GPUFILE_MEMORY_DEVICE => Memory::Device,
            other => {
                return Err(CallError::bad(format!(
                    "memory {other} is neither GPUFILE_MEMORY_HOST (0) nor \
                     GPUFILE_MEMORY_DEVICE (1)"
                )))
            }
        };
        let settings = Engine::global()?.settings();
        let path = file.io_path(memory, size, &settings)?;
        // SAFETY: the caller's contract.
        unsafe { report_path(&path, out_backend, reason, len, needed) };
        Ok(())
    })
}

/// Stores `path`'s backend in `*out_backend` (checked non-null) and copies its reason out.
///
/// # Safety
/// As `gpufile_file_io_path`'s out-parameters.
unsafe fn report_path(
    path: &gpufile_core::IoPath,
    out_backend: *mut gpufile_backend,
    reason: *mut c_char,
    len: usize,
    needed: *mut usize,
) {
    let backend = match path.backend {
        Backend::GpufilePosix => gpufile_backend::GPUFILE_BACKEND_POSIX,
        Backend::Cufile => gpufile_backend::GPUFILE_BACKEND_CUFILE,
    };
    // SAFETY: checked non-null by the caller; the caller's contract.
    unsafe { put(out_backend, backend) };
    // SAFETY: the caller's contract.
    unsafe { give_text(&path.reason.to_string(), reason, len, needed) };
}

/// The path report of a request before it runs: what would move the bytes of the read
/// (`is_write` 0) or write (1) of `nranges` ranges between `file` and the buffer of
/// `buf_size` bytes at `buf`, under the current settings and `opts` (may be NULL), and why.
/// The buffer's memory kind is asked of the CUDA driver as a request asks it; the ranges are
/// checked as the request checks them (a range past the buffer is `GPUFILE_BAD_ARGUMENT`).
/// Out-parameters as `gpufile_file_io_path`.
///
/// # Safety
/// `ranges` is null or valid for reads of `nranges` ranges; `opts` is null or valid for a
/// read; the out-parameters as `gpufile_file_io_path`'s. `buf` is not dereferenced.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn gpufile_file_request_io_path(
    file: *const gpufile_file,
    is_write: c_int,
    buf: *const c_void,
    buf_size: usize,
    ranges: *const gpufile_range,
    nranges: usize,
    opts: *const gpufile_io_options,
    out_backend: *mut gpufile_backend,
    reason: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        out_arg(out_backend, "out_backend")?;
        let file = file_of(file)?;
        let dir = direction_of(is_write)?;
        // SAFETY: the caller's contract.
        let (list, (settings, _)) = unsafe { (ranges_of(ranges, nranges)?, settings_for(opts)?) };
        let (buffer, _) = buffer(buf.cast_mut(), buf_size)?;
        list.check(dir, buf_size)?;
        let path = Engine::io_path(
            &file.endpoint(dir),
            buffer.memory(),
            list.bytes(),
            &settings,
        )?;
        // SAFETY: the caller's contract.
        unsafe { report_path(&path, out_backend, reason, len, needed) };
        Ok(())
    })
}
