//! cuFile (GPUDirect Storage): library, driver, properties, file handles, I/O and statistics.
//!
//! How to use:
//! 1. [`availability`] answers, once per process, whether cuFile can be used and whether its
//!    accelerated path (nvidia-fs, or P2PDMA) exists: the input of the AUTO decision.
//! 2. [`RegisteredFile::register`] registers a descriptor (`cuFileHandleRegister`); its
//!    [`RegisteredFile::read`] / [`RegisteredFile::write`] are single `cuFileRead/Write` calls
//!    that return the bytes moved or a typed error.
//! 3. [`Stats::snapshot`] reads cuFile's own counters (level 3: per GPU, nvfs vs posix), so the
//!    path cuFile really took is known in-process, without `gds_stats`.
//!
//! One module per job, all re-exported here: [`library`](mod@library) (finding
//! `libcufile.so.0`), [`driver`] (open/close, the registrations that keep it open, the probe),
//! [`properties`](mod@properties) (driver properties and KvikIO's `cufile_driver.get/set`),
//! [`registration`] (files, buffers, streams), [`statistics`] (cuFile's counters),
//! [`configuration`] (cufile.json), [`capabilities`] (what cuFile 1.15+ tells: BAR sizes, P2P
//! flags, parameter limits) and [`result`] (status codes and I/O returns to `Result`, the
//! only place that decodes them). Dependencies run one way: the setting types (`settings`) are
//! below the driver's lifecycle (`lifecycle`, which keeps the values set while the driver is
//! open), the properties use the lifecycle, and [`driver`] re-exports the lifecycle and adds the
//! probe, which reads the properties.
//!
//! Nothing here loads `libcufile.so.0` until called; host-only work never does.

pub mod capabilities;
pub mod configuration;
pub mod driver;
pub mod library;
mod lifecycle;
pub mod properties;
pub mod registration;
pub mod result;
mod settings;
pub mod statistics;

pub use capabilities::{
    bar_size_kb, p2p_flags, parameter_limits, P2pFlags, StorageType, SIZE_T_PARAMETERS,
};
pub use configuration::{config_path, parameters, read_config};
pub use driver::{
    availability, driver_close, driver_is_open, driver_open, registered_files, stats_at_open,
    watch_stats,
};
pub use library::{library, set_search_dirs, version};
pub use properties::{
    driver_setting, properties, set_driver_setting, DriverSetting, DriverValue, Properties,
};
pub use registration::{
    buf_deregister, buf_register, stream_deregister, stream_register, RegisteredFile,
};
pub use statistics::{enable_stats, Stats};
