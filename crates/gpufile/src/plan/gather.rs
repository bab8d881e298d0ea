//! Gathers: requests of many small ranges, moved a group of ranges per task.

use super::TaskSplit;
use crate::request::{Range, Ranges};

/// Largest range a request of many ranges gathers ([`TaskSplit::grouped`]); a request with a
/// larger range keeps one task (or more) per range, as a large read is best served by itself.
pub const GATHER_MAX_RANGE: usize = 1 << 20;

/// Most ranges in one group of a gather: one queue of I/O of this many ranges per task.
pub const GATHER_MAX_GROUP: usize = 4096;

/// Fewest ranges in a group of a gather (unless the request has fewer): a group is one task,
/// and waking a worker for a task costs about as much as reading a few hot 4 KiB ranges.
pub const GATHER_MIN_GROUP: usize = 8;

/// Groups a gather aims at per worker: several, so that a slow group does not leave the other
/// workers idle at the end, few, so that each costs its set-up once per many ranges.
pub const GATHER_GROUPS_PER_THREAD: usize = 4;

/// Whether a request of `ranges` is gathered: several ranges, none larger than
/// [`GATHER_MAX_RANGE`] nor than `max_bytes` (a group of a device read must fit one pinned
/// buffer), with no task size of its own.
pub fn gathers(ranges: &Ranges, task_size: Option<usize>, max_bytes: usize) -> bool {
    let Ranges::Many(list) = ranges else {
        return false;
    };
    let limit = GATHER_MAX_RANGE.min(max_bytes);
    task_size.is_none() && list.len() >= 2 && list.facts().max_len <= limit
}

/// Ranges per group of a gather of `n` ranges on `threads` workers: about
/// [`GATHER_GROUPS_PER_THREAD`] groups per worker, at least [`GATHER_MIN_GROUP`] and at most
/// [`GATHER_MAX_GROUP`] ranges each.
pub fn gather_group(n: usize, threads: usize) -> usize {
    n.div_ceil(threads.max(1) * GATHER_GROUPS_PER_THREAD)
        .clamp(GATHER_MIN_GROUP, GATHER_MAX_GROUP)
}

/// Host-to-GPU copies a gathered device read makes: one per contiguous run of the destination
/// within each group (ranges sorted by buffer offset in the group), so a gather into a packed
/// output (rows one after the other) makes one copy per group.
pub fn gather_copies(split: &TaskSplit) -> usize {
    // A packed list's groups are one run each (where they move a byte), known from their ends.
    if split.ranges().facts().packed {
        return (0..split.count())
            .filter(|&i| {
                let g = split.group(i);
                let (first, last) = (g.first(), g.last());
                first
                    .zip(last)
                    .is_some_and(|(f, l)| l.buf_offset + l.len > f.buf_offset)
            })
            .count();
    }
    (0..split.count())
        .map(|i| contiguous_runs(split.group(i)))
        .sum()
}

/// Contiguous runs of the destination covered by `ranges` (in buffer order; empty ranges count
/// for nothing).
pub fn contiguous_runs(ranges: &[Range]) -> usize {
    let mut spans: Vec<(usize, usize)> = ranges
        .iter()
        .filter(|r| r.len > 0)
        .map(|r| (r.buf_offset, r.buf_offset + r.len))
        .collect();
    if !spans.windows(2).all(|w| w[0] <= w[1]) {
        spans.sort_unstable();
    }
    let mut runs = 0;
    let mut end = None;
    for (start, stop) in spans {
        if end != Some(start) {
            runs += 1;
        }
        end = Some(stop);
    }
    runs
}
