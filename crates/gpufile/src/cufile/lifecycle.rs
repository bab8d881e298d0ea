//! The cuFile driver's lifecycle (`cuFileDriverOpen` / `cuFileDriverClose`) and the
//! registrations that keep it open; public as [`super::driver`].
//!
//! The driver is process-wide in cuFile itself, so its state here is one value, `DRIVER`:
//! the open outcome, the property values set while it is open, the statistics baseline taken at
//! open, and the counts of registrations and observations.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::library::api;
use super::result::check;
use super::settings::{DriverSetting, DriverValue};
use super::statistics::{enable_stats, Stats};
use crate::error::{Error, Result};

/// What gpufile knows of the process's cuFile driver.
struct Driver {
    state: Mutex<DriverState>,
    /// Live [`super::RegisteredFile`] values. Every open file registered with cuFile holds one,
    /// and every request in flight on it holds that one too (an `Arc`), so while this is above
    /// zero closing the driver would leave handles to be used after the close. Counted in under
    /// the state lock, so [`driver_close`] sees every registration that may still happen.
    registered: AtomicUsize,
    /// Observations in progress (they want cuFile's statistics as soon as the driver opens).
    stats_watchers: AtomicUsize,
}

struct DriverState {
    /// The outcome of the first [`driver_open`] since the last close (`None`: not tried).
    opened: Option<Result<()>>,
    /// Values given to [`super::set_driver_setting`]. cuFile's documentation says these calls
    /// take effect when the driver opens (on an open driver they may change nothing); KvikIO
    /// keeps what was set and answers it, and so does gpufile. Cleared when gpufile closes the
    /// driver (the next open reads cufile.json again).
    set: Vec<(DriverSetting, DriverValue)>,
    /// cuFile's counters when the driver opened while someone observed.
    stats_at_open: Option<Stats>,
}

static DRIVER: Driver = Driver {
    state: Mutex::new(DriverState {
        opened: None,
        set: Vec::new(),
        stats_at_open: None,
    }),
    registered: AtomicUsize::new(0),
    stats_watchers: AtomicUsize::new(0),
};

impl Driver {
    fn lock(&self) -> MutexGuard<'_, DriverState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl DriverState {
    /// [`driver_open`] with the state lock held.
    fn open(&mut self) -> Result<()> {
        if let Some(r) = &self.opened {
            return r.clone();
        }
        let r = (|| {
            crate::cuda::api()?; // cuFile needs an initialised driver
            let api = api()?;
            // SAFETY: no arguments; cuFile's documented first call.
            check("cuFileDriverOpen", unsafe { (api.driver_open)() })?;
            if DRIVER.stats_watchers.load(Ordering::SeqCst) > 0 {
                // Someone observes: start cuFile's statistics now and keep the baseline.
                self.stats_at_open = enable_stats(3).and_then(|_| Stats::snapshot()).ok();
            }
            Ok(())
        })();
        self.opened = Some(r.clone());
        r
    }
}

/// Counts an observation in (`true`) or out: while any is in, opening the driver starts cuFile's
/// statistics and keeps the baseline for [`stats_at_open`].
pub fn watch_stats(on: bool) {
    match on {
        true => DRIVER.stats_watchers.fetch_add(1, Ordering::SeqCst),
        false => DRIVER.stats_watchers.fetch_sub(1, Ordering::SeqCst),
    };
}

/// cuFile's counters at the moment the driver opened during an observation.
pub fn stats_at_open() -> Option<Stats> {
    DRIVER.lock().stats_at_open
}

/// Opens the cuFile driver (`cuFileDriverOpen`) once; later calls return the first outcome
/// until [`driver_close`].
pub fn driver_open() -> Result<()> {
    DRIVER.lock().open()
}

/// Closes the driver if gpufile opened it (`cuFileDriverClose_v2` where present).
///
/// Refused with [`Error::CufileBusy`] while files are registered with it (open files that used
/// cuFile, and the requests in flight on them): KvikIO closes regardless, and the handles are
/// then used after the close. Close those files (their I/O finishes first) and call again.
pub fn driver_close() -> Result<()> {
    let mut state = DRIVER.lock();
    if !matches!(&state.opened, Some(Ok(()))) {
        state.opened = None;
        return Ok(());
    }
    let registered = DRIVER.registered.load(Ordering::SeqCst);
    if registered > 0 {
        return Err(Error::CufileBusy { registered });
    }
    state.opened = None;
    state.set.clear();
    let api = api()?;
    // SAFETY: the driver was opened by `driver_open`; nothing of gpufile's is registered with
    // it (the count is 0, and new registrations wait for the lock held here).
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
    matches!(&DRIVER.lock().opened, Some(Ok(())))
}

/// How many files are registered with cuFile now ([`driver_close`] refuses while any is).
pub fn registered_files() -> usize {
    DRIVER.registered.load(Ordering::SeqCst)
}

/// One registration counted in with the driver, out again on drop: while any lives,
/// [`driver_close`] refuses.
pub(super) struct DriverHold(());

impl DriverHold {
    /// Opens the driver where needed and counts a registration in, both under the state lock,
    /// so that a close running at the same time either sees the count or runs before the open.
    pub(super) fn take() -> Result<DriverHold> {
        let mut state = DRIVER.lock();
        state.open()?;
        api()?;
        DRIVER.registered.fetch_add(1, Ordering::SeqCst);
        Ok(DriverHold(()))
    }
}

impl Drop for DriverHold {
    fn drop(&mut self) {
        DRIVER.registered.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The value last given to [`super::set_driver_setting`] since the driver opened, if any.
pub(super) fn value_set(setting: DriverSetting) -> Option<DriverValue> {
    let state = DRIVER.lock();
    state
        .set
        .iter()
        .find(|(s, _)| *s == setting)
        .map(|(_, v)| *v)
}

/// Keeps `value` as what `setting` answers until the driver closes.
pub(super) fn remember_set(setting: DriverSetting, value: DriverValue) {
    let mut state = DRIVER.lock();
    state.set.retain(|(s, _)| *s != setting);
    state.set.push((setting, value));
}
