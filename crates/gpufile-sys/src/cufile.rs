//! Run-time bindings of cuFile (`libcufile.so.0`, GPUDirect Storage).
//!
//! How to use:
//! 1. [`cufile(&search)`](cufile) opens the library once per process (with `RTLD_NODELETE`, so
//!    cuFile's own atexit handlers never run against an unmapped library), trying each candidate
//!    path in order, and resolves its symbols. Symbols newer than cuFile 1.14 are `Option`.
//! 2. [`CufileApi::version`] reads `cuFileGetVersion` where present.
//!
//! Types are `#[repr(C)]` copies of `cufile.h`. The statistics structs changed size across
//! versions (level 1 grew in 1.19), so they are decoded from raw bytes by the `gpufile` crate.

use std::ffi::{c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};
use libloading::Library;

use crate::{CUresult, CUstream, LoadError};

/// `RTLD_NODELETE` (glibc and musl): keep the library mapped after `dlclose`.
const RTLD_NODELETE: c_int = 0x1000;

/// cuFile's status: its own code and, for CUDA failures, the driver's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUfileError_t {
    /// `CUfileOpError` (0 is success; errors are 5000 and up).
    pub err: c_int,
    /// The CUDA driver's code, when `err` is `CU_FILE_CUDA_DRIVER_ERROR`.
    pub cu_err: CUresult,
}

/// `CU_FILE_SUCCESS`.
pub const CU_FILE_SUCCESS: c_int = 0;
/// `CU_FILE_HANDLE_TYPE_OPAQUE_FD`.
pub const CU_FILE_HANDLE_TYPE_OPAQUE_FD: c_int = 1;
/// Bit of `CUfileDrvProps_t::nvfs.dcontrolflags`: poll mode.
pub const CU_FILE_USE_POLL_MODE: c_uint = 0;
/// Bit of `CUfileDrvProps_t::nvfs.dcontrolflags`: cuFile may use its compat (POSIX) path.
pub const CU_FILE_ALLOW_COMPAT_MODE: c_uint = 1;
/// Bit of `CUfileDrvProps_t::fflags`: the streams API works.
pub const CU_FILE_STREAMS_SUPPORTED: c_uint = 2;
/// Bit of `CUfileDrvProps_t::fflags`: PCI P2PDMA (GDS without nvidia-fs) is supported.
pub const CU_FILE_P2P_SUPPORTED: c_uint = 4;

/// `CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH` (a `CUFileSizeTConfigParameter_t`).
pub const CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH: c_int = 1;
/// `CUFILE_PARAM_EXECUTION_MAX_IO_THREADS`.
pub const CUFILE_PARAM_EXECUTION_MAX_IO_THREADS: c_int = 2;
/// `CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB`.
pub const CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB: c_int = 3;
/// `CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM`.
pub const CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM: c_int = 4;
/// `CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB`.
pub const CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB: c_int = 5;
/// `CUFILE_PARAM_PROPERTIES_USE_POLL_MODE` (a `CUFileBoolConfigParameter_t`).
pub const CUFILE_PARAM_PROPERTIES_USE_POLL_MODE: c_int = 0;
/// `CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE`.
pub const CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE: c_int = 1;
/// `CUFILE_PARAM_FORCE_COMPAT_MODE`.
pub const CUFILE_PARAM_FORCE_COMPAT_MODE: c_int = 2;
/// `CUFILE_PARAM_EXECUTION_PARALLEL_IO`.
pub const CUFILE_PARAM_EXECUTION_PARALLEL_IO: c_int = 4;
/// `CUFILE_PARAM_USE_PCIP2PDMA`.
pub const CUFILE_PARAM_USE_PCIP2PDMA: c_int = 7;

/// `CUFILE_PARAM_PROFILE_STATS` (the `CUFileSizeTConfigParameter_t` values from here on are
/// the ones only `cuFileGetParameterMinMaxValue` uses).
pub const CUFILE_PARAM_PROFILE_STATS: c_int = 0;
/// `CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB`.
pub const CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB: c_int = 6;
/// `CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB`.
pub const CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB: c_int = 7;
/// `CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB`.
pub const CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB: c_int = 8;
/// `CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE`.
pub const CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE: c_int = 9;
/// `CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB`.
pub const CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB: c_int = 10;
/// `CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS`.
pub const CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS: c_int = 11;

/// `CUfileDriverStatusFlags_t`: the storage types `cuFileDriverGetP2PFlags` answers for, by
/// value (10 is reserved; 11, `CU_FILE_NVME_P2P_SUPPORTED`, is deprecated and left out).
pub const CU_FILE_STORAGE_TYPES: [(c_int, &str); 12] = [
    (0, "CU_FILE_LUSTRE_SUPPORTED"),
    (1, "CU_FILE_WEKAFS_SUPPORTED"),
    (2, "CU_FILE_NFS_SUPPORTED"),
    (3, "CU_FILE_GPFS_SUPPORTED"),
    (4, "CU_FILE_NVME_SUPPORTED"),
    (5, "CU_FILE_NVMEOF_SUPPORTED"),
    (6, "CU_FILE_SCSI_SUPPORTED"),
    (7, "CU_FILE_SCALEFLUX_CSD_SUPPORTED"),
    (8, "CU_FILE_NVMESH_SUPPORTED"),
    (9, "CU_FILE_BEEGFS_SUPPORTED"),
    (12, "CU_FILE_SCATEFS_SUPPORTED"),
    (13, "CU_FILE_VIRTIOFS_SUPPORTED"),
];

/// `CUfileP2PFlags_t` (cuFile 1.16): bit numbers of the mask `cuFileDriverGetP2PFlags` gives.
pub const CUFILE_P2PDMA: c_uint = 0;
/// `CUFILE_NVFS`: nvidia-fs.
pub const CUFILE_NVFS: c_uint = 1;
/// `CUFILE_DMABUF`: DMA buffers.
pub const CUFILE_DMABUF: c_uint = 2;
/// `CUFILE_C2C`: chip-to-chip (Grace).
pub const CUFILE_C2C: c_uint = 3;
/// `CUFILE_NVIDIA_PEERMEM`: nvidia-peermem (IBM Spectrum Scale and WekaFS).
pub const CUFILE_NVIDIA_PEERMEM: c_uint = 4;

/// The `nvfs` part of [`CUfileDrvProps_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUfileDrvPropsNvfs {
    /// nvidia-fs major version (0: not loaded).
    pub major_version: c_uint,
    /// nvidia-fs minor version.
    pub minor_version: c_uint,
    /// Poll mode threshold, bytes.
    pub poll_thresh_size: usize,
    /// Largest direct I/O, bytes.
    pub max_direct_io_size: usize,
    /// Supported file systems / devices (bits).
    pub dstatusflags: c_uint,
    /// Control flags (bits: poll mode, allow compat mode).
    pub dcontrolflags: c_uint,
}

/// `CUfileDrvProps_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUfileDrvProps_t {
    /// nvidia-fs properties.
    pub nvfs: CUfileDrvPropsNvfs,
    /// Feature flags (bits).
    pub fflags: c_uint,
    /// Device cache size, KiB.
    pub max_device_cache_size: c_uint,
    /// Per-buffer cache size, KiB.
    pub per_buffer_cache_size: c_uint,
    /// Largest pinned device memory, KiB.
    pub max_device_pinned_mem_size: c_uint,
    /// Largest batch.
    pub max_batch_io_size: c_uint,
    /// Batch timeout, ms.
    pub max_batch_io_timeout_msecs: c_uint,
}

/// `CUfileDescr_t` for a file descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUfileDescr_t {
    /// `CU_FILE_HANDLE_TYPE_OPAQUE_FD`.
    pub type_: c_int,
    /// The descriptor (a union with a pointer in C: 8 bytes).
    pub handle: u64,
    /// File system callbacks (null for kernel file systems).
    pub fs_ops: *const c_void,
}

/// `CUfileHandle_t`.
pub type CUfileHandle_t = *mut c_void;

api_table! {
    /// The cuFile functions gpufile uses.
    pub struct CufileApi from "libcufile.so.0" {
        driver_open = "cuFileDriverOpen": fn() -> CUfileError_t;
        driver_close = "cuFileDriverClose": fn() -> CUfileError_t;
        driver_get_properties = "cuFileDriverGetProperties":
            fn(*mut CUfileDrvProps_t) -> CUfileError_t;
        handle_register = "cuFileHandleRegister":
            fn(*mut CUfileHandle_t, *mut CUfileDescr_t) -> CUfileError_t;
        handle_deregister = "cuFileHandleDeregister": fn(CUfileHandle_t) -> ();
        read = "cuFileRead": fn(CUfileHandle_t, *mut c_void, usize, i64, i64) -> isize;
        write = "cuFileWrite": fn(CUfileHandle_t, *const c_void, usize, i64, i64) -> isize;
        buf_register = "cuFileBufRegister": fn(*const c_void, usize, c_int) -> CUfileError_t;
        buf_deregister = "cuFileBufDeregister": fn(*const c_void) -> CUfileError_t;
    }
    optional {
        driver_close_v2 = "cuFileDriverClose_v2": fn() -> CUfileError_t;
        get_version = "cuFileGetVersion": fn(*mut c_int) -> CUfileError_t;
        read_async = "cuFileReadAsync":
            fn(CUfileHandle_t, *mut c_void, *mut usize, *mut i64, *mut i64, *mut isize, CUstream)
                -> CUfileError_t;
        write_async = "cuFileWriteAsync":
            fn(CUfileHandle_t, *mut c_void, *mut usize, *mut i64, *mut i64, *mut isize, CUstream)
                -> CUfileError_t;
        stream_register = "cuFileStreamRegister": fn(CUstream, c_uint) -> CUfileError_t;
        stream_deregister = "cuFileStreamDeregister": fn(CUstream) -> CUfileError_t;
        set_stats_level = "cuFileSetStatsLevel": fn(c_int) -> CUfileError_t;
        get_stats_level = "cuFileGetStatsLevel": fn(*mut c_int) -> CUfileError_t;
        stats_start = "cuFileStatsStart": fn() -> CUfileError_t;
        stats_stop = "cuFileStatsStop": fn() -> CUfileError_t;
        stats_reset = "cuFileStatsReset": fn() -> CUfileError_t;
        get_stats_l1 = "cuFileGetStatsL1": fn(*mut c_void) -> CUfileError_t;
        get_stats_l3 = "cuFileGetStatsL3": fn(*mut c_void) -> CUfileError_t;
        get_parameter_size_t = "cuFileGetParameterSizeT": fn(c_int, *mut usize) -> CUfileError_t;
        get_parameter_bool = "cuFileGetParameterBool": fn(c_int, *mut bool) -> CUfileError_t;
        // cuFile 1.15 and 1.16: what `gpufile check` reports where the library has them.
        get_bar_size_in_kb = "cuFileGetBARSizeInKB": fn(c_int, *mut usize) -> CUfileError_t;
        driver_get_p2p_flags = "cuFileDriverGetP2PFlags": fn(c_int, *mut c_uint) -> CUfileError_t;
        get_parameter_min_max_value = "cuFileGetParameterMinMaxValue":
            fn(c_int, *mut usize, *mut usize) -> CUfileError_t;
        // Present in every cuFile gpufile has met; optional so that a build without them
        // still loads (KvikIO's `cufile_driver.set` then says why it cannot).
        driver_set_poll_mode = "cuFileDriverSetPollMode": fn(bool, usize) -> CUfileError_t;
        driver_set_max_cache_size = "cuFileDriverSetMaxCacheSize": fn(usize) -> CUfileError_t;
        driver_set_max_pinned_mem_size = "cuFileDriverSetMaxPinnedMemSize":
            fn(usize) -> CUfileError_t;
    }
}

// SAFETY: plain function pointers into a library that is never unloaded; cuFile's API is
// thread-safe.
unsafe impl Send for CufileApi {}
// SAFETY: as above; nothing is mutated after loading.
unsafe impl Sync for CufileApi {}

/// A loaded cuFile and where it came from.
pub struct Loaded {
    /// The functions.
    pub api: CufileApi,
    /// The path (or soname) that loaded.
    pub path: String,
}

static CUFILE: OnceLock<Result<Loaded, LoadError>> = OnceLock::new();

/// cuFile, loaded on first call from the first of `candidates` that opens (each a full path or a
/// bare soname for the system loader). Later calls return the first outcome whatever they pass.
pub fn cufile(candidates: &[PathBuf]) -> Result<&'static Loaded, LoadError> {
    CUFILE
        .get_or_init(|| {
            let mut tried = Vec::new();
            for c in candidates {
                // SAFETY: loading the vendor's cuFile library runs its initialisers (as in every
                // GDS program); RTLD_NODELETE keeps it mapped for the process lifetime.
                match unsafe { UnixLibrary::open(Some(c), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) } {
                    Ok(lib) => {
                        let api = CufileApi::from_library(Library::from(lib))?;
                        return Ok(Loaded {
                            api,
                            path: c.display().to_string(),
                        });
                    }
                    Err(e) => {
                        // dlerror's text names the file already; where it does not, add it.
                        let message = crate::loader_message(&e);
                        let name = c.display().to_string();
                        tried.push(match message.starts_with(&name) {
                            true => message,
                            false => format!("{name}: {message}"),
                        });
                    }
                }
            }
            Err(LoadError::Library {
                library: CufileApi::LIBRARY,
                detail: format!("tried {}", tried.join("; ")),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether [`cufile`] has been called in this process.
pub fn cufile_load_attempted() -> bool {
    CUFILE.get().is_some()
}

impl CufileApi {
    /// `(major, minor)` from `cuFileGetVersion` (e.g. 1150 → (1, 15)), where present.
    pub fn version(&self) -> Option<(i32, i32)> {
        let f = self.get_version?;
        let mut v = 0;
        // SAFETY: plain out-parameter.
        let r = unsafe { f(&mut v) };
        (r.err == CU_FILE_SUCCESS && v > 0).then_some((v / 1000, (v % 1000) / 10))
    }
}

/// The default candidates after any caller-supplied ones: the system loader, then
/// `$CUDA_HOME/lib64` and `/usr/local/cuda/lib64`.
pub fn system_candidates() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from("libcufile.so.0")];
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        v.push(Path::new(&home).join("lib64/libcufile.so.0"));
    }
    v.push(PathBuf::from("/usr/local/cuda/lib64/libcufile.so.0"));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_cufile_h() {
        assert_eq!(std::mem::size_of::<CUfileError_t>(), 8);
        assert_eq!(std::mem::size_of::<CUfileDrvPropsNvfs>(), 32);
        assert_eq!(std::mem::size_of::<CUfileDrvProps_t>(), 56);
        assert_eq!(std::mem::size_of::<CUfileDescr_t>(), 24);
    }

    #[test]
    fn a_missing_library_is_an_error_naming_what_was_tried() {
        if cufile_load_attempted() {
            return;
        }
        let r = cufile(&[PathBuf::from("/nonexistent/libcufile.so.0")]);
        if let Err(e) = r {
            assert!(e.to_string().contains("/nonexistent/libcufile.so.0"), "{e}");
        }
    }
}
