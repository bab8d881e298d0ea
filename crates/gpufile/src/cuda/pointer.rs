//! Pointer classification: what kind of memory an address is, on which device, in which context;
//! and the resolved GPU memory a request's executors address ([`DeviceTarget`]).

use gpufile_sys as sys;

use super::context::Context;
use super::result;
use crate::error::Result;

/// What kind of memory an address points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    /// Host memory CUDA does not know (pageable).
    Host,
    /// Page-locked host memory (cuMemHostAlloc / cuMemHostRegister).
    PinnedHost,
    /// Device memory.
    Device,
    /// Managed (unified) memory.
    Managed,
}

/// What the driver knows about an address.
#[derive(Clone, Copy, Debug)]
pub struct PointerInfo {
    /// The memory kind.
    pub kind: MemoryKind,
    /// The device holding it (device and managed memory).
    pub device: Option<i32>,
    /// The context that owns the allocation.
    pub context: Option<Context>,
    /// Start of the allocation holding the address.
    pub base: u64,
    /// Size of that allocation.
    pub size: usize,
}

/// GPU memory as a request's executors address it: the first byte of the caller's range, the
/// context that owns its allocation and the device holding it.
#[derive(Clone, Copy, Debug)]
pub struct DeviceTarget {
    /// First byte of the caller's range.
    pub addr: u64,
    /// The context owning the allocation.
    pub ctx: Context,
    /// The device ordinal.
    pub device: i32,
}

/// Classifies `addr` with `cuPointerGetAttributes` (which, unlike `cuPointerGetAttribute`,
/// answers "unknown host memory" for addresses CUDA never saw, instead of failing).
pub fn classify(addr: u64) -> Result<PointerInfo> {
    let attrs = [
        sys::CU_POINTER_ATTRIBUTE_CONTEXT,
        sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        sys::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        sys::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        sys::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        sys::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let [ctx, mem_type, managed, ordinal, base, size] =
        result::pointer_get_attributes(attrs, addr)?;
    let mem_type = mem_type as u32;
    let kind = if managed as u8 != 0 {
        MemoryKind::Managed
    } else {
        match mem_type {
            sys::CU_MEMORYTYPE_DEVICE => MemoryKind::Device,
            sys::CU_MEMORYTYPE_UNIFIED => MemoryKind::Managed,
            sys::CU_MEMORYTYPE_HOST => MemoryKind::PinnedHost,
            _ => MemoryKind::Host,
        }
    };
    let on_device = matches!(kind, MemoryKind::Device | MemoryKind::Managed);
    Ok(PointerInfo {
        kind,
        device: on_device.then_some(ordinal as u32 as i32),
        context: (ctx != 0).then(|| Context::from_raw(ctx as usize as sys::CUcontext)),
        base,
        size: size as usize,
    })
}
