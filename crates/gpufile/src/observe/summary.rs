//! Totals of the operations a span saw (KvikIO 26.10's `statistics::Summary`), gathered by a
//! [`SummaryMonitor`], with gpufile's path and reason in every row.
//!
//! How to use:
//! 1. [`SummaryMonitor::new`] registers a monitor and starts counting; [`SummaryMonitor::get`]
//!    reads the totals; [`Summary::since`] differences two readings of the same span.
//! 2. [`SummaryMonitor::stop`] (also on drop) ends the span: later readings describe it, fixed.
//! 3. Rendering (report, JSON, bytes) is in `summary_format`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::counters::{counters, Counters};
use super::ops::{self, ClockAnchor, DataPath, IoBackend, Monitor, Operation, Why};
use crate::error::{Error, Result};
use crate::plan::Reason;
use crate::request::Direction;

/// What one KvikIO backend carried.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct BackendTotals {
    /// Operations.
    pub num_ops: u64,
    /// Bytes moved.
    pub bytes_transferred: u64,
    /// Their durations added up, in ns.
    pub total_duration_ns: u64,
    /// Operations that failed.
    pub num_errors: u64,
}

/// What one of gpufile's paths carried, and why it was taken.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PathRow {
    /// The path's name ([`DataPath::name`]).
    pub path: String,
    /// The KvikIO backend its operations belong to ([`IoBackend::name`]).
    pub backend: String,
    /// Operations.
    pub num_ops: u64,
    /// Bytes moved.
    pub bytes_transferred: u64,
    /// Their durations added up, in ns.
    pub total_duration_ns: u64,
    /// Operations that failed.
    pub num_errors: u64,
    /// Tasks the operations ran as.
    pub num_tasks: u64,
    /// Of `bytes_transferred`, those copied by DMA from registered page cache.
    pub dma_bytes: u64,
    /// Each reason given for taking the path, with how many operations it was given for.
    pub reasons: Vec<(String, u64)>,
}

/// A reading of a [`SummaryMonitor`], or the difference of two ([`Summary::since`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Start of the span, as [`ops::steady_ns`].
    pub start_ns: u64,
    /// End of the span (the reading, or the stop).
    pub end_ns: u64,
    /// What maps those to the wall clock (taken when the monitor was made).
    pub anchor: ClockAnchor,
    /// Operations.
    pub num_ops: u64,
    /// Of them, reads.
    pub num_reads: u64,
    /// Of them, writes.
    pub num_writes: u64,
    /// Bytes asked for.
    pub bytes_requested: u64,
    /// Bytes moved.
    pub bytes_transferred: u64,
    /// Of them, read.
    pub bytes_read: u64,
    /// Of them, written.
    pub bytes_written: u64,
    /// Operations that failed.
    pub num_errors: u64,
    /// By KvikIO backend, in [`IoBackend::ALL`]'s order.
    pub by_backend: [BackendTotals; 5],
    /// By gpufile path, the paths used only, in [`DataPath::ALL`]'s order.
    pub by_path: Vec<PathRow>,
    /// The part of the process's [`Counters`] that fell in the span.
    pub counters: Counters,
    /// The operations' durations added up, in ns.
    pub total_duration_ns: u64,
    /// Time with at least one operation in flight, in ns.
    pub busy_ns: u64,
    /// The monitor that read it.
    pub monitor: u64,
    /// Its resets before the reading.
    pub generation: u64,
    /// Whether this is a difference of two readings (it cannot be a baseline).
    pub interval: bool,
}

impl Summary {
    /// `end - start`, in ns (0 for a degenerate span).
    pub fn wall_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The span's start on the wall clock, ns since the Unix epoch.
    pub fn start_unix_ns(&self) -> i64 {
        self.anchor.to_wall_ns(self.start_ns)
    }

    /// The span's end on the wall clock, ns since the Unix epoch.
    pub fn end_unix_ns(&self) -> i64 {
        self.anchor.to_wall_ns(self.end_ns)
    }

    /// Bytes per second while busy (0 if never busy).
    pub fn busy_bytes_per_sec(&self) -> f64 {
        match self.busy_ns {
            0 => 0.0,
            b => self.bytes_transferred as f64 / (b as f64 / 1e9),
        }
    }

    /// Share of the span with an operation in flight (0 for a degenerate span).
    pub fn busy_fraction(&self) -> f64 {
        match self.wall_ns() {
            0 => 0.0,
            w => self.busy_ns as f64 / w as f64,
        }
    }

    /// `total_duration / num_ops` (0 if none).
    pub fn mean_duration_ns(&self) -> u64 {
        self.total_duration_ns
            .checked_div(self.num_ops)
            .unwrap_or(0)
    }

    /// The interval between `previous`, an earlier reading of the same span, and this one.
    /// Refused (`InvalidArgument`) for an interval, a reading of another monitor or from
    /// before a reset, and a later reading.
    pub fn since(&self, previous: &Summary) -> Result<Summary> {
        let refuse = |why: &str| {
            Err(Error::InvalidArgument(format!(
                "not an earlier reading of the same span: {why}"
            )))
        };
        if self.interval || previous.interval {
            return refuse("an interval holds differences and cannot be a baseline");
        }
        if self.monitor != previous.monitor {
            return refuse("it was read from another monitor");
        }
        if self.generation != previous.generation {
            return refuse("the monitor was reset between the two readings");
        }
        if previous.end_ns > self.end_ns {
            return refuse("it was taken after this one");
        }
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let mut by_backend = self.by_backend;
        for (now, before) in by_backend.iter_mut().zip(&previous.by_backend) {
            now.num_ops = d(now.num_ops, before.num_ops);
            now.bytes_transferred = d(now.bytes_transferred, before.bytes_transferred);
            now.total_duration_ns = d(now.total_duration_ns, before.total_duration_ns);
            now.num_errors = d(now.num_errors, before.num_errors);
        }
        let by_path = self
            .by_path
            .iter()
            .filter_map(|row| {
                let before = previous.by_path.iter().find(|p| p.path == row.path);
                let Some(before) = before else {
                    return Some(row.clone());
                };
                let reasons = row
                    .reasons
                    .iter()
                    .filter_map(|(text, n)| {
                        let was = before.reasons.iter().find(|(t, _)| t == text);
                        let n = d(*n, was.map_or(0, |(_, m)| *m));
                        (n > 0).then(|| (text.clone(), n))
                    })
                    .collect();
                let row = PathRow {
                    path: row.path.clone(),
                    backend: row.backend.clone(),
                    num_ops: d(row.num_ops, before.num_ops),
                    bytes_transferred: d(row.bytes_transferred, before.bytes_transferred),
                    total_duration_ns: d(row.total_duration_ns, before.total_duration_ns),
                    num_errors: d(row.num_errors, before.num_errors),
                    num_tasks: d(row.num_tasks, before.num_tasks),
                    dma_bytes: d(row.dma_bytes, before.dma_bytes),
                    reasons,
                };
                (row.num_ops > 0).then_some(row)
            })
            .collect();
        Ok(Summary {
            start_ns: previous.end_ns,
            end_ns: self.end_ns,
            anchor: self.anchor,
            num_ops: d(self.num_ops, previous.num_ops),
            num_reads: d(self.num_reads, previous.num_reads),
            num_writes: d(self.num_writes, previous.num_writes),
            bytes_requested: d(self.bytes_requested, previous.bytes_requested),
            bytes_transferred: d(self.bytes_transferred, previous.bytes_transferred),
            bytes_read: d(self.bytes_read, previous.bytes_read),
            bytes_written: d(self.bytes_written, previous.bytes_written),
            num_errors: d(self.num_errors, previous.num_errors),
            by_backend,
            by_path,
            counters: self.counters.since(&previous.counters),
            total_duration_ns: d(self.total_duration_ns, previous.total_duration_ns),
            busy_ns: d(self.busy_ns, previous.busy_ns),
            monitor: self.monitor,
            generation: self.generation,
            interval: true,
        })
    }
}

/// Most distinct reasons kept per path; further ones are counted under one "other" row (a
/// refusal's text may name a file).
const REASONS_PER_PATH: usize = 16;
const OTHER_REASONS: &str = "other reasons (not shown)";

/// A reason as a monitor keeps it: the plan's value (compared without formatting it), or text.
#[derive(Clone, Debug, PartialEq)]
enum ReasonKey {
    Planned(Reason),
    Text(String),
}

impl ReasonKey {
    fn matches(&self, why: &Why<'_>) -> bool {
        match (self, why) {
            (ReasonKey::Planned(a), Why::Planned(b)) => a == *b,
            (ReasonKey::Text(a), Why::Refused(_) | Why::Reported) => *a == why.to_string(),
            _ => false,
        }
    }

    fn text(&self) -> String {
        match self {
            ReasonKey::Planned(r) => r.to_string(),
            ReasonKey::Text(t) => t.clone(),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct PathLive {
    ops: u64,
    bytes: u64,
    duration_ns: u64,
    errors: u64,
    tasks: u64,
    dma: u64,
    reasons: Vec<(ReasonKey, u64)>,
    backend: Option<IoBackend>,
}

/// Running totals of a monitor.
#[derive(Clone, Debug, Default)]
struct Totals {
    summary: Summary,
    paths: [PathLive; 7],
}

impl Totals {
    fn add(&mut self, op: &Operation<'_>) {
        let s = &mut self.summary;
        let (bytes, dur) = (op.bytes_transferred, op.duration().as_nanos() as u64);
        s.num_ops += 1;
        s.bytes_requested += op.size;
        s.bytes_transferred += bytes;
        s.total_duration_ns += dur;
        match op.direction {
            Direction::Read => (s.num_reads += 1, s.bytes_read += bytes),
            Direction::Write => (s.num_writes += 1, s.bytes_written += bytes),
        };
        let failed = u64::from(!op.ok);
        s.num_errors += failed;
        let b = &mut s.by_backend[op.backend as usize];
        b.num_ops += 1;
        b.bytes_transferred += bytes;
        b.total_duration_ns += dur;
        b.num_errors += failed;
        let p = &mut self.paths[op.path as usize];
        p.ops += 1;
        p.bytes += bytes;
        p.duration_ns += dur;
        p.errors += failed;
        p.tasks += op.tasks as u64;
        p.dma += op.dma_bytes;
        p.backend = Some(op.backend);
        let known = p.reasons.iter().position(|(k, _)| k.matches(&op.why));
        match known {
            Some(i) => p.reasons[i].1 += 1,
            None if p.reasons.len() < REASONS_PER_PATH => {
                let key = match op.why {
                    Why::Planned(r) => ReasonKey::Planned(r.clone()),
                    Why::Refused(_) | Why::Reported => ReasonKey::Text(op.why.to_string()),
                };
                p.reasons.push((key, 1));
            }
            None => {
                let other = ReasonKey::Text(OTHER_REASONS.to_owned());
                match p.reasons.iter_mut().find(|(k, _)| *k == other) {
                    Some((_, n)) => *n += 1,
                    None => p.reasons.push((other, 1)),
                }
            }
        }
    }

    fn rows(&self) -> Vec<PathRow> {
        DataPath::ALL
            .iter()
            .zip(&self.paths)
            .filter(|(_, p)| p.ops > 0)
            .map(|(path, p)| PathRow {
                path: path.name().to_owned(),
                backend: p.backend.unwrap_or(IoBackend::Posix).name().to_owned(),
                num_ops: p.ops,
                bytes_transferred: p.bytes,
                total_duration_ns: p.duration_ns,
                num_errors: p.errors,
                num_tasks: p.tasks,
                dma_bytes: p.dma,
                reasons: p.reasons.iter().map(|(k, n)| (k.text(), *n)).collect(),
            })
            .collect()
    }
}

/// Busy time: the union of the operations' spans, built from their ends alone (each end
/// carries its start, so no start needs delivering). The open stretch `[stretch_start,
/// covered_until)` grows at either end as ends arrive, in whatever order; a span after it
/// closes it and opens the next; nothing before `floor` (the span's start, or where the last
/// closed stretch ended) counts again. So overlapping work counts once and the gaps between
/// calls count as idle; what it can miss (an undercount, never past the wall time) is a span
/// reported late that falls wholly between two stretches. An operation still running counts
/// once it ends.
#[derive(Clone, Debug)]
struct Busy {
    busy_ns: u64,
    floor: Instant,
    stretch_start: Instant,
    covered_until: Instant,
}

impl Busy {
    fn new(start: Instant) -> Self {
        Busy {
            busy_ns: 0,
            floor: start,
            stretch_start: start,
            covered_until: start,
        }
    }

    fn on_finish(&mut self, start: Instant, end: Instant) {
        let ns = |a: Instant, b: Instant| b.saturating_duration_since(a).as_nanos() as u64;
        let from = start.max(self.floor);
        if end <= from {
            return;
        }
        if from > self.covered_until {
            // After the open stretch: it closes, this one opens.
            self.floor = self.covered_until;
            self.stretch_start = from;
            self.covered_until = end;
            self.busy_ns += ns(from, end);
            return;
        }
        if from < self.stretch_start {
            if end >= self.stretch_start {
                // Reaches back past the open stretch's start: the stretch grows backwards.
                self.busy_ns += ns(from, self.stretch_start);
                self.stretch_start = from;
            } else {
                // Wholly between the last closed stretch and the open one.
                self.busy_ns += ns(from, end);
                self.floor = end;
                return;
            }
        }
        if end > self.covered_until {
            self.busy_ns += ns(self.covered_until.max(from), end);
            self.covered_until = end;
        }
    }
}

struct State {
    /// Operations that started before this are not the monitor's.
    registered: Option<Instant>,
    start: Instant,
    stopped: Option<(Instant, Counters)>,
    counters_at_start: Counters,
    generation: u64,
    totals: Totals,
    busy: Busy,
}

struct Shared {
    id: u64,
    anchor: ClockAnchor,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Monitor for Shared {
    fn wants_start(&self) -> bool {
        false
    }

    fn on_start(&self, _op: &Operation<'_>) {}

    fn on_finish(&self, op: &Operation<'_>) {
        let mut st = self.lock();
        // An operation that started before the monitor registered, or before its last reset,
        // is not the span's: neither counted nor timed.
        let mine = st.registered.is_some_and(|r| op.start >= r.max(st.start));
        if mine && st.stopped.is_none() {
            st.busy.on_finish(op.start, op.end);
            st.totals.add(op);
        }
    }
}

/// Counts every operation of the process while it exists (KvikIO's `SummaryMonitor`). Monitors
/// are independent: any number at once, each with its own span.
pub struct SummaryMonitor {
    shared: Arc<Shared>,
    registration: Mutex<Option<u64>>,
}

impl SummaryMonitor {
    /// Registers a monitor and starts counting.
    pub fn new() -> Result<Self> {
        let anchor = ClockAnchor::now();
        let start = ops::instant_at(anchor.steady_ns);
        let shared = Arc::new(Shared {
            id: ops::next_id(),
            anchor,
            state: Mutex::new(State {
                registered: None,
                start,
                stopped: None,
                counters_at_start: counters(),
                generation: 0,
                totals: Totals::default(),
                busy: Busy::new(start),
            }),
        });
        let id = ops::register(Arc::clone(&shared) as Arc<dyn Monitor>)?;
        shared.lock().registered = Some(Instant::now());
        Ok(SummaryMonitor {
            shared,
            registration: Mutex::new(Some(id)),
        })
    }

    /// The totals since construction or the last reset.
    pub fn get(&self) -> Summary {
        let st = self.shared.lock();
        let (end, now_counters) = match st.stopped {
            Some((end, c)) => (end, c),
            None => (Instant::now(), counters()),
        };
        let wall = end.saturating_duration_since(st.start).as_nanos() as u64;
        let busy = st.busy.busy_ns.min(wall);
        let mut s = st.totals.summary.clone();
        s.start_ns = ops::steady_ns(st.start);
        s.end_ns = ops::steady_ns(end);
        s.anchor = self.shared.anchor;
        s.by_path = st.totals.rows();
        s.counters = now_counters.since(&st.counters_at_start);
        s.busy_ns = busy;
        s.monitor = self.shared.id;
        s.generation = st.generation;
        s.interval = false;
        s
    }

    /// `get().since(previous)`.
    pub fn since(&self, previous: &Summary) -> Result<Summary> {
        self.get().since(previous)
    }

    /// Zeroes the totals and restarts the span now (on a stopped monitor: an empty, degenerate
    /// span).
    pub fn reset(&self) {
        let mut st = self.shared.lock();
        let now = Instant::now();
        st.start = now;
        st.generation += 1;
        st.counters_at_start = counters();
        st.totals = Totals::default();
        st.busy = Busy::new(now);
    }

    /// Stops counting (idempotent, one-way): the span ends here.
    pub fn stop(&self) {
        let mut registration = self.registration.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = registration.take() {
            // Waits for deliveries in progress, so nothing is counted after the end is fixed.
            let _ = ops::unregister(id);
            self.shared.lock().stopped = Some((Instant::now(), counters()));
        }
    }

    /// Whether [`SummaryMonitor::stop`] ran.
    pub fn stopped(&self) -> bool {
        self.shared.lock().stopped.is_some()
    }
}

impl Drop for SummaryMonitor {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn busy_time_is_the_union_of_the_spans_however_they_overlap() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut b = Busy::new(t0);
        b.on_finish(at(0), at(10)); // [0, 10)
        b.on_finish(at(5), at(12)); // overlaps: 2 more
        b.on_finish(at(20), at(25)); // after a gap: 5 more, the gap idle
        b.on_finish(at(21), at(24)); // inside the last: nothing
        assert_eq!(b.busy_ns, 17_000_000);
        // An operation from before the span counts only inside it.
        let mut b = Busy::new(at(100));
        b.on_finish(at(90), at(110));
        assert_eq!(b.busy_ns, 10_000_000);
    }

    #[test]
    fn busy_time_closes_at_the_last_end_and_opens_at_the_first_start_whatever_the_order() {
        let t0 = Instant::now();
        let at = |ns: u64| t0 + Duration::from_nanos(ns);
        // [0, 50) and [1, 100), the later end reported first: the stretch still opens at 0.
        let mut b = Busy::new(t0);
        b.on_finish(at(1), at(100));
        b.on_finish(at(0), at(50));
        assert_eq!(b.busy_ns, 100);
        // [50, 100) reported before [0, 100): the stretch reaches back to 0, once.
        let mut b = Busy::new(t0);
        b.on_finish(at(50), at(100));
        b.on_finish(at(0), at(100));
        assert_eq!(b.busy_ns, 100);
        // A closed stretch is never counted twice, whatever arrives after it.
        let mut b = Busy::new(t0);
        b.on_finish(at(0), at(10));
        b.on_finish(at(20), at(30));
        b.on_finish(at(0), at(30));
        assert!(b.busy_ns <= 30, "{}", b.busy_ns);
    }

    #[test]
    fn an_operation_that_began_before_a_reset_is_not_counted_after_it() {
        let monitor = SummaryMonitor::new().unwrap();
        let before = ops::steady_ns(Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        monitor.reset();
        let mut op = ops::ReportedOperation {
            id: 0,
            start_ns: before,
            end_ns: ops::steady_ns(Instant::now()),
            offset: 0,
            size: 8,
            bytes_transferred: 8,
            direction: Direction::Read,
            memory: crate::request::Memory::Host,
            backend: IoBackend::Posix,
            ok: true,
            source: "reported".into(),
        };
        ops::report(&mut op, true).unwrap();
        assert_eq!(monitor.get().num_ops, 0);
        // One that began after it is.
        op.start_ns = ops::steady_ns(Instant::now());
        op.end_ns = op.start_ns + 1_000;
        ops::report(&mut op, true).unwrap();
        let s = monitor.get();
        assert_eq!((s.num_ops, s.bytes_transferred), (1, 8));
        assert_eq!(s.by_path[0].path, "gpufile-posix");
        assert!(s.by_path[0].reasons[0]
            .0
            .starts_with("reported by the caller"));
    }

    #[test]
    fn an_interval_is_not_a_baseline_nor_is_another_span() {
        let a = Summary {
            monitor: 1,
            end_ns: 10,
            num_ops: 2,
            ..Summary::default()
        };
        let later = Summary {
            end_ns: 20,
            num_ops: 5,
            ..a.clone()
        };
        let interval = later.since(&a).unwrap();
        assert_eq!(
            (interval.num_ops, interval.start_ns, interval.end_ns),
            (3, 10, 20)
        );
        assert!(later.since(&interval).is_err());
        assert!(a.since(&later).is_err(), "a later reading is no baseline");
        let other = Summary {
            monitor: 2,
            ..a.clone()
        };
        assert!(later.since(&other).is_err());
        let reset = Summary {
            generation: 1,
            ..a.clone()
        };
        assert!(later.since(&reset).is_err());
    }
}
