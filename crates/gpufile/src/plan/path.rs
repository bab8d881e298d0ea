//! The data path of a request: cuFile or gpufile's own, and why (KvikIO's `compat_mode` rules,
//! with AUTO honest about cuFile's compat path).

use std::fmt;

use super::Machine;
use crate::config::CompatMode;
use crate::error::Error;
use crate::request::Memory;

/// The path of a request of `len` bytes (for a gather: its largest range) into or out of
/// `memory` on an endpoint that is a `local_file` or not: the one decision, asking `machine`
/// what cuFile can do, and registering the file, only where the answer matters.
pub fn decide_path(
    memory: Memory,
    len: usize,
    local_file: bool,
    policy: Policy,
    machine: &mut dyn Machine,
) -> Result<IoPath, Error> {
    if memory == Memory::Device && !local_file {
        return Ok(IoPath {
            backend: Backend::GpufilePosix,
            reason: Reason::NotALocalFile,
        });
    }
    let path = choose_path(memory, len, policy, || machine.cufile())?;
    match path.backend {
        Backend::Cufile => after_registration(path, policy, machine.registration()),
        Backend::GpufilePosix => Ok(path),
    }
}

/// What cuFile can do on this machine: the input of compat_mode AUTO and OFF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// cuFile works and its accelerated path exists (the text says which).
    Accelerated(String),
    /// cuFile works but can only run its own compat path (the text says why).
    CompatOnly(String),
    /// cuFile cannot be used at all (the text says why).
    Unavailable(String),
}

/// The data path that moves the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Backend {
    /// gpufile's own pread/pwrite path (through pinned bounce buffers for device memory).
    #[serde(rename = "gpufile-posix")]
    GpufilePosix,
    /// cuFile, which itself runs nvidia-fs (GDS) or its own compat path; the statistics of the
    /// observe module tell which.
    #[serde(rename = "cufile")]
    Cufile,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::GpufilePosix => "gpufile-posix",
            Backend::Cufile => "cufile",
        })
    }
}

/// Why a path was chosen.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "kebab-case")]
pub enum Reason {
    /// Host buffers never go through cuFile: it would stage them through its own bounce buffers
    /// and gain nothing.
    HostBuffer,
    /// compat_mode is ON: cuFile is never used.
    CompatModeOn,
    /// The request is smaller than gds_threshold.
    BelowGdsThreshold,
    /// compat_mode is OFF: cuFile is used whatever it then does; the text says what it will do.
    CompatModeOff(String),
    /// AUTO chose cuFile: its accelerated path exists (the text says which).
    Accelerated(String),
    /// AUTO chose gpufile's path: cuFile could only run its compat path, an order of magnitude
    /// slower (the text says why).
    NotAccelerated(String),
    /// AUTO chose gpufile's path: cuFile cannot be used (the text says why).
    CufileUnavailable(String),
    /// The source or sink is not a local file (a mapping, a remote object): only gpufile's path
    /// moves its bytes, whatever compat_mode says.
    NotALocalFile,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::HostBuffer => f.write_str("host buffer: cuFile gains nothing for host memory"),
            Reason::CompatModeOn => f.write_str("compat_mode is ON"),
            Reason::BelowGdsThreshold => f.write_str("request smaller than gds_threshold"),
            Reason::CompatModeOff(what) => write!(f, "compat_mode is OFF ({what})"),
            Reason::Accelerated(why) | Reason::NotAccelerated(why) => f.write_str(why),
            Reason::CufileUnavailable(why) => write!(f, "cuFile unavailable: {why}"),
            Reason::NotALocalFile => f.write_str("not a local file: cuFile reads only those"),
        }
    }
}

/// A path decision: the backend and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
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

/// The settings a path decision reads.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// compat_mode.
    pub compat_mode: CompatMode,
    /// gds_threshold.
    pub gds_threshold: usize,
    /// require_gds: a device request that would not run on the accelerated path is an error.
    pub require_gds: bool,
}

impl From<&crate::Settings> for Policy {
    fn from(s: &crate::Settings) -> Self {
        Policy {
            compat_mode: s.compat_mode,
            gds_threshold: s.gds_threshold,
            require_gds: s.require_gds,
        }
    }
}

/// Chooses the path for a request of `len` bytes into or out of `memory` (KvikIO's rules, with
/// AUTO honest about cuFile's compat path). `cufile` is asked only where the answer matters, so
/// host-only work never loads cuFile. An error is a decision too: OFF and `require_gds` say why
/// they cannot be honoured.
pub fn choose_path(
    memory: Memory,
    len: usize,
    policy: Policy,
    cufile: impl FnOnce() -> Availability,
) -> Result<IoPath, Error> {
    let posix = |reason| IoPath {
        backend: Backend::GpufilePosix,
        reason,
    };
    let cufile_path = |reason| IoPath {
        backend: Backend::Cufile,
        reason,
    };
    let require = |why: String| -> Result<IoPath, Error> {
        Err(Error::CufileUnavailable {
            reason: format!("require_gds is set but GPUDirect Storage cannot run: {why}"),
        })
    };
    match (memory, policy.compat_mode) {
        (Memory::Host, _) => Ok(posix(Reason::HostBuffer)),
        (Memory::Device, _) if policy.require_gds => match cufile() {
            Availability::Accelerated(why) => Ok(cufile_path(Reason::Accelerated(why))),
            Availability::CompatOnly(why) | Availability::Unavailable(why) => require(why),
        },
        (Memory::Device, CompatMode::On) => Ok(posix(Reason::CompatModeOn)),
        (Memory::Device, _) if len < policy.gds_threshold => Ok(posix(Reason::BelowGdsThreshold)),
        (Memory::Device, CompatMode::Off) => match cufile() {
            Availability::Accelerated(why) => Ok(cufile_path(Reason::CompatModeOff(format!(
                "cuFile will use its accelerated path: {why}"
            )))),
            Availability::CompatOnly(why) => Ok(cufile_path(Reason::CompatModeOff(format!(
                "cuFile can only run its compat path: {why}"
            )))),
            Availability::Unavailable(why) => Err(Error::CufileUnavailable {
                reason: format!("compat_mode is OFF but {why}"),
            }),
        },
        (Memory::Device, CompatMode::Auto) => Ok(match cufile() {
            Availability::Accelerated(why) => cufile_path(Reason::Accelerated(why)),
            Availability::CompatOnly(why) => posix(Reason::NotAccelerated(why)),
            Availability::Unavailable(why) => posix(Reason::CufileUnavailable(why)),
        }),
    }
}

/// The second half of the decision, once cuFile was chosen: `registration` is whether cuFile
/// registered the file (or why not). Under AUTO (without `require_gds`) a refusal falls back to
/// gpufile's path with the reason; under OFF and `require_gds` it is an error.
pub fn after_registration(
    path: IoPath,
    policy: Policy,
    registration: Result<(), String>,
) -> Result<IoPath, Error> {
    match registration {
        Ok(()) => Ok(path),
        Err(why) if policy.compat_mode == CompatMode::Auto && !policy.require_gds => Ok(IoPath {
            backend: Backend::GpufilePosix,
            reason: Reason::CufileUnavailable(why),
        }),
        Err(why) => Err(Error::CufileUnavailable {
            reason: format!("compat_mode is {} but {why}", policy.compat_mode),
        }),
    }
}
