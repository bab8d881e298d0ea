//! The cuFile driver's lifecycle (`cuFileDriverOpen` / `cuFileDriverClose`), the registrations
//! that keep it open, and the once-per-process probe the AUTO decision reads.
//!
//! The lifecycle lives in a module below the driver's properties (which open the driver), and
//! the probe here reads those properties, so the modules depend on each other one way only.

use std::sync::OnceLock;

use super::properties::properties;
use crate::plan::Availability;

pub use super::lifecycle::{
    driver_close, driver_is_open, driver_open, registered_files, stats_at_open, watch_stats,
};

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
