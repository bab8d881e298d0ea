//! Memory gpufile allocates or registers: pinned host buffers, registered host ranges and device
//! buffers, each freed or unregistered on drop in the context it was made in.

use std::ffi::c_void;

use gpufile_sys as sys;

use super::context::{primary_context, Context, ContextGuard};
use super::result;
use crate::error::{Error, Result};

/// Page-locked, page-aligned host memory usable from every context (`CU_MEMHOSTALLOC_PORTABLE`).
pub struct PinnedBuffer {
    ptr: usize,
    len: usize,
    ctx: Context,
}

impl PinnedBuffer {
    /// Allocates `len` bytes under `ctx` (a context gpufile retains, so the free always works).
    pub fn new(len: usize, ctx: Context) -> Result<Self> {
        Self::with_flags(len, ctx, sys::CU_MEMHOSTALLOC_PORTABLE)
    }

    /// As [`PinnedBuffer::new`], also mapped into the devices' address space
    /// (`CU_MEMHOSTALLOC_DEVICEMAP`); the device address of its start.
    pub fn new_mapped(len: usize, ctx: Context) -> Result<(Self, u64)> {
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        let buf = Self::with_flags(len, ctx, flags)?;
        let _g = ContextGuard::push(ctx)?;
        // SAFETY: a mapped allocation this value owns.
        let dev = unsafe { result::mem_host_get_device_pointer(buf.as_ptr().cast()) }?;
        Ok((buf, dev))
    }

    fn with_flags(len: usize, ctx: Context, flags: std::ffi::c_uint) -> Result<Self> {
        let _g = ContextGuard::push(ctx)?;
        let p = result::mem_host_alloc(len.max(1), flags)?;
        Ok(PinnedBuffer {
            ptr: p as usize,
            len,
            ctx,
        })
    }

    /// Start of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let Ok(_g) = ContextGuard::push(self.ctx) {
            // SAFETY: frees the allocation this value made; nobody uses it any more.
            unsafe { result::mem_free_host(self.ptr as *mut c_void) }.ok();
        }
    }
}

/// Host memory the caller owns, page-locked for reads by every GPU (`cuMemHostRegister` with
/// `CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY`: a read-only file mapping can be
/// registered), unregistered on drop.
pub struct HostRegistration {
    ptr: usize,
    len: usize,
    ctx: Context,
}

impl HostRegistration {
    /// Registers `[ptr, ptr + len)` under `ctx` (a context gpufile retains).
    ///
    /// # Safety
    /// The range must be mapped (readable) for as long as the returned value lives: the driver
    /// pins its pages, and copies from it read them.
    pub unsafe fn new(ptr: *const u8, len: usize, ctx: Context) -> Result<Self> {
        let _g = ContextGuard::push(ctx)?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_READ_ONLY;
        // SAFETY: the caller keeps the range mapped while registered; a context is current.
        unsafe { result::mem_host_register(ptr as *mut c_void, len, flags) }?;
        Ok(HostRegistration {
            ptr: ptr as usize,
            len,
            ctx,
        })
    }

    /// Start of the registered range.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr as *const u8
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        if let Ok(_g) = ContextGuard::push(self.ctx) {
            // SAFETY: unregisters the range this value registered; no copy reads it any more
            // (every holder of the registration drained its stream before letting go).
            unsafe { result::mem_host_unregister(self.ptr as *mut c_void) }.ok();
        }
    }
}

/// Device memory from `cuMemAlloc` on a device's primary context, freed on drop (for tests,
/// the CLI and benchmarks; Python callers bring their own arrays).
pub struct DeviceBuffer {
    ptr: u64,
    len: usize,
    ctx: Context,
}

impl DeviceBuffer {
    /// Allocates `len` bytes on device `ordinal`.
    pub fn new(len: usize, ordinal: i32) -> Result<Self> {
        let ctx = primary_context(ordinal)?;
        let _g = ContextGuard::push(ctx)?;
        let p = result::mem_alloc(len.max(1))?;
        Ok(DeviceBuffer { ptr: p, len, ctx })
    }

    /// The device address.
    pub fn addr(&self) -> u64 {
        self.ptr
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` into the buffer at `offset` (blocking).
    pub fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        let _g = ContextGuard::push(self.ctx)?;
        // SAFETY: the range was checked against the allocation; `src` is a valid slice.
        unsafe { result::memcpy_htod(self.ptr + offset as u64, src.as_ptr(), src.len()) }
    }

    /// Copies from the buffer at `offset` into `dst` (blocking).
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        let _g = ContextGuard::push(self.ctx)?;
        // SAFETY: the range was checked against the allocation; `dst` is a valid slice.
        unsafe { result::memcpy_dtoh(dst.as_mut_ptr(), self.ptr + offset as u64, dst.len()) }
    }

    /// Sets every byte to `value` (blocking).
    pub fn fill(&self, value: u8) -> Result<()> {
        let _g = ContextGuard::push(self.ctx)?;
        // SAFETY: the whole allocation.
        unsafe { result::memset_d8(self.ptr, value, self.len) }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len)
    }
}

/// Refuses `offset..offset + len` unless it lies within a device buffer of `size` bytes.
fn check_range(offset: usize, len: usize, size: usize) -> Result<()> {
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(Error::InvalidArgument(format!(
            "range {offset}+{len} outside a device buffer of {size} bytes"
        )));
    }
    Ok(())
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Ok(_g) = ContextGuard::push(self.ctx) {
            // SAFETY: frees the allocation this value made.
            unsafe { result::mem_free(self.ptr) }.ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_inside_a_device_buffer_only() {
        for (offset, len) in [(0, 4096), (4095, 1), (4096, 0), (0, 0)] {
            check_range(offset, len, 4096).unwrap();
        }
        for (offset, len) in [(0, 4097), (4096, 1), (1, 4096), (usize::MAX, 2)] {
            let e = check_range(offset, len, 4096).unwrap_err();
            let want = format!("range {offset}+{len} outside a device buffer of 4096 bytes");
            assert!(
                matches!(&e, Error::InvalidArgument(m) if *m == want),
                "{e:?}"
            );
        }
    }
}
