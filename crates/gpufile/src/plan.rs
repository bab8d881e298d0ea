//! The planner: pure functions from a request to its tasks and to the data path each one takes.
//!
//! Execution and `gpufile explain` share these functions, so what explain predicts is what runs.

use std::fmt;

use crate::config::CompatMode;
use crate::error::Error;

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
    /// GPU memory (device or managed).
    Device,
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
    /// compat_mode is ON: cuFile is never used.
    CompatModeOn,
    /// The request is smaller than gds_threshold.
    BelowGdsThreshold,
    /// This build has no cuFile backend yet, so AUTO uses gpufile's own path.
    CufileNotBuilt,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::HostBuffer => "host buffer: cuFile gains nothing for host memory",
            Reason::CompatModeOn => "compat_mode is ON",
            Reason::BelowGdsThreshold => "request smaller than gds_threshold",
            Reason::CufileNotBuilt => "this build has no cuFile backend",
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

/// Chooses the path for a request of `len` bytes into or out of `memory`. An error is a
/// decision too: compat_mode OFF demands cuFile, and says why it cannot be had.
pub fn choose_path(
    memory: Memory,
    len: usize,
    compat_mode: CompatMode,
    gds_threshold: usize,
) -> Result<IoPath, Error> {
    let posix = |reason| {
        Ok(IoPath {
            backend: Backend::GpufilePosix,
            reason,
        })
    };
    match (memory, compat_mode) {
        (Memory::Host, _) => posix(Reason::HostBuffer),
        (Memory::Device, CompatMode::On) => posix(Reason::CompatModeOn),
        (Memory::Device, _) if len < gds_threshold => posix(Reason::BelowGdsThreshold),
        (Memory::Device, CompatMode::Off) => Err(Error::CufileUnavailable {
            reason: "compat_mode is OFF but this build has no cuFile backend \
                     (set compat_mode to AUTO or ON)"
                .into(),
        }),
        (Memory::Device, CompatMode::Auto) => posix(Reason::CufileNotBuilt),
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

    #[test]
    fn path_decisions() {
        let host = choose_path(Memory::Host, 1 << 30, CompatMode::Off, 16384).unwrap();
        assert_eq!(host.reason, Reason::HostBuffer);
        let on = choose_path(Memory::Device, 1 << 30, CompatMode::On, 16384).unwrap();
        assert_eq!(
            (on.backend, on.reason),
            (Backend::GpufilePosix, Reason::CompatModeOn)
        );
        let small = choose_path(Memory::Device, 100, CompatMode::Off, 16384).unwrap();
        assert_eq!(small.reason, Reason::BelowGdsThreshold);
        let off = choose_path(Memory::Device, 1 << 20, CompatMode::Off, 16384).unwrap_err();
        assert!(off.to_string().contains("compat_mode is OFF"), "{off}");
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
