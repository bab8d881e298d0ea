//! What KvikIO's C++ names need beyond reads and writes: a file's descriptors, the kind of
//! memory at an address, the compat-mode decision, cuFile's driver and buffer registration.

use std::ffi::{c_char, c_int, c_void};

use gpufile_core::__private::cuda::{self, MemoryKind};
use gpufile_core::__private::cufile::{self, DriverSetting, DriverValue};
use gpufile_core::CompatMode;
use gpufile_core::{Engine, Error, Memory};

use crate::error::{guard, CallError};
use crate::{file_of, gpufile_file, gpufile_status, out_arg, put, text};

/// Stores the file's descriptor in `*out`: the one opened without `O_DIRECT` (`o_direct` 0),
/// or the `O_DIRECT` one (1; -1 where the file has none). The descriptor stays the file's:
/// it is closed by `gpufile_file_close`.
///
/// # Safety
/// `out` is null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_fd(
    file: *const gpufile_file,
    o_direct: c_int,
    out: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let file = file_of(file)?;
        let fd = match o_direct {
            0 => file.fd(),
            // Asked through the handle, which says why where there is none (no `/proc`).
            1 => match file.is_direct_io_supported() {
                true => file.local().direct_fd().unwrap_or(-1),
                false => -1,
            },
            other => {
                return Err(CallError::bad(format!(
                    "o_direct {other} is neither 0 nor 1"
                )))
            }
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, fd) };
        Ok(())
    })
}

/// Stores the file's open flags (`fcntl(F_GETFL)`) in `*out`.
///
/// # Safety
/// `out` is null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_open_flags(
    file: *const gpufile_file,
    out: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let flags = file_of(file)?.open_flags()?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, flags) };
        Ok(())
    })
}

/// Stores 1 in `*out` where the file can be read with `O_DIRECT`, else 0.
///
/// # Safety
/// `out` is null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_file_is_direct_io_supported(
    file: *const gpufile_file,
    out: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let yes = file_of(file)?.is_direct_io_supported();
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, c_int::from(yes)) };
        Ok(())
    })
}

/// Stores in `*out` the kind of memory at `ptr` as requests see it: `GPUFILE_MEMORY_DEVICE`
/// for device and managed memory, else `GPUFILE_MEMORY_HOST` (also wherever there is no CUDA
/// driver or device).
///
/// # Safety
/// `out` is null or valid for a write of an `int`. `ptr` is not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn gpufile_memory_kind(
    ptr: *const c_void,
    out: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let kind = match cuda::classify(ptr as usize as u64) {
            Ok(info) if matches!(info.kind, MemoryKind::Device | MemoryKind::Managed) => {
                crate::GPUFILE_MEMORY_DEVICE
            }
            Ok(_) | Err(Error::CudaUnavailable { .. }) => crate::GPUFILE_MEMORY_HOST,
            Err(Error::Cuda { call: "cuInit", .. }) => crate::GPUFILE_MEMORY_HOST,
            Err(e) => return Err(e.into()),
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, kind) };
        Ok(())
    })
}

/// Stores 1 in `*out` where device I/O of any size would take gpufile's POSIX path rather
/// than cuFile under the current settings with `compat_mode` (OFF 0, ON 1, AUTO 2; -1: the
/// setting): KvikIO's `defaults::is_compat_mode_preferred`. ON, or AUTO without a usable
/// cuFile, is 1; OFF is 0.
///
/// # Safety
/// `out` is null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_compat_mode_preferred(
    compat_mode: c_int,
    out: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let mut s = Engine::global()?.settings();
        s.compat_mode = match compat_mode {
            -1 => s.compat_mode,
            0 => CompatMode::Off,
            1 => CompatMode::On,
            2 => CompatMode::Auto,
            m => {
                return Err(CallError::bad(format!(
                    "compat_mode {m} is none of OFF 0, ON 1, AUTO 2 (-1 takes the setting)"
                )))
            }
        };
        let posix = match s.compat_mode {
            CompatMode::On => true,
            CompatMode::Off => false,
            CompatMode::Auto => {
                let policy = gpufile_core::__private::plan::Policy::from(&s);
                let chosen = gpufile_core::__private::plan::choose_path(
                    Memory::Device,
                    usize::MAX,
                    policy,
                    cufile::availability,
                );
                // An error: require_gds insists on cuFile.
                chosen.is_ok_and(|p| p.backend == gpufile_core::Backend::GpufilePosix)
            }
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, c_int::from(posix)) };
        Ok(())
    })
}

/// Opens cuFile's driver (KvikIO's `DriverInitializer`); `GPUFILE_CUFILE` where cuFile is
/// missing or refuses.
#[no_mangle]
pub extern "C" fn gpufile_cufile_driver_open() -> gpufile_status {
    guard(|| Ok(cufile::driver_open()?))
}

/// Closes cuFile's driver once no file or buffer registered with it is left.
#[no_mangle]
pub extern "C" fn gpufile_cufile_driver_close() -> gpufile_status {
    guard(|| Ok(cufile::driver_close()?))
}

/// The cuFile driver property `name` (Python's `gpufile.cufile_driver` names:
/// "is_gds_available", "major_version", "minor_version", "allow_compat_mode",
/// "per_buffer_cache_size", "poll_mode", "poll_thresh_size", "max_device_cache_size",
/// "max_pinned_memory_size").
///
/// # Safety
/// `name` is null or NUL-terminated.
unsafe fn driver_setting(name: *const c_char) -> Result<DriverSetting, CallError> {
    // SAFETY: the caller's contract.
    let name = unsafe { text(name, "name")? };
    DriverSetting::ALL
        .into_iter()
        .find(|s| s.as_str() == name)
        .ok_or_else(|| {
            let known: Vec<&str> = DriverSetting::ALL.iter().map(|s| s.as_str()).collect();
            CallError::bad(format!(
                "unknown cuFile driver property {name:?} (known: {})",
                known.join(", ")
            ))
        })
}

/// Stores the cuFile driver property `name` in `*out` (a flag as 0 or 1, sizes in KiB);
/// opens the driver.
///
/// # Safety
/// `name` is null or NUL-terminated; `out` is null or valid for a write of an `int64_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_cufile_driver_get(
    name: *const c_char,
    out: *mut i64,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        // SAFETY: the caller's contract.
        let setting = unsafe { driver_setting(name)? };
        let v = match cufile::driver_setting(setting)? {
            DriverValue::Bool(b) => i64::from(b),
            DriverValue::Int(n) => i64::try_from(n).unwrap_or(i64::MAX),
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, v) };
        Ok(())
    })
}

/// Sets the settable cuFile driver property `name` ("poll_mode", "poll_thresh_size",
/// "max_device_cache_size", "max_pinned_memory_size") to `value`; a read-only one is
/// `GPUFILE_BAD_ARGUMENT`.
///
/// # Safety
/// `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn gpufile_cufile_driver_set(
    name: *const c_char,
    value: i64,
) -> gpufile_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let setting = unsafe { driver_setting(name)? };
        let value = match setting.is_bool() {
            true => match value {
                0 | 1 => DriverValue::Bool(value == 1),
                v => {
                    return Err(CallError::bad(format!(
                        "{} takes 0 or 1, not {v}",
                        setting.as_str()
                    )))
                }
            },
            false => DriverValue::Int(u64::try_from(value).map_err(|_| {
                CallError::bad(format!("{} takes a size, not {value}", setting.as_str()))
            })?),
        };
        Ok(cufile::set_driver_setting(setting, value)?)
    })
}

/// The device allocation holding `ptr`: its base and size, `None` for host memory.
fn allocation(ptr: *const c_void) -> Result<Option<(u64, usize)>, CallError> {
    if ptr.is_null() {
        return Err(CallError::bad("ptr is NULL"));
    }
    Ok(match cuda::classify(ptr as usize as u64) {
        Ok(info) if matches!(info.kind, MemoryKind::Device | MemoryKind::Managed) => {
            Some((info.base, info.size))
        }
        _ => None,
    })
}

/// Registers `size` bytes of device memory at `ptr` with cuFile (`cuFileBufRegister`; KvikIO's
/// `buffer_register`), or with `size` 0 the whole allocation holding `ptr` (KvikIO's
/// `memory_register`). Host memory is left alone (cuFile never reads it). `GPUFILE_CUFILE`
/// where cuFile is missing or refuses.
#[no_mangle]
pub extern "C" fn gpufile_buffer_register(ptr: *const c_void, size: usize) -> gpufile_status {
    guard(|| match allocation(ptr)? {
        Some((base, whole)) if size == 0 => Ok(cufile::buf_register(base, whole)?),
        Some(_) => Ok(cufile::buf_register(ptr as usize as u64, size)?),
        None => Ok(()),
    })
}

/// Deregisters what `gpufile_buffer_register(ptr, size)` registered: `ptr` itself, or with
/// `whole_allocation` 1 the base of its allocation (host memory: nothing).
#[no_mangle]
pub extern "C" fn gpufile_buffer_deregister(
    ptr: *const c_void,
    whole_allocation: c_int,
) -> gpufile_status {
    guard(|| match allocation(ptr)? {
        Some((base, _)) if whole_allocation != 0 => Ok(cufile::buf_deregister(base)?),
        Some(_) => Ok(cufile::buf_deregister(ptr as usize as u64)?),
        None => Ok(()),
    })
}

/// The descriptor to use and the path errors name: `fd` where it is not negative, else
/// `path` opened read-only (kept open in the returned file) as every path is opened: a FIFO or
/// a socket is refused at once (`GPUFILE_BAD_ARGUMENT`, errno `ESPIPE`), never waited on.
///
/// # Safety
/// `path` is null or NUL-terminated.
unsafe fn fd_or_path(
    fd: c_int,
    path: *const c_char,
) -> Result<(c_int, std::path::PathBuf, Option<std::fs::File>), CallError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    if fd >= 0 {
        return Ok((fd, format!("fd {fd}").into(), None));
    }
    if path.is_null() {
        return Err(CallError::bad(format!(
            "fd {fd} is negative and path is NULL"
        )));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let bytes = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    let p = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(bytes));
    let f = gpufile_core::__private::pagecache::open(&p)?;
    Ok((f.as_raw_fd(), p, Some(f)))
}

/// KvikIO's `get_page_cache_info`: of the pages of `length` bytes (0: to the end of the file)
/// at `offset` of the file `fd` (or, with `fd` -1, `path`), how many are in the page cache
/// (`*out_cached`) of how many (`*out_total`). A bad descriptor or a missing file is an OS
/// error with its errno (`GPUFILE_OTHER`, errno 9; `GPUFILE_NOT_FOUND`).
///
/// # Safety
/// `path` is null or NUL-terminated; the out-parameters are null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn gpufile_page_cache_info(
    fd: c_int,
    path: *const c_char,
    offset: u64,
    length: u64,
    out_cached: *mut u64,
    out_total: *mut u64,
) -> gpufile_status {
    guard(|| {
        out_arg(out_cached, "out_cached")?;
        out_arg(out_total, "out_total")?;
        // SAFETY: the caller's contract.
        let (fd, p, _open) = unsafe { fd_or_path(fd, path)? };
        let (cached, total) =
            gpufile_core::__private::pagecache::page_cache_info(fd, &p, offset, length)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe {
            put(out_cached, cached);
            put(out_total, total);
        }
        Ok(())
    })
}

/// KvikIO's `drop_file_page_cache`: evicts the pages of `length` bytes (0: to the end) at
/// `offset` of `fd` (or, with `fd` -1, `path`), writing dirty ones first with `sync_first`.
///
/// # Safety
/// `path` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn gpufile_drop_file_page_cache(
    fd: c_int,
    path: *const c_char,
    offset: u64,
    length: u64,
    sync_first: c_int,
) -> gpufile_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let (fd, p, _open) = unsafe { fd_or_path(fd, path)? };
        let sync = sync_first != 0;
        Ok(gpufile_core::__private::pagecache::drop_file_page_cache(
            fd, &p, offset, length, sync,
        )?)
    })
}

/// KvikIO's `drop_system_page_cache` (needs root): stores 1 in `*out` where it dropped.
///
/// # Safety
/// `out` is null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_drop_system_page_cache(
    reclaim_dentries_and_inodes: c_int,
    sync_first: c_int,
    out: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let done = gpufile_core::__private::pagecache::drop_system_page_cache(
            reclaim_dentries_and_inodes != 0,
            sync_first != 0,
        );
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, c_int::from(done)) };
        Ok(())
    })
}
