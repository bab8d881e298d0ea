//! Run-time bindings of the CUDA driver (`libcuda.so.1`) for gpufile.
//!
//! How to use:
//! 1. [`cuda()`] loads the driver library once per process and resolves every symbol by its
//!    versioned name (`cuMemcpyHtoDAsync_v2`, ...). A missing library or symbol is a
//!    [`LoadError`] value, never a panic or an abort.
//! 2. Call the function pointers of [`CudaApi`]; every one is `unsafe` and returns a
//!    [`CUresult`]. Safe wrappers live in the `gpufile` crate (`gpufile::cuda`).
//!
//! Only `libcuda.so.1` is ever opened (the driver's soname), never the toolkit's link-time stub
//! `libcuda.so`, which fails every call.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use libloading::Library;

/// The driver's status code (`CUDA_SUCCESS` is 0).
pub type CUresult = c_int;
/// A device ordinal handle.
pub type CUdevice = c_int;
/// A device address.
pub type CUdeviceptr = u64;
/// An opaque context handle.
pub type CUcontext = *mut c_void;
/// An opaque stream handle.
pub type CUstream = *mut c_void;
/// An opaque event handle.
pub type CUevent = *mut c_void;
/// A loaded module (`CUmodule`).
pub type CUmodule = *mut c_void;
/// A kernel of a loaded module (`CUfunction`).
pub type CUfunction = *mut c_void;

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CUresult = 0;
/// `CUDA_ERROR_NOT_READY` (from `cuStreamQuery` and `cuEventQuery`).
pub const CUDA_ERROR_NOT_READY: CUresult = 600;

/// `CU_POINTER_ATTRIBUTE_CONTEXT`.
pub const CU_POINTER_ATTRIBUTE_CONTEXT: c_uint = 1;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`.
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_uint = 2;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_uint = 8;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`.
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_uint = 9;
/// `CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`.
pub const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: c_uint = 11;
/// `CU_POINTER_ATTRIBUTE_RANGE_SIZE`.
pub const CU_POINTER_ATTRIBUTE_RANGE_SIZE: c_uint = 12;

/// `CU_MEMORYTYPE_HOST`.
pub const CU_MEMORYTYPE_HOST: c_uint = 1;
/// `CU_MEMORYTYPE_DEVICE`.
pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;
/// `CU_MEMORYTYPE_UNIFIED`.
pub const CU_MEMORYTYPE_UNIFIED: c_uint = 4;

/// `CU_MEMHOSTALLOC_PORTABLE`: pinned memory usable from every context.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x01;
/// `CU_MEMHOSTALLOC_DEVICEMAP`: pinned memory mapped into the device's address space.
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 0x02;
/// `CU_MEMHOSTREGISTER_PORTABLE`.
pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 0x01;
/// `CU_MEMHOSTREGISTER_READ_ONLY`: the device only reads the registered range.
pub const CU_MEMHOSTREGISTER_READ_ONLY: c_uint = 0x08;
/// `CU_STREAM_NON_BLOCKING`: no implicit sync with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;

/// `CU_STREAM_WAIT_VALUE_GEQ`: wait until `(int32_t)(*addr - value) >= 0` (a cyclic compare).
pub const CU_STREAM_WAIT_VALUE_GEQ: c_uint = 0x0;

/// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1`: the v1 stream memory operations
/// (`cuStreamWaitValue32` before CUDA 12) are enabled.
pub const CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: c_int = 92;
/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
/// `CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING`: host memory from `cuMemHostAlloc` is read by
/// kernels at its host address.
pub const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: c_int = 41;
/// `CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM`: registered host memory is
/// read by kernels at its host address.
pub const CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: c_int = 91;
/// `CU_DEVICE_ATTRIBUTE_PCI_BUS_ID`.
pub const CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: c_int = 33;
/// `CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID`.
pub const CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: c_int = 34;
/// `CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID`.
pub const CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: c_int = 50;

/// Why the driver API could not be loaded.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LoadError {
    /// The library itself did not load.
    #[error("cannot load {library}: {detail}")]
    Library {
        /// The soname asked for.
        library: &'static str,
        /// The loader's message.
        detail: String,
    },
    /// The library loaded but lacks a symbol gpufile needs.
    #[error("{library} has no symbol {symbol} (driver too old?): {detail}")]
    Symbol {
        /// The soname.
        library: &'static str,
        /// The missing symbol.
        symbol: &'static str,
        /// The loader's message.
        detail: String,
    },
}

macro_rules! api_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident from $lib:literal {
            $( $(#[$fmeta:meta])* $field:ident = $sym:literal : fn($($arg:ty),*) -> $ret:ty; )*
        }
        optional {
            $( $(#[$ometa:meta])* $ofield:ident = $osym:literal : fn($($oarg:ty),*) -> $oret:ty; )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* #[doc = concat!("`", $sym, "`")] pub $field: unsafe extern "C" fn($($arg),*) -> $ret, )*
            $( $(#[$ometa])* #[doc = concat!("`", $osym, "`, where the library has it")] pub $ofield: Option<unsafe extern "C" fn($($oarg),*) -> $oret>, )*
            _lib: Library,
        }

        impl $name {
            /// The library's soname.
            pub const LIBRARY: &'static str = $lib;

            /// Resolves every symbol of `lib` (opened by the caller, from wherever it was found).
            fn from_library(lib: Library) -> Result<Self, LoadError> {
                $(
                    // SAFETY: the symbol is the vendor's C function of exactly this signature
                    // (its public header); the pointer stays valid while `_lib` is held.
                    let $field = unsafe {
                        *lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                            concat!($sym, "\0").as_bytes(),
                        )
                        .map_err(|e| LoadError::Symbol {
                            library: $lib,
                            symbol: $sym,
                            detail: $crate::loader_message(&e),
                        })?
                    };
                )*
                $(
                    // SAFETY: as above; a symbol missing from an older library is `None`.
                    let $ofield = unsafe {
                        lib.get::<unsafe extern "C" fn($($oarg),*) -> $oret>(
                            concat!($osym, "\0").as_bytes(),
                        )
                        .ok()
                        .map(|s| *s)
                    };
                )*
                Ok($name { $($field,)* $($ofield,)* _lib: lib })
            }
        }
    };
}

api_table! {
    /// The CUDA driver functions gpufile uses.
    pub struct CudaApi from "libcuda.so.1" {
        init = "cuInit": fn(c_uint) -> CUresult;
        driver_get_version = "cuDriverGetVersion": fn(*mut c_int) -> CUresult;
        get_error_name = "cuGetErrorName": fn(CUresult, *mut *const c_char) -> CUresult;
        get_error_string = "cuGetErrorString": fn(CUresult, *mut *const c_char) -> CUresult;
        device_get_count = "cuDeviceGetCount": fn(*mut c_int) -> CUresult;
        device_get = "cuDeviceGet": fn(*mut CUdevice, c_int) -> CUresult;
        device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, CUdevice) -> CUresult;
        device_total_mem = "cuDeviceTotalMem_v2": fn(*mut usize, CUdevice) -> CUresult;
        device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CUdevice) -> CUresult;
        primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut CUcontext, CUdevice) -> CUresult;
        ctx_push_current = "cuCtxPushCurrent_v2": fn(CUcontext) -> CUresult;
        ctx_pop_current = "cuCtxPopCurrent_v2": fn(*mut CUcontext) -> CUresult;
        ctx_get_current = "cuCtxGetCurrent": fn(*mut CUcontext) -> CUresult;
        ctx_get_device = "cuCtxGetDevice": fn(*mut CUdevice) -> CUresult;
        pointer_get_attributes = "cuPointerGetAttributes":
            fn(c_uint, *mut c_uint, *mut *mut c_void, CUdeviceptr) -> CUresult;
        mem_host_alloc = "cuMemHostAlloc": fn(*mut *mut c_void, usize, c_uint) -> CUresult;
        mem_free_host = "cuMemFreeHost": fn(*mut c_void) -> CUresult;
        mem_host_register = "cuMemHostRegister_v2": fn(*mut c_void, usize, c_uint) -> CUresult;
        mem_host_unregister = "cuMemHostUnregister": fn(*mut c_void) -> CUresult;
        mem_alloc = "cuMemAlloc_v2": fn(*mut CUdeviceptr, usize) -> CUresult;
        mem_free = "cuMemFree_v2": fn(CUdeviceptr) -> CUresult;
        memset_d8 = "cuMemsetD8_v2": fn(CUdeviceptr, u8, usize) -> CUresult;
        memcpy_htod = "cuMemcpyHtoD_v2": fn(CUdeviceptr, *const c_void, usize) -> CUresult;
        memcpy_dtoh = "cuMemcpyDtoH_v2": fn(*mut c_void, CUdeviceptr, usize) -> CUresult;
        memcpy_htod_async = "cuMemcpyHtoDAsync_v2":
            fn(CUdeviceptr, *const c_void, usize, CUstream) -> CUresult;
        memcpy_dtoh_async = "cuMemcpyDtoHAsync_v2":
            fn(*mut c_void, CUdeviceptr, usize, CUstream) -> CUresult;
        stream_create = "cuStreamCreate": fn(*mut CUstream, c_uint) -> CUresult;
        stream_destroy = "cuStreamDestroy_v2": fn(CUstream) -> CUresult;
        stream_synchronize = "cuStreamSynchronize": fn(CUstream) -> CUresult;
        stream_query = "cuStreamQuery": fn(CUstream) -> CUresult;
        event_create = "cuEventCreate": fn(*mut CUevent, c_uint) -> CUresult;
        event_record = "cuEventRecord": fn(CUevent, CUstream) -> CUresult;
        event_synchronize = "cuEventSynchronize": fn(CUevent) -> CUresult;
        event_destroy = "cuEventDestroy_v2": fn(CUevent) -> CUresult;
    }
    optional {
        /// Stream memory operations of CUDA 11.7 and later (supported on every device from 12).
        stream_wait_value32_v2 = "cuStreamWaitValue32_v2":
            fn(CUstream, CUdeviceptr, u32, c_uint) -> CUresult;
        /// The first stream memory operations (where `CAN_USE_STREAM_MEM_OPS_V1` says so).
        stream_wait_value32 = "cuStreamWaitValue32": fn(CUstream, CUdeviceptr, u32, c_uint) -> CUresult;
        launch_host_func = "cuLaunchHostFunc":
            fn(CUstream, unsafe extern "C" fn(*mut c_void), *mut c_void) -> CUresult;
        mem_host_get_device_pointer = "cuMemHostGetDevicePointer_v2":
            fn(*mut CUdeviceptr, *mut c_void, c_uint) -> CUresult;
        stream_get_flags = "cuStreamGetFlags": fn(CUstream, *mut c_uint) -> CUresult;
        /// Loading and launching gpufile's own kernels (its gather kernel's PTX).
        module_load_data = "cuModuleLoadData": fn(*mut CUmodule, *const c_void) -> CUresult;
        module_get_function = "cuModuleGetFunction":
            fn(*mut CUfunction, CUmodule, *const c_char) -> CUresult;
        launch_kernel = "cuLaunchKernel":
            fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream,
               *mut *mut c_void, *mut *mut c_void) -> CUresult;
        /// Free and total memory of the current context's device.
        mem_get_info = "cuMemGetInfo_v2": fn(*mut usize, *mut usize) -> CUresult;
    }
}

impl CudaApi {
    fn load() -> Result<Self, LoadError> {
        // SAFETY: loading the vendor's driver library runs its initialisers, which is what every
        // CUDA program does; the handle is kept for the process lifetime.
        let lib = unsafe { Library::new(Self::LIBRARY) }.map_err(|e| LoadError::Library {
            library: Self::LIBRARY,
            // dlerror starts with the file name, which the message already gives.
            detail: loader_message(&e)
                .trim_start_matches(concat!("libcuda.so.1", ": "))
                .to_owned(),
        })?;
        Self::from_library(lib)
    }
}

/// The loader's whole message: libloading's `Display` says only "dlopen failed" and keeps
/// dlerror's text (which file is missing, which symbol is undefined) in `source()`.
#[doc(hidden)]
pub fn loader_message(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(detail) => detail.to_string(),
        None => e.to_string(),
    }
}

// SAFETY: the table holds plain function pointers into a library that is never unloaded; the
// driver API is thread-safe.
unsafe impl Send for CudaApi {}
// SAFETY: as above; nothing in the table is mutated after loading.
unsafe impl Sync for CudaApi {}

pub mod cufile;

static CUDA: OnceLock<Result<CudaApi, LoadError>> = OnceLock::new();

/// The driver API, loaded on first use (the outcome, success or not, is kept).
pub fn cuda() -> Result<&'static CudaApi, LoadError> {
    CUDA.get_or_init(CudaApi::load)
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether [`cuda()`] has been called in this process (tests check that host-only work never
/// loads the driver).
pub fn cuda_load_attempted() -> bool {
    CUDA.get().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_is_a_value_never_a_panic() {
        match cuda() {
            Ok(api) => {
                let mut v = 0;
                // SAFETY: a plain out-parameter call.
                assert_eq!(unsafe { (api.driver_get_version)(&mut v) }, CUDA_SUCCESS);
                assert!(v >= 11000);
            }
            Err(e) => {
                assert!(e.to_string().contains("libcuda.so.1"), "{e}");
                // dlerror's text, not libloading's bare "dlopen failed".
                assert!(!e.to_string().ends_with("dlopen failed"), "{e}");
            }
        }
        assert!(cuda_load_attempted());
    }

    #[test]
    fn loader_messages_keep_dlerror_text() {
        // SAFETY: a file that does not exist loads nothing.
        let e = unsafe { Library::new("/nonexistent/libgpufile-test.so") }.unwrap_err();
        let m = loader_message(&e);
        assert!(m.contains("/nonexistent/libgpufile-test.so"), "{m}");
        assert!(m.contains("No such file"), "{m}");
    }
}
