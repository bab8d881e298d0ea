//! What cuFile 1.15 and 1.16 can tell about the machine: the GPUs' BAR sizes
//! (`cuFileGetBARSizeInKB`), the P2P modes cuFile supports for each storage type
//! (`cuFileDriverGetP2PFlags`) and the range each `size_t` parameter accepts
//! (`cuFileGetParameterMinMaxValue`).
//!
//! Each call is an optional symbol: `Ok(None)` means the loaded cuFile does not have it, which is
//! no error (older cuFiles load and work as before); `Err` means cuFile did not load, or the call
//! failed.

use gpufile_sys::cufile as sys;

use super::library::api;
use super::lifecycle::driver_open;
use super::result::check;
use crate::error::Result;

/// A storage type cuFile answers P2P flags for (`CUfileDriverStatusFlags_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageType {
    /// Its `CUfileDriverStatusFlags_t` value.
    pub code: i32,
    /// cuFile's name (`CU_FILE_NVME_SUPPORTED`).
    pub cufile_name: &'static str,
}

impl StorageType {
    /// Every storage type `cuFileDriverGetP2PFlags` answers for.
    pub fn all() -> impl Iterator<Item = StorageType> {
        sys::CU_FILE_STORAGE_TYPES
            .iter()
            .map(|&(code, cufile_name)| StorageType { code, cufile_name })
    }

    /// The short name: `nvme`, `nvmeof`, `lustre`, ...
    pub fn name(self) -> String {
        self.cufile_name
            .trim_start_matches("CU_FILE_")
            .trim_end_matches("_SUPPORTED")
            .to_ascii_lowercase()
    }
}

/// A `CUfileP2PFlags_t` mask: the P2P modes cuFile uses for a storage type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pFlags(pub u32);

impl P2pFlags {
    /// The named bits, in bit order.
    const NAMES: [(u32, &'static str); 5] = [
        (sys::CUFILE_P2PDMA, "P2PDMA"),
        (sys::CUFILE_NVFS, "NVFS"),
        (sys::CUFILE_DMABUF, "DMABUF"),
        (sys::CUFILE_C2C, "C2C"),
        (sys::CUFILE_NVIDIA_PEERMEM, "PEERMEM"),
    ];

    /// The set bits by name, in bit order; a bit cufile.h does not name (a newer cuFile's) as
    /// `bit N`, so no bit is dropped silently.
    pub fn names(self) -> Vec<String> {
        (0..32)
            .filter(|b| self.0 & (1 << b) != 0)
            .map(|b| match Self::NAMES.iter().find(|(n, _)| *n == b) {
                Some((_, name)) => (*name).to_owned(),
                None => format!("bit {b}"),
            })
            .collect()
    }
}

/// A `CUFileSizeTConfigParameter_t` by cuFile's name, every one of them, in cufile.h's order.
pub const SIZE_T_PARAMETERS: [(i32, &str); 12] = [
    (
        sys::CUFILE_PARAM_PROFILE_STATS,
        "CUFILE_PARAM_PROFILE_STATS",
    ),
    (
        sys::CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH,
        "CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH",
    ),
    (
        sys::CUFILE_PARAM_EXECUTION_MAX_IO_THREADS,
        "CUFILE_PARAM_EXECUTION_MAX_IO_THREADS",
    ),
    (
        sys::CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB,
        "CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB",
    ),
    (
        sys::CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM,
        "CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM",
    ),
    (
        sys::CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB,
        "CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB",
    ),
    (
        sys::CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB,
        "CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB",
    ),
    (
        sys::CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB,
        "CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB",
    ),
    (
        sys::CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB,
        "CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB",
    ),
    (
        sys::CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE,
        "CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE",
    ),
    (
        sys::CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB,
        "CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB",
    ),
    (
        sys::CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS,
        "CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS",
    ),
];

/// GPU `gpu`'s BAR size in KiB (`cuFileGetBARSizeInKB`, cuFile 1.15+; opens the driver, which
/// the call needs), or `None` where this cuFile lacks the call.
pub fn bar_size_kb(gpu: i32) -> Result<Option<u64>> {
    let Some(f) = api()?.get_bar_size_in_kb else {
        return Ok(None);
    };
    driver_open()?;
    let mut kb = 0usize;
    // SAFETY: a value argument and a plain `size_t` out-parameter.
    check("cuFileGetBARSizeInKB", unsafe { f(gpu, &mut kb) })?;
    Ok(Some(kb as u64))
}

/// The P2P modes cuFile supports for `storage` (`cuFileDriverGetP2PFlags`, cuFile 1.16; opens
/// the driver, which the call needs), or `None` where this cuFile lacks the call.
pub fn p2p_flags(storage: StorageType) -> Result<Option<P2pFlags>> {
    let Some(f) = api()?.driver_get_p2p_flags else {
        return Ok(None);
    };
    driver_open()?;
    let mut mask = 0u32;
    // SAFETY: a value argument and a plain out-parameter the size of a C enum.
    check("cuFileDriverGetP2PFlags", unsafe {
        f(storage.code, &mut mask)
    })?;
    Ok(Some(P2pFlags(mask)))
}

/// The least and greatest value cuFile accepts for the `size_t` parameter `param` (one of
/// [`SIZE_T_PARAMETERS`]; `cuFileGetParameterMinMaxValue`, cuFile 1.15+), or `None` where this
/// cuFile lacks the call. Units are the parameter's own (`_KB`: KiB, `_MS`: milliseconds).
pub fn parameter_limits(param: i32) -> Result<Option<(u64, u64)>> {
    let Some(f) = api()?.get_parameter_min_max_value else {
        return Ok(None);
    };
    let (mut min, mut max) = (0usize, 0usize);
    // SAFETY: a value argument and two plain `size_t` out-parameters.
    check("cuFileGetParameterMinMaxValue", unsafe {
        f(param, &mut min, &mut max)
    })?;
    Ok(Some((min as u64, max as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p2p_flag_bits_decode_to_cufile_names() {
        assert!(P2pFlags(0).names().is_empty());
        assert_eq!(P2pFlags(0b1).names(), ["P2PDMA"]);
        assert_eq!(P2pFlags(0b11).names(), ["P2PDMA", "NVFS"]);
        assert_eq!(
            P2pFlags(0b11111).names(),
            ["P2PDMA", "NVFS", "DMABUF", "C2C", "PEERMEM"]
        );
        // A bit a newer cuFile may add is shown by number, not dropped.
        assert_eq!(P2pFlags(0b100100).names(), ["DMABUF", "bit 5"]);
        assert_eq!(P2pFlags(1 << 31).names(), ["bit 31"]);
    }

    #[test]
    fn storage_types_have_short_names() {
        let names: Vec<String> = StorageType::all().map(StorageType::name).collect();
        assert_eq!(names[0], "lustre");
        assert!(names.contains(&"nvme".to_owned()) && names.contains(&"nvmeof".to_owned()));
        assert!(names.contains(&"scaleflux_csd".to_owned()));
        // The deprecated NVME_P2P is not asked about.
        assert!(!names.contains(&"nvme_p2p".to_owned()));
    }

    #[test]
    fn size_t_parameters_follow_cufile_h() {
        for (i, (code, _)) in SIZE_T_PARAMETERS.iter().enumerate() {
            assert_eq!(*code, i as i32);
        }
    }
}
