//! cuFile (GPUDirect Storage): library, driver, properties, file handles, I/O and statistics.
//!
//! How to use:
//! 1. [`availability`] answers, once per process, whether cuFile can be used and whether its
//!    accelerated path (nvidia-fs, or P2PDMA) exists: the input of the AUTO decision.
//! 2. [`RegisteredFile::register`] registers a descriptor (`cuFileHandleRegister`); its
//!    [`RegisteredFile::read`] / [`RegisteredFile::write`] are single `cuFileRead/Write` calls.
//! 3. [`Stats::snapshot`] reads cuFile's own counters (level 3: per GPU, nvfs vs posix), so the
//!    path cuFile really took is known in-process, without `gds_stats`.
//!
//! Nothing here loads `libcufile.so.0` until called; host-only work never does.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use gpufile_sys::cufile::{self as sys, CUfileDescr_t, CUfileDrvProps_t, CUfileError_t, CufileApi};

use crate::cuda;
use crate::error::{Error, Result};
use crate::plan::Availability;

static EXTRA_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Folders to search for `libcufile.so.0` before the system loader (the Python package passes
/// the `nvidia/cu13/lib` and `nvidia/cufile/lib` folders of its site-packages). Only the first
/// load attempt uses them.
pub fn set_search_dirs(dirs: Vec<PathBuf>) {
    *EXTRA_DIRS.lock().unwrap_or_else(|e| e.into_inner()) = dirs;
}

/// Where gpufile looks, in order: `GPUFILE_CUFILE_PATH` (a file or a folder), the folders given
/// to [`set_search_dirs`], the system loader, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`.
pub fn candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = crate::config::cufile_path() {
        v.push(if p.is_dir() {
            p.join("libcufile.so.0")
        } else {
            p
        });
    }
    let extra = EXTRA_DIRS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    v.extend(extra.into_iter().map(|d| d.join("libcufile.so.0")));
    v.extend(sys::system_candidates());
    v
}

/// The loaded library, or why it did not load.
pub fn library() -> Result<&'static sys::Loaded> {
    sys::cufile(&candidates()).map_err(|e| Error::CufileUnavailable {
        reason: e.to_string(),
    })
}

/// Name of a `CUfileOpError` code (cufile.h).
pub fn op_error_name(code: i32) -> &'static str {
    const NAMES: [(i32, &str); 38] = [
        (0, "CU_FILE_SUCCESS"),
        (5001, "CU_FILE_DRIVER_NOT_INITIALIZED"),
        (5002, "CU_FILE_DRIVER_INVALID_PROPS"),
        (5003, "CU_FILE_DRIVER_UNSUPPORTED_LIMIT"),
        (5004, "CU_FILE_DRIVER_VERSION_MISMATCH"),
        (5005, "CU_FILE_DRIVER_VERSION_READ_ERROR"),
        (5006, "CU_FILE_DRIVER_CLOSING"),
        (5007, "CU_FILE_PLATFORM_NOT_SUPPORTED"),
        (5008, "CU_FILE_IO_NOT_SUPPORTED"),
        (5009, "CU_FILE_DEVICE_NOT_SUPPORTED"),
        (5010, "CU_FILE_NVFS_DRIVER_ERROR"),
        (5011, "CU_FILE_CUDA_DRIVER_ERROR"),
        (5012, "CU_FILE_CUDA_POINTER_INVALID"),
        (5013, "CU_FILE_CUDA_MEMORY_TYPE_INVALID"),
        (5014, "CU_FILE_CUDA_POINTER_RANGE_ERROR"),
        (5015, "CU_FILE_CUDA_CONTEXT_MISMATCH"),
        (5016, "CU_FILE_INVALID_MAPPING_SIZE"),
        (5017, "CU_FILE_INVALID_MAPPING_RANGE"),
        (5018, "CU_FILE_INVALID_FILE_TYPE"),
        (5019, "CU_FILE_INVALID_FILE_OPEN_FLAG"),
        (5020, "CU_FILE_DIO_NOT_SET"),
        (5022, "CU_FILE_INVALID_VALUE"),
        (5023, "CU_FILE_MEMORY_ALREADY_REGISTERED"),
        (5024, "CU_FILE_MEMORY_NOT_REGISTERED"),
        (5025, "CU_FILE_PERMISSION_DENIED"),
        (5026, "CU_FILE_DRIVER_ALREADY_OPEN"),
        (5027, "CU_FILE_HANDLE_NOT_REGISTERED"),
        (5028, "CU_FILE_HANDLE_ALREADY_REGISTERED"),
        (5029, "CU_FILE_DEVICE_NOT_FOUND"),
        (5030, "CU_FILE_INTERNAL_ERROR"),
        (5031, "CU_FILE_GETNEWFD_FAILED"),
        (5033, "CU_FILE_NVFS_SETUP_ERROR"),
        (5034, "CU_FILE_IO_DISABLED"),
        (5035, "CU_FILE_BATCH_SUBMIT_FAILED"),
        (5036, "CU_FILE_GPU_MEMORY_PINNING_FAILED"),
        (5037, "CU_FILE_BATCH_FULL"),
        (5038, "CU_FILE_ASYNC_NOT_SUPPORTED"),
        (5039, "CU_FILE_IO_MAX_ERROR"),
    ];
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("CU_FILE_UNKNOWN_ERROR", |(_, n)| n)
}

/// Turns a cuFile status into a `Result`.
pub(crate) fn check(call: &'static str, status: CUfileError_t) -> Result<()> {
    if status.err == sys::CU_FILE_SUCCESS {
        return Ok(());
    }
    Err(Error::Cufile {
        call,
        code: status.err,
        name: op_error_name(status.err).to_owned(),
        cuda_code: status.cu_err,
    })
}

fn api() -> Result<&'static CufileApi> {
    Ok(&library()?.api)
}

static DRIVER: Mutex<Option<Result<()>>> = Mutex::new(None);

/// Live [`RegisteredFile`] values. Every open file registered with cuFile holds one, and every
/// request in flight on it holds that one too (an `Arc`), so while this is above zero closing
/// the driver would leave handles to be used after the close. Counted in under the `DRIVER`
/// lock, so [`driver_close`] sees every registration that may still happen.
static REGISTERED: AtomicUsize = AtomicUsize::new(0);

/// Observations in progress (they want cuFile's statistics as soon as the driver opens).
static STATS_WATCHERS: AtomicUsize = AtomicUsize::new(0);
/// cuFile's counters when the driver opened while someone observed.
static STATS_AT_OPEN: Mutex<Option<Stats>> = Mutex::new(None);

/// Counts an observation in (`true`) or out: while any is in, opening the driver starts cuFile's
/// statistics and keeps the baseline for [`stats_at_open`].
pub fn watch_stats(on: bool) {
    match on {
        true => STATS_WATCHERS.fetch_add(1, Ordering::SeqCst),
        false => STATS_WATCHERS.fetch_sub(1, Ordering::SeqCst),
    };
}

/// cuFile's counters at the moment the driver opened during an observation.
pub fn stats_at_open() -> Option<Stats> {
    *STATS_AT_OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens the cuFile driver (`cuFileDriverOpen`) once; later calls return the first outcome
/// until [`driver_close`].
pub fn driver_open() -> Result<()> {
    open_locked(&mut DRIVER.lock().unwrap_or_else(|e| e.into_inner()))
}

/// [`driver_open`] with the `DRIVER` lock held.
fn open_locked(state: &mut Option<Result<()>>) -> Result<()> {
    if let Some(r) = &*state {
        return r.clone();
    }
    let r = (|| {
        cuda::api()?; // cuFile needs an initialised driver
        let api = api()?;
        // SAFETY: no arguments; cuFile's documented first call.
        check("cuFileDriverOpen", unsafe { (api.driver_open)() })?;
        if STATS_WATCHERS.load(Ordering::SeqCst) > 0 {
            // Someone observes: start cuFile's statistics now and keep the baseline.
            let baseline = enable_stats(3).and_then(|_| Stats::snapshot()).ok();
            *STATS_AT_OPEN.lock().unwrap_or_else(|e| e.into_inner()) = baseline;
        }
        Ok(())
    })();
    *state = Some(r.clone());
    r
}

/// Closes the driver if gpufile opened it (`cuFileDriverClose_v2` where present).
///
/// Refused with [`Error::CufileBusy`] while files are registered with it (open files that used
/// cuFile, and the requests in flight on them): KvikIO closes regardless, and the handles are
/// then used after the close. Close those files (their I/O finishes first) and call again.
pub fn driver_close() -> Result<()> {
    let mut state = DRIVER.lock().unwrap_or_else(|e| e.into_inner());
    if !matches!(&*state, Some(Ok(()))) {
        *state = None;
        return Ok(());
    }
    let registered = REGISTERED.load(Ordering::SeqCst);
    if registered > 0 {
        return Err(Error::CufileBusy { registered });
    }
    *state = None;
    DRIVER_SET.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let api = api()?;
    // SAFETY: the driver was opened by `driver_open`; nothing of gpufile's is registered with
    // it (REGISTERED is 0, and new registrations wait for the lock held here).
    let status = unsafe {
        match api.driver_close_v2 {
            Some(close) => close(),
            None => (api.driver_close)(),
        }
    };
    check("cuFileDriverClose", status)
}

/// Whether the driver is open now.
pub fn driver_is_open() -> bool {
    matches!(
        &*DRIVER.lock().unwrap_or_else(|e| e.into_inner()),
        Some(Ok(()))
    )
}

/// `cuFileDriverGetProperties`, decoded.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Properties {
    /// nvidia-fs major version (0: not loaded).
    pub major_version: u32,
    /// nvidia-fs minor version.
    pub minor_version: u32,
    /// Whether the accelerated path exists (nvidia-fs loaded, or P2PDMA supported).
    pub is_gds_available: bool,
    /// cuFile may fall back to its compat path.
    pub allow_compat_mode: bool,
    /// Poll mode is on.
    pub poll_mode: bool,
    /// Poll threshold, KiB.
    pub poll_thresh_size_kb: usize,
    /// Largest direct I/O, KiB.
    pub max_direct_io_size_kb: usize,
    /// Device cache, KiB.
    pub max_device_cache_size_kb: u32,
    /// Per-buffer cache, KiB.
    pub per_buffer_cache_size_kb: u32,
    /// Pinned device memory limit, KiB.
    pub max_device_pinned_mem_size_kb: u32,
    /// Largest batch.
    pub max_batch_io_size: u32,
    /// Batch timeout, ms.
    pub max_batch_io_timeout_msecs: u32,
    /// PCI P2PDMA supported (GDS without nvidia-fs).
    pub p2p_supported: bool,
    /// The streams API is supported.
    pub streams_supported: bool,
}

/// The driver's properties (opens the driver).
pub fn properties() -> Result<Properties> {
    driver_open()?;
    let api = api()?;
    let mut p = CUfileDrvProps_t::default();
    // SAFETY: `p` is a correctly laid out out-parameter (size checked in gpufile-sys tests).
    check("cuFileDriverGetProperties", unsafe {
        (api.driver_get_properties)(&mut p)
    })?;
    let bit = |flags: u32, b: u32| flags & (1 << b) != 0;
    let nvfs_loaded = p.nvfs.major_version > 0 || p.nvfs.minor_version > 0;
    let p2p = bit(p.fflags, sys::CU_FILE_P2P_SUPPORTED);
    Ok(Properties {
        major_version: p.nvfs.major_version,
        minor_version: p.nvfs.minor_version,
        is_gds_available: nvfs_loaded,
        allow_compat_mode: bit(p.nvfs.dcontrolflags, sys::CU_FILE_ALLOW_COMPAT_MODE),
        poll_mode: bit(p.nvfs.dcontrolflags, sys::CU_FILE_USE_POLL_MODE),
        poll_thresh_size_kb: p.nvfs.poll_thresh_size,
        max_direct_io_size_kb: p.nvfs.max_direct_io_size,
        max_device_cache_size_kb: p.max_device_cache_size,
        per_buffer_cache_size_kb: p.per_buffer_cache_size,
        max_device_pinned_mem_size_kb: p.max_device_pinned_mem_size,
        max_batch_io_size: p.max_batch_io_size,
        max_batch_io_timeout_msecs: p.max_batch_io_timeout_msecs,
        p2p_supported: p2p,
        streams_supported: bit(p.fflags, sys::CU_FILE_STREAMS_SUPPORTED),
    })
}

/// A driver property of KvikIO's `cufile_driver.get/set`, by KvikIO's name. Sizes are in KiB,
/// as cuFile and KvikIO give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DriverSetting {
    /// nvidia-fs is loaded (read-only).
    IsGdsAvailable,
    /// nvidia-fs major version (read-only).
    MajorVersion,
    /// nvidia-fs minor version (read-only).
    MinorVersion,
    /// cuFile may run its compat path (read-only; cufile.json `properties.allow_compat_mode`).
    AllowCompatMode,
    /// Per-buffer cache, KiB (read-only).
    PerBufferCacheSize,
    /// Poll instead of waiting for interrupts (`cuFileDriverSetPollMode`).
    PollMode,
    /// Largest I/O polled, KiB (`cuFileDriverSetPollMode`).
    PollThreshSize,
    /// GPU memory cuFile reserves per device for bouncing, KiB (`cuFileDriverSetMaxCacheSize`).
    MaxDeviceCacheSize,
    /// Pinned device memory limit, KiB (`cuFileDriverSetMaxPinnedMemSize`).
    MaxPinnedMemorySize,
}

/// A driver property's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverValue {
    /// A flag.
    Bool(bool),
    /// A version or a size in KiB.
    Int(u64),
}

impl DriverSetting {
    /// Every property, read-only ones first.
    pub const ALL: [DriverSetting; 9] = [
        DriverSetting::IsGdsAvailable,
        DriverSetting::MajorVersion,
        DriverSetting::MinorVersion,
        DriverSetting::AllowCompatMode,
        DriverSetting::PerBufferCacheSize,
        DriverSetting::PollMode,
        DriverSetting::PollThreshSize,
        DriverSetting::MaxDeviceCacheSize,
        DriverSetting::MaxPinnedMemorySize,
    ];

    /// KvikIO's name.
    pub fn as_str(self) -> &'static str {
        match self {
            DriverSetting::IsGdsAvailable => "is_gds_available",
            DriverSetting::MajorVersion => "major_version",
            DriverSetting::MinorVersion => "minor_version",
            DriverSetting::AllowCompatMode => "allow_compat_mode",
            DriverSetting::PerBufferCacheSize => "per_buffer_cache_size",
            DriverSetting::PollMode => "poll_mode",
            DriverSetting::PollThreshSize => "poll_thresh_size",
            DriverSetting::MaxDeviceCacheSize => "max_device_cache_size",
            DriverSetting::MaxPinnedMemorySize => "max_pinned_memory_size",
        }
    }

    /// Whether cuFile has no call to change it.
    pub fn read_only(self) -> bool {
        !matches!(
            self,
            DriverSetting::PollMode
                | DriverSetting::PollThreshSize
                | DriverSetting::MaxDeviceCacheSize
                | DriverSetting::MaxPinnedMemorySize
        )
    }

    /// Whether its value is a flag (else an integer).
    pub fn is_bool(self) -> bool {
        matches!(
            self,
            DriverSetting::IsGdsAvailable
                | DriverSetting::AllowCompatMode
                | DriverSetting::PollMode
        )
    }

    fn of(self, p: &Properties) -> DriverValue {
        match self {
            DriverSetting::IsGdsAvailable => DriverValue::Bool(p.is_gds_available),
            DriverSetting::MajorVersion => DriverValue::Int(p.major_version.into()),
            DriverSetting::MinorVersion => DriverValue::Int(p.minor_version.into()),
            DriverSetting::AllowCompatMode => DriverValue::Bool(p.allow_compat_mode),
            DriverSetting::PerBufferCacheSize => {
                DriverValue::Int(p.per_buffer_cache_size_kb.into())
            }
            DriverSetting::PollMode => DriverValue::Bool(p.poll_mode),
            DriverSetting::PollThreshSize => DriverValue::Int(p.poll_thresh_size_kb as u64),
            DriverSetting::MaxDeviceCacheSize => {
                DriverValue::Int(p.max_device_cache_size_kb.into())
            }
            DriverSetting::MaxPinnedMemorySize => {
                DriverValue::Int(p.max_device_pinned_mem_size_kb.into())
            }
        }
    }
}

impl std::str::FromStr for DriverSetting {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DriverSetting::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| Error::UnknownSetting {
                name: s.to_owned(),
                known: DriverSetting::ALL.map(DriverSetting::as_str).join(", "),
            })
    }
}

/// Values given to [`set_driver_setting`]. cuFile's documentation says these calls take effect
/// when the driver opens (on an open driver they may change nothing); KvikIO keeps what was set
/// and answers it, and so does gpufile. Cleared when gpufile closes the driver (the next open
/// reads cufile.json again).
static DRIVER_SET: Mutex<Vec<(DriverSetting, DriverValue)>> = Mutex::new(Vec::new());

fn driver_set_value(setting: DriverSetting) -> Option<DriverValue> {
    let set = DRIVER_SET.lock().unwrap_or_else(|e| e.into_inner());
    set.iter().find(|(s, _)| *s == setting).map(|(_, v)| *v)
}

/// One property of the driver (opens it), as KvikIO's `cufile_driver.get`: the value last set
/// through [`set_driver_setting`], else what `cuFileDriverGetProperties` reports.
pub fn driver_setting(setting: DriverSetting) -> Result<DriverValue> {
    if let Some(v) = driver_set_value(setting) {
        return Ok(v);
    }
    Ok(setting.of(&properties()?))
}

/// Changes a settable property (opens the driver), as KvikIO's `cufile_driver.set`:
/// `cuFileDriverSetPollMode`, `cuFileDriverSetMaxCacheSize`, `cuFileDriverSetMaxPinnedMemSize`.
/// A read-only property, or a value of the wrong kind, is [`Error::InvalidSetting`].
pub fn set_driver_setting(setting: DriverSetting, value: DriverValue) -> Result<()> {
    let invalid = |reason: &str| Error::InvalidSetting {
        name: setting.as_str(),
        value: format!("{value:?}"),
        reason: reason.to_owned(),
    };
    if setting.read_only() {
        return Err(invalid("read-only property of the cuFile driver"));
    }
    let missing = |sym: &str| Error::CufileUnavailable {
        reason: format!("this cuFile has no {sym}"),
    };
    let api = api()?;
    match (setting, value) {
        (DriverSetting::PollMode, DriverValue::Bool(_))
        | (DriverSetting::PollThreshSize, DriverValue::Int(_)) => {
            // One call sets both: the one not given keeps its current value.
            let current = |s| match driver_setting(s)? {
                DriverValue::Bool(b) => Ok((b, 0)),
                DriverValue::Int(n) => Ok((false, n)),
            };
            let (poll, thresh) = match value {
                DriverValue::Bool(b) => (b, current(DriverSetting::PollThreshSize)?.1),
                DriverValue::Int(n) => (current(DriverSetting::PollMode)?.0, n),
            };
            let f = api
                .driver_set_poll_mode
                .ok_or_else(|| missing("cuFileDriverSetPollMode"))?;
            let thresh = usize::try_from(thresh).map_err(|_| invalid("too large"))?;
            // SAFETY: plain value arguments.
            check("cuFileDriverSetPollMode", unsafe { f(poll, thresh) })?;
        }
        (DriverSetting::MaxDeviceCacheSize, DriverValue::Int(kb)) => {
            let f = api
                .driver_set_max_cache_size
                .ok_or_else(|| missing("cuFileDriverSetMaxCacheSize"))?;
            let kb = usize::try_from(kb).map_err(|_| invalid("too large"))?;
            driver_open()?;
            // SAFETY: plain value argument.
            check("cuFileDriverSetMaxCacheSize", unsafe { f(kb) })?;
        }
        (DriverSetting::MaxPinnedMemorySize, DriverValue::Int(kb)) => {
            let f = api
                .driver_set_max_pinned_mem_size
                .ok_or_else(|| missing("cuFileDriverSetMaxPinnedMemSize"))?;
            let kb = usize::try_from(kb).map_err(|_| invalid("too large"))?;
            driver_open()?;
            // SAFETY: plain value argument.
            check("cuFileDriverSetMaxPinnedMemSize", unsafe { f(kb) })?;
        }
        _ => return Err(invalid("wrong kind of value")),
    }
    let mut set = DRIVER_SET.lock().unwrap_or_else(|e| e.into_inner());
    set.retain(|(s, _)| *s != setting);
    set.push((setting, value));
    Ok(())
}

/// `(major, minor)` of the loaded cuFile, where it says (`cuFileGetVersion`, 1.15+).
pub fn version() -> Result<Option<(i32, i32)>> {
    Ok(api()?.version())
}

/// Effective settings as cuFile reports them (`cuFileGetParameter*`, where present).
pub fn parameters() -> Result<Vec<(&'static str, String)>> {
    let api = api()?;
    let mut out = Vec::new();
    if let Some(get) = api.get_parameter_size_t {
        for (name, p) in [
            (
                "execution.max_io_queue_depth",
                sys::CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH,
            ),
            (
                "execution.max_io_threads",
                sys::CUFILE_PARAM_EXECUTION_MAX_IO_THREADS,
            ),
            (
                "execution.min_io_threshold_size_kb",
                sys::CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB,
            ),
            (
                "execution.max_request_parallelism",
                sys::CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM,
            ),
            (
                "properties.max_direct_io_size_kb",
                sys::CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB,
            ),
        ] {
            let mut v = 0usize;
            // SAFETY: plain out-parameter.
            if unsafe { get(p, &mut v) }.err == sys::CU_FILE_SUCCESS {
                out.push((name, v.to_string()));
            }
        }
    }
    if let Some(get) = api.get_parameter_bool {
        for (name, p) in [
            (
                "execution.parallel_io",
                sys::CUFILE_PARAM_EXECUTION_PARALLEL_IO,
            ),
            (
                "properties.allow_compat_mode",
                sys::CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE,
            ),
            (
                "properties.use_poll_mode",
                sys::CUFILE_PARAM_PROPERTIES_USE_POLL_MODE,
            ),
            ("properties.use_pci_p2pdma", sys::CUFILE_PARAM_USE_PCIP2PDMA),
            ("force_compat_mode", sys::CUFILE_PARAM_FORCE_COMPAT_MODE),
        ] {
            let mut v = false;
            // SAFETY: plain out-parameter (C `bool`).
            if unsafe { get(p, &mut v) }.err == sys::CU_FILE_SUCCESS {
                out.push((name, v.to_string()));
            }
        }
    }
    Ok(out)
}

/// Probes once per process: loads libcufile, opens the driver, reads its properties.
pub fn availability() -> Availability {
    static PROBE: OnceLock<Availability> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let props = match properties() {
                Ok(p) => p,
                Err(e) => return Availability::Unavailable(e.to_string()),
            };
            if props.is_gds_available {
                Availability::Accelerated(format!(
                    "nvidia-fs {}.{} loaded",
                    props.major_version, props.minor_version
                ))
            } else if props.p2p_supported {
                Availability::Accelerated("PCI P2PDMA supported".into())
            } else {
                Availability::CompatOnly("nvidia-fs not loaded".into())
            }
        })
        .clone()
}

/// A descriptor registered with cuFile; deregistered on drop. While one lives, the driver does
/// not close ([`driver_close`]).
pub struct RegisteredFile {
    handle: usize,
    fd: i32,
}

impl RegisteredFile {
    /// `cuFileHandleRegister` on `fd` (opens the driver first).
    pub fn register(fd: i32) -> Result<Self> {
        let api = {
            let mut state = DRIVER.lock().unwrap_or_else(|e| e.into_inner());
            open_locked(&mut state)?;
            let api = api()?;
            REGISTERED.fetch_add(1, Ordering::SeqCst);
            api
        };
        let uncount = || REGISTERED.fetch_sub(1, Ordering::SeqCst);
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
        })
        .inspect_err(|_| {
            uncount();
        })?;
        Ok(RegisteredFile {
            handle: h as usize,
            fd,
        })
    }

    /// The registered descriptor (owned by the file handle, which outlives this value).
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// One `cuFileRead` of `len` bytes at `file_offset` into `base + buf_offset` (device
    /// memory; the caller has the owning context current). Returns the bytes read.
    ///
    /// # Safety
    /// `base + buf_offset .. + len` must be valid device memory for the whole call.
    pub unsafe fn read(&self, base: u64, buf_offset: u64, len: usize, file_offset: u64) -> isize {
        match api() {
            // SAFETY: the caller's contract; the handle is registered.
            Ok(api) => unsafe {
                (api.read)(
                    self.handle as _,
                    base as *mut std::ffi::c_void,
                    len,
                    file_offset as i64,
                    buf_offset as i64,
                )
            },
            Err(_) => -(libc::ENOSYS as isize),
        }
    }

    /// One `cuFileWrite`, as [`RegisteredFile::read`].
    ///
    /// # Safety
    /// As for [`RegisteredFile::read`].
    pub unsafe fn write(&self, base: u64, buf_offset: u64, len: usize, file_offset: u64) -> isize {
        match api() {
            // SAFETY: the caller's contract; the handle is registered.
            Ok(api) => unsafe {
                (api.write)(
                    self.handle as _,
                    base as *const std::ffi::c_void,
                    len,
                    file_offset as i64,
                    buf_offset as i64,
                )
            },
            Err(_) => -(libc::ENOSYS as isize),
        }
    }
}

impl Drop for RegisteredFile {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            if driver_is_open() {
                // SAFETY: deregisters the handle this value registered; the driver cannot close
                // before the count below drops.
                unsafe { (api.handle_deregister)(self.handle as _) };
            }
        }
        REGISTERED.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many files are registered with cuFile now ([`driver_close`] refuses while any is).
pub fn registered_files() -> usize {
    REGISTERED.load(Ordering::SeqCst)
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

/// Converts a negative `cuFileRead/Write` return into an error: -1 means errno, below that a
/// negated `CUfileOpError`.
pub(crate) fn io_error(ret: isize, call: &'static str) -> Error {
    let code = (-ret) as i32;
    if ret == -1 || code < 5000 {
        let errno = if ret == -1 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(5)
        } else {
            code
        };
        Error::Cufile {
            call,
            code: -errno,
            name: crate::error::os_message(errno),
            cuda_code: 0,
        }
    } else {
        Error::Cufile {
            call,
            code,
            name: op_error_name(code).to_owned(),
            cuda_code: 0,
        }
    }
}

/// cuFile's per-process counters, as far as the statistics API gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Reads cuFile completed.
    pub read_ops: u64,
    /// Reads that failed.
    pub read_errors: u64,
    /// Writes cuFile completed.
    pub write_ops: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Per-GPU reads (summed over GPUs): all, through nvidia-fs, through cuFile's POSIX path.
    pub n_reads: u64,
    /// See `n_reads`.
    pub nvfs_reads: u64,
    /// See `n_reads`.
    pub posix_reads: u64,
    /// Per-GPU writes, likewise.
    pub n_writes: u64,
    /// See `n_writes`.
    pub nvfs_writes: u64,
    /// See `n_writes`.
    pub posix_writes: u64,
}

const OP_COUNTERS_L1: usize = 6;
const PER_GPU_SIZE: usize = 248;
const MAX_GPUS: usize = 16;

/// Size of `CUfileStatsLevel1_t`: 512 bytes up to cuFile 1.18; 1.19 added the readv/writev
/// counters (112 bytes more).
fn l1_size(version: Option<(i32, i32)>) -> usize {
    match version {
        Some(v) if v >= (1, 19) => 624,
        _ => 512,
    }
}

fn u64_at(buf: &[u8], off: usize) -> u64 {
    buf.get(off..off + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
}

/// Decodes a `CUfileStatsLevel3_t` from raw bytes given the level-1 size; `None` if the bytes
/// do not look like one (more than 16 GPUs, per-GPU reads not adding up).
pub fn decode_l3(buf: &[u8], l1: usize) -> Option<Stats> {
    let mut s = Stats {
        read_ops: u64_at(buf, 0),
        read_errors: u64_at(buf, 8),
        write_ops: u64_at(buf, 16),
        read_bytes: u64_at(buf, OP_COUNTERS_L1 * 16),
        write_bytes: u64_at(buf, OP_COUNTERS_L1 * 16 + 8),
        ..Stats::default()
    };
    let l2 = l1 + 64 * 8;
    let num_gpus = buf
        .get(l2..l2 + 4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))?;
    if num_gpus as usize > MAX_GPUS {
        return None;
    }
    let base = l2 + 8;
    for g in 0..MAX_GPUS {
        let o = base + g * PER_GPU_SIZE + 16;
        let f = |i: usize| u64_at(buf, o + i * 8);
        s.n_reads += f(4);
        s.nvfs_reads += f(6);
        s.posix_reads += f(7);
        s.n_writes += f(17);
        s.nvfs_writes += f(19);
        s.posix_writes += f(20);
    }
    // Every per-GPU read went some way; a wrong layout breaks this with near certainty.
    let plausible = s.nvfs_reads + s.posix_reads <= s.n_reads.max(1) * 2
        && s.n_reads
            <= s.read_ops
                .saturating_add(s.read_errors)
                .saturating_mul(64)
                .max(1024);
    plausible.then_some(s)
}

impl Stats {
    /// cuFile's counters now (level 3 where enabled), or why they cannot be read.
    pub fn snapshot() -> Result<Stats> {
        let api = api()?;
        let get = api.get_stats_l3.ok_or_else(|| Error::CufileUnavailable {
            reason: "this cuFile has no statistics API (cuFile 1.15 or newer has)".into(),
        })?;
        let mut buf = vec![0u8; 64 << 10];
        // SAFETY: the buffer is far larger than any CUfileStatsLevel3_t version (~5 KiB).
        check("cuFileGetStatsL3", unsafe { get(buf.as_mut_ptr().cast()) })?;
        let version = api.version();
        let first = l1_size(version);
        let other = if first == 512 { 624 } else { 512 };
        decode_l3(&buf, first)
            .or_else(|| decode_l3(&buf, other))
            .ok_or_else(|| Error::CufileUnavailable {
                reason: format!("cuFile {version:?} statistics have an unknown layout"),
            })
    }

    /// Counters accumulated since `before`.
    pub fn since(&self, before: &Stats) -> Stats {
        Stats {
            read_ops: self.read_ops.saturating_sub(before.read_ops),
            read_errors: self.read_errors.saturating_sub(before.read_errors),
            write_ops: self.write_ops.saturating_sub(before.write_ops),
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
            n_reads: self.n_reads.saturating_sub(before.n_reads),
            nvfs_reads: self.nvfs_reads.saturating_sub(before.nvfs_reads),
            posix_reads: self.posix_reads.saturating_sub(before.posix_reads),
            n_writes: self.n_writes.saturating_sub(before.n_writes),
            nvfs_writes: self.nvfs_writes.saturating_sub(before.nvfs_writes),
            posix_writes: self.posix_writes.saturating_sub(before.posix_writes),
        }
    }
}

/// Sets cuFile's statistics level (3 gives per-GPU nvfs/posix counts) and starts collection;
/// returns the previous level.
pub fn enable_stats(level: i32) -> Result<i32> {
    let api = api()?;
    let (Some(set), Some(start)) = (api.set_stats_level, api.stats_start) else {
        return Err(Error::CufileUnavailable {
            reason: "this cuFile has no statistics API (cuFile 1.15 or newer has)".into(),
        });
    };
    let mut old = 0;
    if let Some(get) = api.get_stats_level {
        // SAFETY: plain out-parameter.
        unsafe { get(&mut old) };
    }
    if old < level {
        // SAFETY: plain value arguments.
        check("cuFileSetStatsLevel", unsafe { set(level) })?;
    }
    // SAFETY: no arguments.
    check("cuFileStatsStart", unsafe { start() })?;
    Ok(old)
}

/// cufile.json as cuFile would read it: `CUFILE_ENV_PATH_JSON`, else `/etc/cufile.json`.
pub fn config_path() -> PathBuf {
    std::env::var_os("CUFILE_ENV_PATH_JSON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/cufile.json"))
}

/// Removes `//` comments outside strings (cufile.json allows them; JSON does not).
pub fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if c == '/' && chars.peek() == Some(&'/') {
            for c in chars.by_ref() {
                if c == '\n' {
                    out.push('\n');
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The `execution` and `properties` sections of cufile.json (flattened, `section.key`).
pub fn read_config(path: &std::path::Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::os(crate::error::Op::Open, path, 0, 0, e))?;
    parse_config(&text).map_err(|reason| {
        Error::InvalidArgument(format!(
            "{} is not valid cufile.json: {reason}",
            path.display()
        ))
    })
}

/// Parses cufile.json text; see [`read_config`].
pub fn parse_config(text: &str) -> std::result::Result<Vec<(String, String)>, String> {
    let v: serde_json::Value =
        serde_json::from_str(&strip_comments(text)).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for section in ["execution", "properties"] {
        if let Some(obj) = v.get(section).and_then(|s| s.as_object()) {
            for (k, val) in obj {
                out.push((format!("{section}.{k}"), val.to_string()));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_go_strings_stay() {
        let text = r#"{ // top
            "execution": { "max_io_threads": 4, // four
                           "url": "http://x//y" },
            "properties": { "allow_compat_mode": true }
        }"#;
        let cfg = parse_config(text).unwrap();
        assert!(cfg.contains(&("execution.max_io_threads".into(), "4".into())));
        assert!(cfg.contains(&("execution.url".into(), "\"http://x//y\"".into())));
        assert!(cfg.contains(&("properties.allow_compat_mode".into(), "true".into())));
        assert!(parse_config("{ not json").is_err());
    }

    fn l3_bytes(l1: usize, read_ops: u64, per_gpu: &[(u64, u64, u64)]) -> Vec<u8> {
        let mut buf = vec![0u8; 8192];
        buf[0..8].copy_from_slice(&read_ops.to_le_bytes());
        let l2 = l1 + 512;
        buf[l2..l2 + 4].copy_from_slice(&(per_gpu.len() as u32).to_le_bytes());
        for (g, (n, nvfs, posix)) in per_gpu.iter().enumerate() {
            let o = l2 + 8 + g * PER_GPU_SIZE + 16;
            buf[o + 32..o + 40].copy_from_slice(&n.to_le_bytes());
            buf[o + 48..o + 56].copy_from_slice(&nvfs.to_le_bytes());
            buf[o + 56..o + 64].copy_from_slice(&posix.to_le_bytes());
        }
        buf
    }

    #[test]
    fn stats_decode_for_both_layouts() {
        for l1 in [512, 624] {
            let buf = l3_bytes(l1, 256, &[(256, 0, 256)]);
            let s = decode_l3(&buf, l1).unwrap();
            assert_eq!(
                (s.read_ops, s.n_reads, s.nvfs_reads, s.posix_reads),
                (256, 256, 0, 256)
            );
        }
        assert_eq!(l1_size(Some((1, 15))), 512);
        assert_eq!(l1_size(Some((1, 19))), 624);
    }

    proptest::proptest! {
        #[test]
        fn cufile_json_parsing_never_panics(text in "\\PC{0,200}") {
            let _ = parse_config(&text);
            let _ = strip_comments(&text);
        }

        #[test]
        fn comments_never_touch_string_contents(s in "[a-z/ ]{0,20}") {
            let text = format!("{{\"execution\": {{\"k\": \"{s}\"}}}} // tail");
            let cfg = parse_config(&text).unwrap();
            proptest::prop_assert_eq!(&cfg[0].1, &format!("\"{s}\""));
        }
    }

    #[test]
    fn driver_settings_by_kvikio_name() {
        for d in DriverSetting::ALL {
            assert_eq!(d.as_str().parse::<DriverSetting>().unwrap(), d);
        }
        let e = "poll_thresh_size_kb".parse::<DriverSetting>().unwrap_err();
        assert!(matches!(e, Error::UnknownSetting { .. }), "{e}");
        let settable: Vec<_> = DriverSetting::ALL
            .into_iter()
            .filter(|d| !d.read_only())
            .map(DriverSetting::as_str)
            .collect();
        assert_eq!(
            settable,
            [
                "poll_mode",
                "poll_thresh_size",
                "max_device_cache_size",
                "max_pinned_memory_size"
            ]
        );
        // Refused before cuFile is loaded, so this holds on any machine.
        let e = set_driver_setting(DriverSetting::MajorVersion, DriverValue::Int(2077));
        assert!(e.unwrap_err().to_string().contains("read-only"));
    }

    #[test]
    fn error_names() {
        assert_eq!(op_error_name(5027), "CU_FILE_HANDLE_NOT_REGISTERED");
        assert_eq!(op_error_name(4), "CU_FILE_UNKNOWN_ERROR");
        let e = io_error(-5030, "cuFileRead");
        assert!(e.to_string().contains("CU_FILE_INTERNAL_ERROR"), "{e}");
    }
}
