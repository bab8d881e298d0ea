//! The planner: pure functions from a request to its tasks and to the data path each one takes.
//!
//! Execution and `gpufile explain` share these functions, so what explain predicts is what runs.

use std::fmt;

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

/// Splits `size` bytes at `file_offset` into tasks of at most `task_size` bytes (KvikIO's split:
/// every task is `task_size` long except possibly the last). `size` 0 gives no task.
///
/// # Panics
/// If `task_size` is 0; settings and argument checks reject that before any plan is made.
pub fn split(file_offset: u64, size: usize, task_size: usize) -> impl Iterator<Item = Task> {
    assert!(task_size > 0, "task_size must be positive");
    (0..size).step_by(task_size).map(move |buf_offset| Task {
        file_offset: file_offset + buf_offset as u64,
        buf_offset,
        len: task_size.min(size - buf_offset),
    })
}

/// Where the caller's buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Memory {
    /// Ordinary (pageable or pinned) host memory.
    Host,
}

/// The data path that moves the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Backend {
    /// gpufile's own pread/pwrite path.
    #[serde(rename = "gpufile-posix")]
    GpufilePosix,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::GpufilePosix => "gpufile-posix",
        })
    }
}

/// Why a path was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// Host buffers never go through cuFile: it would stage them through its own bounce buffers
    /// and gain nothing.
    HostBuffer,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::HostBuffer => "host buffer: cuFile gains nothing for host memory",
        })
    }
}

/// A path decision: the backend and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IoPath {
    /// What moves the bytes.
    pub backend: Backend,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for IoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.backend, self.reason)
    }
}

/// Chooses the path for a request into or out of `memory`.
pub fn choose_path(memory: Memory) -> IoPath {
    match memory {
        Memory::Host => IoPath {
            backend: Backend::GpufilePosix,
            reason: Reason::HostBuffer,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_gib_in_4mib_tasks_is_256_tasks() {
        let tasks: Vec<_> = split(0, 1 << 30, 4 << 20).collect();
        assert_eq!(tasks.len(), 256);
        assert!(tasks.iter().all(|t| t.len == 4 << 20));
    }

    #[test]
    fn last_task_is_the_remainder() {
        let tasks: Vec<_> = split(10, 1000, 199).collect();
        assert_eq!(tasks.len(), 6);
        assert_eq!(
            tasks[5],
            Task {
                file_offset: 10 + 995,
                buf_offset: 995,
                len: 5
            }
        );
        assert_eq!(split(0, 0, 199).count(), 0);
    }

    proptest! {
        #[test]
        fn tasks_cover_the_request_exactly_once(
            off in 0u64..(1 << 40), size in 0usize..(1 << 24), task in 1usize..(1 << 22)
        ) {
            let mut next = 0usize;
            for t in split(off, size, task) {
                prop_assert_eq!(t.buf_offset, next);
                prop_assert_eq!(t.file_offset, off + t.buf_offset as u64);
                prop_assert!(t.len > 0 && t.len <= task);
                next += t.len;
            }
            prop_assert_eq!(next, size);
        }
    }
}
