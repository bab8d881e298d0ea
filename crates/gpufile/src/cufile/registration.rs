//! What is registered with cuFile: file descriptors ([`RegisteredFile`], whose `read`/`write`
//! are single `cuFileRead`/`cuFileWrite` calls), device buffers and streams.

use gpufile_sys::cufile::{self as sys, CUfileDescr_t, CufileApi};

use super::library::api;
use super::lifecycle::{driver_is_open, driver_open, DriverHold};
use super::result::{check, io_result, last_errno};
use crate::error::{Error, Result};

/// A descriptor registered with cuFile; deregistered on drop. While one lives, the driver does
/// not close ([`super::driver_close`]).
pub struct RegisteredFile {
    handle: usize,
    fd: i32,
    api: &'static CufileApi,
    /// Dropped after the handle is deregistered (fields drop after [`Drop::drop`]).
    _hold: DriverHold,
}

impl RegisteredFile {
    /// `cuFileHandleRegister` on `fd` (opens the driver first).
    pub fn register(fd: i32) -> Result<Self> {
        let hold = DriverHold::take()?;
        let api = api()?;
        let mut descr = CUfileDescr_t {
            type_: sys::CU_FILE_HANDLE_TYPE_OPAQUE_FD,
            handle: fd as u32 as u64,
            fs_ops: std::ptr::null(),
        };
        let mut h = std::ptr::null_mut();
        // SAFETY: `descr` describes a live descriptor owned by the caller's file handle, which
        // outlives this registration.
        check("cuFileHandleRegister", unsafe {
            (api.handle_register)(&mut h, &mut descr)
        })?;
        Ok(RegisteredFile {
            handle: h as usize,
            fd,
            api,
            _hold: hold,
        })
    }

    /// The registered descriptor (owned by the file handle, which outlives this value).
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// One `cuFileRead` of `len` bytes at `file_offset` into `base + buf_offset` (device
    /// memory; the caller has the owning context current): the bytes read, which may be fewer
    /// than asked (0 at the end of the file).
    ///
    /// # Safety
    /// `base + buf_offset .. + len` must be valid device memory for the whole call.
    pub unsafe fn read(
        &self,
        base: u64,
        buf_offset: u64,
        len: usize,
        file_offset: u64,
    ) -> Result<usize> {
        // SAFETY: the caller's contract; the handle is registered.
        let ret = unsafe {
            (self.api.read)(
                self.handle as _,
                base as *mut std::ffi::c_void,
                len,
                file_offset as i64,
                buf_offset as i64,
            )
        };
        io_result("cuFileRead", ret, last_errno)
    }

    /// One `cuFileWrite`, as [`RegisteredFile::read`]: the bytes written.
    ///
    /// # Safety
    /// As for [`RegisteredFile::read`].
    pub unsafe fn write(
        &self,
        base: u64,
        buf_offset: u64,
        len: usize,
        file_offset: u64,
    ) -> Result<usize> {
        // SAFETY: the caller's contract; the handle is registered.
        let ret = unsafe {
            (self.api.write)(
                self.handle as _,
                base as *const std::ffi::c_void,
                len,
                file_offset as i64,
                buf_offset as i64,
            )
        };
        io_result("cuFileWrite", ret, last_errno)
    }
}

impl Drop for RegisteredFile {
    fn drop(&mut self) {
        if driver_is_open() {
            // SAFETY: deregisters the handle this value registered; the driver cannot close
            // before `_hold` drops, after this.
            unsafe { (self.api.handle_deregister)(self.handle as _) };
        }
    }
}

/// `cuFileBufRegister` on a device allocation (its base), for KvikIO's `memory_register`.
pub fn buf_register(base: u64, len: usize) -> Result<()> {
    driver_open()?;
    let api = api()?;
    // SAFETY: the caller passes a live device allocation; cuFile pins it until deregistered.
    check("cuFileBufRegister", unsafe {
        (api.buf_register)(base as *const _, len, 0)
    })
}

/// `cuFileBufDeregister`.
pub fn buf_deregister(base: u64) -> Result<()> {
    let api = api()?;
    // SAFETY: deregisters a base previously registered by `buf_register`.
    check("cuFileBufDeregister", unsafe {
        (api.buf_deregister)(base as *const _)
    })
}

/// `cuFileStreamRegister(stream, flags)` (cuFile 1.7+).
pub fn stream_register(stream: u64, flags: u32) -> Result<()> {
    driver_open()?;
    let f = api()?
        .stream_register
        .ok_or_else(|| Error::CufileUnavailable {
            reason: "this cuFile has no streams API (cuFileStreamRegister)".into(),
        })?;
    // SAFETY: the caller passes a live stream handle.
    check("cuFileStreamRegister", unsafe {
        f(stream as gpufile_sys::CUstream, flags)
    })
}

/// `cuFileStreamDeregister(stream)`.
pub fn stream_deregister(stream: u64) -> Result<()> {
    let f = api()?
        .stream_deregister
        .ok_or_else(|| Error::CufileUnavailable {
            reason: "this cuFile has no streams API (cuFileStreamDeregister)".into(),
        })?;
    // SAFETY: the caller passes a stream it registered.
    check("cuFileStreamDeregister", unsafe {
        f(stream as gpufile_sys::CUstream)
    })
}
