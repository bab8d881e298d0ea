//! The driver properties of KvikIO's `cufile_driver.get/set`, by KvikIO's names, and their
//! values: the types that both the driver's lifecycle (which keeps the values set while it is
//! open) and its properties (which read and set them) use.

use crate::error::{Error, Result};

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
