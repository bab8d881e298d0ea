//! The driver's properties (`cuFileDriverGetProperties`) and the settable ones by KvikIO's names
//! (`cufile_driver.get/set`: `cuFileDriverSetPollMode`, `cuFileDriverSetMaxCacheSize`,
//! `cuFileDriverSetMaxPinnedMemSize`).

use gpufile_sys::cufile::{self as sys, CUfileDrvProps_t};

use super::library::api;
use super::lifecycle::{self, driver_open};
use super::result::check;
use crate::error::{Error, Result};

pub use super::settings::{DriverSetting, DriverValue};

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

/// What `p` says of `setting`.
fn value_of(setting: DriverSetting, p: &Properties) -> DriverValue {
    match setting {
        DriverSetting::IsGdsAvailable => DriverValue::Bool(p.is_gds_available),
        DriverSetting::MajorVersion => DriverValue::Int(p.major_version.into()),
        DriverSetting::MinorVersion => DriverValue::Int(p.minor_version.into()),
        DriverSetting::AllowCompatMode => DriverValue::Bool(p.allow_compat_mode),
        DriverSetting::PerBufferCacheSize => DriverValue::Int(p.per_buffer_cache_size_kb.into()),
        DriverSetting::PollMode => DriverValue::Bool(p.poll_mode),
        DriverSetting::PollThreshSize => DriverValue::Int(p.poll_thresh_size_kb as u64),
        DriverSetting::MaxDeviceCacheSize => DriverValue::Int(p.max_device_cache_size_kb.into()),
        DriverSetting::MaxPinnedMemorySize => {
            DriverValue::Int(p.max_device_pinned_mem_size_kb.into())
        }
    }
}

/// One property of the driver (opens it), as KvikIO's `cufile_driver.get`: the value last set
/// through [`set_driver_setting`], else what `cuFileDriverGetProperties` reports.
pub fn driver_setting(setting: DriverSetting) -> Result<DriverValue> {
    if let Some(v) = lifecycle::value_set(setting) {
        return Ok(v);
    }
    Ok(value_of(setting, &properties()?))
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
    lifecycle::remember_set(setting, value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
