//! `Mmap`: a file region mapped read-only (the core's `MmapSource`), read into host or device
//! memory through the engine.

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use gpufile_core::source::{Endpoint, MapOptions, MmapSource};
use gpufile_core::Engine;

use crate::error::{guard, CallError};
use crate::handles::Table;
use crate::{give_future, gpufile_future, gpufile_status, out_arg, put, start_on, text, What};

/// A mapped file region (opaque; from `gpufile_mmap_open`, freed by `gpufile_mmap_close`).
pub struct gpufile_mmap {
    _opaque: (),
}

static MMAPS: Table<MmapSource> = Table::new("mmap");

fn size_arg(size: i64, what: &str) -> Result<Option<u64>, CallError> {
    match size {
        -1 => Ok(None),
        n if n < 0 => Err(CallError::bad(format!(
            "{what} {n} is negative (-1: to the end of the file)"
        ))),
        n => Ok(Some(n as u64)),
    }
}

/// Maps `initial_map_size` bytes (-1: to the end of the file) at `initial_map_offset` of
/// `path`, opened with `flags` ("r" or "r+"), as KvikIO's `MmapHandle`; `mode` is the
/// permission of a file the open creates; `map_flags` 0 is `MAP_PRIVATE`. An offset at or past
/// the end of the file, or a region past it, is `GPUFILE_OUT_OF_RANGE`; a zero-byte region or bad
/// flags `GPUFILE_BAD_ARGUMENT`, both with KvikIO's messages; a missing file
/// `GPUFILE_NOT_FOUND`.
///
/// # Safety
/// `path` and `flags` are null or NUL-terminated; `out` is null or valid for a write of a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn gpufile_mmap_open(
    path: *const c_char,
    flags: *const c_char,
    initial_map_size: i64,
    initial_map_offset: u64,
    mode: u32,
    map_flags: c_int,
    out: *mut *mut gpufile_mmap,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        if path.is_null() {
            return Err(CallError::bad("path is NULL"));
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let path = Path::new(OsStr::from_bytes(
            unsafe { CStr::from_ptr(path) }.to_bytes(),
        ));
        // SAFETY: the caller's contract.
        let flags = unsafe { text(flags, "flags")? };
        let options = MapOptions {
            size: size_arg(initial_map_size, "initial_map_size")?,
            offset: initial_map_offset,
            mode,
            map_flags: (map_flags != 0).then_some(map_flags),
        };
        let id = MMAPS.insert(MmapSource::open(path, flags, options)?);
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, id as *mut gpufile_mmap) };
        Ok(())
    })
}

/// Unmaps `m` and frees its handle; reads still running keep the mapping until they end.
#[no_mangle]
pub extern "C" fn gpufile_mmap_close(m: *mut gpufile_mmap) -> gpufile_status {
    guard(|| {
        MMAPS.remove(m as usize)?;
        Ok(())
    })
}

/// Stores the mapped region's size, its file offset and the file's size now (any may be
/// NULL) through the out-parameters.
///
/// # Safety
/// Each out-parameter is null or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_mmap_info(
    m: *const gpufile_mmap,
    out_map_size: *mut u64,
    out_map_offset: *mut u64,
    out_file_size: *mut u64,
) -> gpufile_status {
    guard(|| {
        let m = MMAPS.get(m as usize)?;
        let file_size = m.current_size()?;
        for (out, v) in [
            (out_map_size, m.initial_map_size()),
            (out_map_offset, m.initial_map_offset()),
            (out_file_size, file_size),
        ] {
            if !out.is_null() {
                // SAFETY: non-null; the caller's contract.
                unsafe { put(out, v) };
            }
        }
        Ok(())
    })
}

/// Starts reading `size` bytes (-1: to the end of the file) at `offset` of the mapped region
/// into the buffer of `buf_size` bytes at `buf` (host or device memory); `task_size` 0 takes
/// the setting. An offset past the end of the file or a read outside the region is
/// `GPUFILE_OUT_OF_RANGE` (KvikIO's "Offset is past the end of file", "Read is out of bound"),
/// one larger than the buffer `GPUFILE_BAD_ARGUMENT`, before any byte moves.
///
/// # Safety
/// As `gpufile_file_pread`, for `buf_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpufile_mmap_pread(
    m: *const gpufile_mmap,
    buf: *mut c_void,
    buf_size: usize,
    size: i64,
    offset: u64,
    task_size: usize,
    out: *mut *mut gpufile_future,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let source = MMAPS.get(m as usize)?;
        let len = source.read_len(size_arg(size, "size")?, offset)?;
        if len > buf_size {
            return Err(CallError::bad(format!(
                "a read of {len} bytes is larger than the buffer ({buf_size} bytes)"
            )));
        }
        let settings = Engine::global()?.shared_settings();
        let endpoint = Endpoint::Read(source as Arc<_>);
        // SAFETY: the caller's contract (`len <= buf_size`).
        let future = unsafe {
            start_on(
                &endpoint,
                buf,
                len,
                What::Whole(offset),
                &settings,
                (task_size > 0).then_some(task_size),
                false,
            )?
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { give_future(future, out) };
        Ok(())
    })
}
