//! `check` (gpufile-diag) and `observe` (the core's I/O report) as JSON text.

use std::ffi::{c_char, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use gpufile_core::observe::{self, Observation};

use crate::error::{give_text, guard, CallError};
use crate::handles::Table;
use crate::{gpufile_status, out_arg, put};

/// An observation in progress (opaque; from `gpufile_observe_begin`, ended by
/// `gpufile_observe_end`).
pub struct gpufile_observation {
    _opaque: (),
}

static OBSERVATIONS: Table<std::sync::Mutex<Option<Observation>>> = Table::new("observation");

/// Probes the machine (and `path`, if not NULL) as `gpufile check --json` does, and copies
/// the report's JSON into `buf` (at most `len` bytes, NUL-terminated where `len > 0`); the
/// bytes the whole text needs in `*needed` (if not null): call with `buf` NULL to size it.
///
/// # Safety
/// `path` is null or NUL-terminated; `buf` is null or valid for writes of `len` bytes;
/// `needed` is null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_check(
    path: *const c_char,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        let path = match path.is_null() {
            true => None,
            // SAFETY: non-null and NUL-terminated by the caller's contract.
            false => Some(Path::new(OsStr::from_bytes(
                unsafe { CStr::from_ptr(path) }.to_bytes(),
            ))),
        };
        let json = gpufile_diag::check::check(path).to_json().to_string();
        // SAFETY: the caller's contract.
        unsafe { give_text(&json, buf, len, needed) };
        Ok(())
    })
}

/// Starts observing the process's I/O (Python's `gpufile.observe()`); `gpufile_observe_end`
/// reports what ran since.
///
/// # Safety
/// `out` is null or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpufile_observe_begin(
    out: *mut *mut gpufile_observation,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let id = OBSERVATIONS.insert(std::sync::Mutex::new(Some(observe::begin())));
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, id as *mut gpufile_observation) };
        Ok(())
    })
}

/// Ends `obs` (its handle is freed) and copies the report's JSON (bytes and requests per
/// backend, cuFile's statistics where it ran) into `buf` as `gpufile_check` does.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes; `needed` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_observe_end(
    obs: *mut gpufile_observation,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        let slot = OBSERVATIONS.remove(obs as usize)?;
        let taken = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        let obs = taken.ok_or_else(|| CallError::bad("observation ended already"))?;
        let json = observe::end(obs).to_json().to_string();
        // SAFETY: the caller's contract.
        unsafe { give_text(&json, buf, len, needed) };
        Ok(())
    })
}
