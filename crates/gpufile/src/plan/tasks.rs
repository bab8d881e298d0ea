//! A request cut into tasks: what one worker runs at a time.

use std::sync::Arc;

use crate::request::{Range, Ranges};

/// One piece of a request, run by one worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    /// Offset in the file.
    pub file_offset: u64,
    /// Offset in the caller's buffer.
    pub buf_offset: usize,
    /// Bytes to transfer.
    pub len: usize,
}

/// A request cut into tasks of at most `task_size` bytes (KvikIO's split: every task of a range
/// is `task_size` long except possibly its last), range after range. Tasks are made on demand,
/// so a request of a billion tasks costs no memory up front.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSplit {
    ranges: Ranges,
    task_size: usize,
    /// For several ranges: the index of each range's first task (`None` for one range).
    starts: Option<Arc<[usize]>>,
    /// For a gather ([`TaskSplit::grouped`]): the index of each group's first range; a task is
    /// then a group of whole ranges, not a piece of one.
    groups: Option<Arc<[usize]>>,
    count: usize,
}

impl TaskSplit {
    /// `size` bytes at `file_offset` (at the buffer's start). `task_size` must be positive
    /// (settings and argument checks refuse 0 before any plan is made; 0 is treated as 1 here
    /// rather than dividing by zero).
    pub fn new(file_offset: u64, size: usize, task_size: usize) -> Self {
        let range = Range {
            file_offset,
            len: size,
            buf_offset: 0,
        };
        Self::over(Ranges::One(range), task_size)
    }

    /// Every range of `ranges`, each cut into tasks of at most `task_size` bytes.
    pub fn over(ranges: Ranges, task_size: usize) -> Self {
        let task_size = task_size.max(1);
        let (starts, count) = match &ranges {
            Ranges::One(r) => (None, r.len.div_ceil(task_size)),
            Ranges::Many(v) => {
                let mut next = 0usize;
                let starts: Arc<[usize]> = v
                    .iter()
                    .map(|r| {
                        let first = next;
                        next += r.len.div_ceil(task_size);
                        first
                    })
                    .collect();
                (Some(starts), next)
            }
        };
        TaskSplit {
            ranges,
            task_size,
            starts,
            groups: None,
            count,
        }
    }

    /// The ranges of `ranges` as groups of whole consecutive ranges, each of at most
    /// `max_ranges` ranges and (unless one range alone is larger) `max_bytes` bytes: one task per
    /// group, so that a worker reads a group with one queue of I/O and one completion instead of
    /// one task per range. Empty ranges are kept in their group (they move nothing).
    pub fn grouped(ranges: Ranges, max_ranges: usize, max_bytes: usize) -> Self {
        let (max_ranges, max_bytes) = (max_ranges.max(1), max_bytes.max(1));
        let list = ranges.as_slice();
        // Ranges of one length (a `read_rows`) make groups of one size, known without reading
        // the list: as many ranges as fit `max_bytes` (at least one), at most `max_ranges`.
        let starts: Arc<[usize]> = match ranges.facts().uniform_len {
            Some(len) => {
                let per = match len {
                    0 => max_ranges,
                    _ => (max_bytes / len).clamp(1, max_ranges),
                };
                (0..list.len()).step_by(per).collect()
            }
            None => group_starts(list, max_ranges, max_bytes).into(),
        };
        TaskSplit {
            count: starts.len(),
            ranges,
            task_size: max_bytes,
            starts: None,
            groups: Some(starts),
        }
    }

    /// Whether a task is a group of ranges ([`TaskSplit::grouped`]).
    pub fn is_grouped(&self) -> bool {
        self.groups.is_some()
    }

    /// The ranges of group `i` (`i < count()`) of a grouped split; the whole range list of
    /// another.
    pub fn group(&self, i: usize) -> &[Range] {
        let list = self.ranges.as_slice();
        match &self.groups {
            Some(g) => &list[g[i]..g.get(i + 1).copied().unwrap_or(list.len())],
            None => list,
        }
    }

    /// The ranges split.
    pub fn ranges(&self) -> &Ranges {
        &self.ranges
    }

    /// Number of tasks (0 for an empty request).
    pub fn count(&self) -> usize {
        self.count
    }

    /// Task `i` (`i < count()`).
    pub fn task(&self, i: usize) -> Task {
        if self.groups.is_some() {
            // A group as one task: where its first range starts, and all its bytes.
            let g = self.group(i);
            return Task {
                file_offset: g.first().map_or(0, |r| r.file_offset),
                buf_offset: g.first().map_or(0, |r| r.buf_offset),
                len: g.iter().map(|r| r.len).sum(),
            };
        }
        let (range, j) = match (&self.ranges, &self.starts) {
            (Ranges::Many(v), Some(starts)) => {
                // The last range starting at or before `i` (ranges of no task start where the
                // next one does, and are passed over).
                let k = starts.partition_point(|&s| s <= i) - 1;
                (v[k], i - starts[k])
            }
            (Ranges::One(r), _) => (*r, i),
            (Ranges::Many(v), None) => (v[0], i),
        };
        let at = j * self.task_size;
        Task {
            file_offset: range.file_offset + at as u64,
            buf_offset: range.buf_offset + at,
            len: self.task_size.min(range.len - at),
        }
    }

    /// The size of the tasks but the last of each range.
    pub fn task_size(&self) -> usize {
        self.task_size
    }
}

/// Every task of `size` bytes at `file_offset` (see [`TaskSplit`]). `size` 0 gives no task.
#[cfg(test)]
pub fn split(file_offset: u64, size: usize, task_size: usize) -> impl Iterator<Item = Task> {
    let s = TaskSplit::new(file_offset, size, task_size);
    (0..s.count()).map(move |i| s.task(i))
}

/// Where each group of [`TaskSplit::grouped`] starts in `list`, found by reading it: a group
/// ends before the range that would make it `max_ranges` ranges or (a range moving bytes) more
/// than `max_bytes` bytes.
pub(super) fn group_starts(list: &[Range], max_ranges: usize, max_bytes: usize) -> Vec<usize> {
    let mut starts = Vec::with_capacity(list.len().div_ceil(max_ranges));
    let (mut n, mut bytes) = (0usize, 0usize);
    for (i, r) in list.iter().enumerate() {
        if i == 0 || n == max_ranges || (r.len > 0 && bytes + r.len > max_bytes) {
            starts.push(i);
            (n, bytes) = (0, 0);
        }
        n += 1;
        bytes += r.len;
    }
    starts
}
