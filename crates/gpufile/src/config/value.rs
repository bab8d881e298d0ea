//! The values settings hold: KvikIO's enums ([`CompatMode`], [`RemoteIoBackend`],
//! [`RemoteReactorDispatch`]) with their spellings, a validated [`Value`], and an [`Input`] as a caller gave it.

use std::fmt;
use std::str::FromStr;

/// Whether gpufile may use cuFile (KvikIO's `CompatMode`, same numeric values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
#[repr(u8)]
pub enum CompatMode {
    /// Use cuFile, or fail saying why it cannot be used.
    Off = 0,
    /// Never use cuFile: gpufile's own POSIX path only.
    On = 1,
    /// Use cuFile only where its accelerated path exists, else gpufile's POSIX path.
    Auto = 2,
}

impl CompatMode {
    /// KvikIO's `.name`: "OFF", "ON" or "AUTO".
    pub fn name(self) -> &'static str {
        match self {
            CompatMode::Off => "OFF",
            CompatMode::On => "ON",
            CompatMode::Auto => "AUTO",
        }
    }

    /// From KvikIO's enum value (OFF=0, ON=1, AUTO=2).
    pub fn from_value(v: i128) -> Option<Self> {
        match v {
            0 => Some(CompatMode::Off),
            1 => Some(CompatMode::On),
            2 => Some(CompatMode::Auto),
            _ => None,
        }
    }
}

impl fmt::Display for CompatMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub(super) const COMPAT_MODE_WORDS: &str = "on/off/auto (also true/false, yes/no, 1/0; any case)";

impl FromStr for CompatMode {
    type Err = String;

    /// Accepts KvikIO's spellings in any case: on/true/yes/1, off/false/no/0, auto.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "true" | "yes" | "1" => Ok(CompatMode::On),
            "off" | "false" | "no" | "0" => Ok(CompatMode::Off),
            "auto" => Ok(CompatMode::Auto),
            _ => Err(format!("expected {COMPAT_MODE_WORDS}")),
        }
    }
}

/// KvikIO's remote-I/O backend choice (`RemoteIOBackend`, same numeric values).
///
/// gpufile has one remote path (blocking HTTP requests, split by `task_size` over the worker
/// threads), so both values are accepted and read the same way: the setting exists so that
/// KvikIO programs and `KVIKIO_REMOTE_IO_BACKEND` keep working.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[repr(u8)]
pub enum RemoteIoBackend {
    /// KvikIO's default: one libcurl easy handle per worker thread.
    EasyThreadpool = 0,
    /// KvikIO's poll-based reactor backend.
    MultiPoll = 1,
}

impl RemoteIoBackend {
    /// KvikIO's `.name`: "EASY_THREADPOOL" or "MULTI_POLL".
    pub fn name(self) -> &'static str {
        match self {
            RemoteIoBackend::EasyThreadpool => "EASY_THREADPOOL",
            RemoteIoBackend::MultiPoll => "MULTI_POLL",
        }
    }

    /// From KvikIO's enum value (EASY_THREADPOOL=0, MULTI_POLL=1).
    pub fn from_value(v: i128) -> Option<Self> {
        match v {
            0 => Some(RemoteIoBackend::EasyThreadpool),
            1 => Some(RemoteIoBackend::MultiPoll),
            _ => None,
        }
    }
}

impl fmt::Display for RemoteIoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub(super) const REMOTE_IO_BACKEND_WORDS: &str =
    "EASY_THREADPOOL=0 or MULTI_POLL=1 (names in any case)";

impl FromStr for RemoteIoBackend {
    type Err = String;

    /// KvikIO's names only, in any case, surrounding spaces ignored (no short aliases).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "easy_threadpool" => Ok(RemoteIoBackend::EasyThreadpool),
            "multi_poll" => Ok(RemoteIoBackend::MultiPoll),
            _ => Err(format!("expected {REMOTE_IO_BACKEND_WORDS}")),
        }
    }
}

/// How KvikIO's `MULTI_POLL` backend spreads the ranges of one read over its reactor threads
/// (`RemoteReactorDispatch`, same numeric values).
///
/// gpufile has no reactor threads (its remote ranges run on its worker threads, as KvikIO's
/// `EASY_THREADPOOL` runs them), so both values are accepted and read the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[repr(u8)]
pub enum RemoteReactorDispatch {
    /// KvikIO's default: ranges go to the reactors round-robin.
    PerChunk = 0,
    /// All ranges of one read go to one reactor (sharing its connections).
    PerPread = 1,
}

impl RemoteReactorDispatch {
    /// KvikIO's `.name`: "PER_CHUNK" or "PER_PREAD".
    pub fn name(self) -> &'static str {
        match self {
            RemoteReactorDispatch::PerChunk => "PER_CHUNK",
            RemoteReactorDispatch::PerPread => "PER_PREAD",
        }
    }

    /// From KvikIO's enum value (PER_CHUNK=0, PER_PREAD=1).
    pub fn from_value(v: i128) -> Option<Self> {
        match v {
            0 => Some(RemoteReactorDispatch::PerChunk),
            1 => Some(RemoteReactorDispatch::PerPread),
            _ => None,
        }
    }
}

impl fmt::Display for RemoteReactorDispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub(super) const REMOTE_REACTOR_DISPATCH_WORDS: &str =
    "PER_CHUNK=0 or PER_PREAD=1 (names in any case)";

impl FromStr for RemoteReactorDispatch {
    type Err = String;

    /// KvikIO's names only, in any case, surrounding spaces ignored.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "per_chunk" => Ok(RemoteReactorDispatch::PerChunk),
            "per_pread" => Ok(RemoteReactorDispatch::PerPread),
            _ => Err(format!("expected {REMOTE_REACTOR_DISPATCH_WORDS}")),
        }
    }
}

/// A validated setting value.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Value {
    /// compat_mode.
    CompatMode(CompatMode),
    /// Counts, sizes and seconds.
    Int(u64),
    /// Flags.
    Bool(bool),
    /// http_status_codes.
    IntList(Vec<u64>),
    /// remote_io_backend.
    RemoteIoBackend(RemoteIoBackend),
    /// remote_io_reactor_dispatch.
    RemoteReactorDispatch(RemoteReactorDispatch),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::CompatMode(m) => write!(f, "{m}"),
            Value::RemoteIoBackend(b) => write!(f, "{b}"),
            Value::RemoteReactorDispatch(d) => write!(f, "{d}"),
            Value::Int(n) => write!(f, "{n}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::IntList(v) => {
                let items: Vec<String> = v.iter().map(u64::to_string).collect();
                f.write_str(&items.join(","))
            }
        }
    }
}

/// A value as a caller gave it, before validation (Python objects map onto these).
#[derive(Clone, Debug)]
pub enum Input<'a> {
    /// Text, as from an environment variable or a Python `str`.
    Text(&'a str),
    /// An integer (Python `int` or `IntEnum`).
    Int(i128),
    /// A Python `bool`.
    Bool(bool),
    /// A sequence of integers.
    IntList(Vec<i128>),
}

impl fmt::Display for Input<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Text(s) => write!(f, "{s:?}"),
            Input::Int(n) => write!(f, "{n}"),
            Input::Bool(b) => write!(f, "{b}"),
            Input::IntList(v) => write!(f, "{v:?}"),
        }
    }
}
