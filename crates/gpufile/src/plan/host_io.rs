//! How a gather moves bytes between host memory and a local file: io_uring or `pread`, and why.

use std::fmt;

/// How a gather moves bytes between host memory (the caller's, or a pinned staging buffer) and
/// a local file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum HostIoBackend {
    /// io_uring: a group's ranges are queued and submitted together, many system calls in one.
    #[serde(rename = "io_uring")]
    IoUring,
    /// One `pread`/`pwrite` per range.
    #[serde(rename = "pread")]
    Pread,
}

impl fmt::Display for HostIoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostIoBackend::IoUring => "io_uring",
            HostIoBackend::Pread => "pread",
        })
    }
}

/// Why a gather's host I/O takes its backend.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "kebab-case")]
pub enum HostIoReason {
    /// io_uring works here (the text says what the probe found).
    Available(String),
    /// The `io_uring` setting is off (`GPUFILE_IO_URING=0`).
    SettingOff,
    /// The kernel has no io_uring (`io_uring_setup` is ENOSYS).
    Missing(String),
    /// The kernel or a seccomp policy refuses io_uring (EPERM, `kernel.io_uring_disabled`).
    Refused(String),
    /// The kernel's io_uring lacks what a gather needs (IORING_OP_READ/WRITE: Linux 5.6).
    OldKernel(String),
    /// The endpoint is not a local file (a mapping, a remote object): it reads and writes
    /// through its own calls.
    NotALocalFile,
    /// Fault injection is on: every transfer goes through the `pread`/`pwrite` seam it hooks.
    FaultInjection,
}

impl fmt::Display for HostIoReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostIoReason::Available(what) => write!(f, "io_uring available ({what})"),
            HostIoReason::SettingOff => f.write_str("io_uring is off (setting io_uring)"),
            HostIoReason::Missing(why) => write!(f, "io_uring missing: {why}"),
            HostIoReason::Refused(why) => write!(f, "io_uring refused: {why}"),
            HostIoReason::OldKernel(why) => write!(f, "io_uring too old: {why}"),
            HostIoReason::NotALocalFile => f.write_str("not a local file"),
            HostIoReason::FaultInjection => f.write_str("fault injection is on"),
        }
    }
}

/// A gather's host I/O decision: the backend and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HostIo {
    /// What moves the bytes.
    pub backend: HostIoBackend,
    /// Why.
    pub reason: HostIoReason,
}

impl fmt::Display for HostIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.backend, self.reason)
    }
}

/// Chooses a gather's host I/O: io_uring where the setting allows it, the endpoint is a local
/// file and `probe` (what the kernel says, asked only where it matters) finds it usable;
/// `pread`/`pwrite` otherwise, with the reason.
pub fn choose_host_io(
    setting: bool,
    local_file: bool,
    probe: impl FnOnce() -> std::result::Result<String, HostIoReason>,
) -> HostIo {
    let pread = |reason| HostIo {
        backend: HostIoBackend::Pread,
        reason,
    };
    match (setting, local_file) {
        (false, _) => pread(HostIoReason::SettingOff),
        (true, false) => pread(HostIoReason::NotALocalFile),
        (true, true) => match probe() {
            Ok(what) => HostIo {
                backend: HostIoBackend::IoUring,
                reason: HostIoReason::Available(what),
            },
            Err(why) => pread(why),
        },
    }
}
