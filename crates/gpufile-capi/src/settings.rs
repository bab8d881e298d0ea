//! The process settings by name (Python's `gpufile.defaults`, KvikIO's `defaults`): set from
//! an integer or from text, read as either.

use std::ffi::c_char;

use gpufile_core::Engine;
use gpufile_core::{Input, Name, Value};

use crate::error::{give_text, guard, CallError};
use crate::{gpufile_status, out_arg, put, text};

/// The setting `name` (the names of Python's `gpufile.defaults` / KvikIO's `defaults`).
///
/// # Safety
/// `name` is null or a NUL-terminated string.
unsafe fn setting(name: *const c_char) -> Result<Name, CallError> {
    // SAFETY: the caller's contract.
    let name = unsafe { text(name, "name")? };
    Ok(name.parse::<Name>()?)
}

/// Sets `name` to `input` in the process settings, checked as Python's `defaults.set` does.
fn set(name: Name, input: Input<'_>) -> Result<(), CallError> {
    Ok(Engine::global()?.set(&[(name, input)])?)
}

/// The current value of the setting `name`.
fn get(name: Name) -> Result<Value, CallError> {
    Ok(Engine::global()?.settings().get(name))
}

/// Sets the setting `name` to the integer `value`, checked as Python's `defaults.set` checks
/// it: counts and sizes in their ranges, compat_mode OFF=0 / ON=1 / AUTO=2, a flag 0 or 1.
/// An unknown name or a value out of range is `GPUFILE_BAD_ARGUMENT`; nothing changes then.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn gpufile_settings_set_int(
    name: *const c_char,
    value: i64,
) -> gpufile_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let name = unsafe { setting(name)? };
        set(name, Input::Int(i128::from(value)))
    })
}

/// Sets the setting `name` from text, as the environment variables are read: "AUTO" or "off"
/// for compat_mode, "4MiB" for a size, "true" for a flag, "429,503" for a list.
///
/// # Safety
/// `name` and `value` are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn gpufile_settings_set_str(
    name: *const c_char,
    value: *const c_char,
) -> gpufile_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let (name, value) = unsafe { (setting(name)?, text(value, "value")?) };
        set(name, Input::Text(value))
    })
}

/// Stores the setting `name` as an integer in `*out`: a count or size, compat_mode's number
/// (OFF=0, ON=1, AUTO=2), remote_io_backend's, remote_io_reactor_dispatch's, a flag's 0 or 1. A list setting
/// (http_status_codes) is `GPUFILE_BAD_ARGUMENT`: read it with `gpufile_settings_get_str`.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `out` is null or valid for a write of an
/// `int64_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_settings_get_int(
    name: *const c_char,
    out: *mut i64,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        // SAFETY: the caller's contract.
        let name = unsafe { setting(name)? };
        let n = match get(name)? {
            Value::Int(n) => i64::try_from(n).unwrap_or(i64::MAX),
            Value::Bool(b) => i64::from(b),
            Value::CompatMode(m) => i64::from(m as u8),
            Value::RemoteIoBackend(b) => i64::from(b as u8),
            Value::RemoteReactorDispatch(d) => i64::from(d as u8),
            Value::IntList(_) => {
                return Err(CallError::bad(format!(
                    "setting \"{}\" is a list, not an integer: read it with \
                     gpufile_settings_get_str",
                    name.as_str()
                )))
            }
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, n) };
        Ok(())
    })
}

/// Copies the setting `name` as text into `buf` (at most `len` bytes, NUL-terminated where
/// `len > 0`): "AUTO" for compat_mode, "4194304" for a size, "true", "429,500". Stores the
/// bytes the whole text and its NUL need in `*needed` (if not null); `buf` may be null to ask.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `buf` is null or valid for writes of `len`
/// bytes; `needed` is null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_settings_get_str(
    name: *const c_char,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let value = get(unsafe { setting(name)? })?.to_string();
        // SAFETY: the caller's contract.
        unsafe { give_text(&value, buf, len, needed) };
        Ok(())
    })
}
