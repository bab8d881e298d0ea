//! gpufile's own kernel: the gather kernel (`kernels/gather.cu`), which copies many ranges of
//! registered host memory into device memory with the GPU's own loads.
//!
//! Its PTX (`kernels/gather.ptx`, made by `scripts/build_kernels.sh`) is embedded in the library
//! and loaded once per device, into the device's primary context, the first time a plan asks
//! for it: before that request's I/O starts, on the submitting thread, never on a stream path
//! (loading a module synchronizes the context). A driver that refuses it (older than the PTX's
//! ISA, say) or a device that cannot read host memory at its host address leaves the kernel off
//! for the process, with the reason, and gathers go through bounce buffers.

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::Mutex;

use gpufile_sys::{self as sys, CUfunction};

use super::context::{primary_context, ContextGuard};
use super::result;
use super::stream::Stream;
use crate::error::Result;

/// The kernel's PTX, NUL-terminated as `cuModuleLoadData` reads it.
const PTX: &str = concat!(include_str!("../../kernels/gather.ptx"), "\0");

/// The kernel's entry point in the PTX.
const ENTRY: &CStr = c"gpufile_gather";

/// Threads per block: a block copies one range at a time, 4 KiB in one pass of 16-byte words.
const BLOCK: u32 = 256;

/// Blocks per multiprocessor: enough loads in flight to keep the link busy; 4, 16 and 64 per
/// SM copy 4 KiB rows at the same rate on an H200 (docs/performance.md, "Gathers the GPU
/// does itself"), so the fewest.
const BLOCKS_PER_SM: u32 = 4;

/// One range for the kernel: `len` bytes from `src` (registered host memory, at the address
/// the device reads it by) to device address `dst`. The layout is the kernel's `GatherPiece`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatherPiece {
    /// Source address.
    pub src: u64,
    /// Destination address.
    pub dst: u64,
    /// Bytes.
    pub len: u64,
}

/// The gather kernel, loaded in a device's primary context.
#[derive(Clone, Copy, Debug)]
pub struct GatherKernel {
    func: usize,
    /// Most blocks a launch uses.
    grid: u32,
}

// The loaded kernel per device: the function, or why the device cannot run it.
static KERNELS: Mutex<Option<HashMap<i32, std::result::Result<GatherKernel, String>>>> =
    Mutex::new(None);

/// The gather kernel of device `ordinal`, loaded into its primary context on first ask; why the
/// device cannot run it otherwise (asked again, the answer is the same).
pub fn gather_kernel(ordinal: i32) -> std::result::Result<GatherKernel, String> {
    let mut map = KERNELS.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    map.entry(ordinal)
        .or_insert_with(|| load(ordinal).map_err(|e| e.to_string())?)
        .clone()
}

fn load(ordinal: i32) -> Result<std::result::Result<GatherKernel, String>> {
    let dev = result::device_get(ordinal)?;
    let attr = |a| result::device_get_attribute(a, dev);
    if attr(sys::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? == 0
        || attr(sys::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM)? == 0
    {
        return Ok(Err(format!(
            "GPU {ordinal} cannot read registered host memory at its host address"
        )));
    }
    let sms = attr(sys::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as u32;
    let ctx = primary_context(ordinal)?;
    let _g = ContextGuard::push(ctx)?;
    let ptx = CStr::from_bytes_with_nul(PTX.as_bytes()).map_err(|e| {
        crate::error::Error::InvalidArgument(format!("the gather kernel's PTX: {e}"))
    })?;
    let module = match result::module_load_data(ptx) {
        Ok(m) => m,
        Err(e) => return Ok(Err(format!("the driver refused the gather kernel ({e})"))),
    };
    // SAFETY: the module was just loaded and is never unloaded.
    let func = unsafe { result::module_get_function(module, ENTRY) }?;
    Ok(Ok(GatherKernel {
        func: func as usize,
        grid: sms.saturating_mul(BLOCKS_PER_SM),
    }))
}

impl GatherKernel {
    /// Queues the copy of `n` pieces described at `pieces` on `stream`.
    ///
    /// # Safety
    /// `stream` must belong to the device's primary context (current on this thread); `pieces`
    /// must be `n` pieces in page-locked host memory (which the device reads at its host
    /// address), each source registered host memory and each destination device memory of that
    /// context, destinations not overlapping; all of it must stay valid and unchanged (the
    /// destinations untouched by anyone else) until the stream has passed the launch.
    pub unsafe fn launch(&self, stream: &Stream, pieces: *const GatherPiece, n: u32) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let mut arg_pieces = pieces as u64;
        let mut arg_n = n;
        let mut params = [
            (&mut arg_pieces as *mut u64).cast::<c_void>(),
            (&mut arg_n as *mut u32).cast::<c_void>(),
        ];
        // SAFETY: the caller's contract; `params` point at a u64 and a u32, the kernel's
        // (const GatherPiece*, uint32_t), valid for the call.
        unsafe {
            result::launch_kernel(
                self.func as CUfunction,
                self.grid.min(n),
                BLOCK,
                stream.raw(),
                &mut params,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_ptx_names_the_entry_and_matches_the_piece_layout() {
        assert!(PTX.contains(".entry gpufile_gather("));
        assert!(PTX.ends_with('\0') && !PTX[..PTX.len() - 1].contains('\0'));
        // Three u64 in the kernel's `GatherPiece`: 24 bytes, read at offsets 0, 8 and 16.
        assert_eq!(std::mem::size_of::<GatherPiece>(), 24);
        assert_eq!(std::mem::align_of::<GatherPiece>(), 8);
    }
}
