//! Settings: KvikIO's names, defaults and environment variables, plus where each value came from.
//!
//! How to use:
//! 1. [`Engine::settings`](crate::Engine::settings) gives a snapshot of the process-wide
//!    settings (read from the environment on first use; a variable that does not parse is an
//!    [`Error::InvalidEnv`] naming it).
//! 2. [`Settings::get`] / [`Engine::set`](crate::Engine::set) read and change single settings
//!    by name, as `kvikio.defaults` does.
//! 3. [`Engine::report`](crate::Engine::report) lists every setting with its value and origin,
//!    for `gpufile config`.
//!
//! Environment: `KVIKIO_<NAME>` is honoured so that KvikIO's documented commands work as written;
//! `GPUFILE_<NAME>` of the same suffix wins over it.

use std::ffi::OsString;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use crate::error::{Error, Result};

mod unknown_env;
pub use unknown_env::{take_unknown_env_warnings, unknown_env_vars, UnknownEnvVar, OTHER_ENV_VARS};

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

const COMPAT_MODE_WORDS: &str = "on/off/auto (also true/false, yes/no, 1/0; any case)";

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

const REMOTE_IO_BACKEND_WORDS: &str = "EASY_THREADPOOL=0 or MULTI_POLL=1 (names in any case)";

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

/// Declares every setting once, and from that one entry makes everything a setting needs: its
/// field of [`Settings`] (with its doc), its default, its [`Name`] and the name `defaults.get`
/// takes, its [`Kind`], the range of an integer setting ([`Bounds`]), its environment variables
/// and where its default comes from ([`Origin`]).
///
/// An entry: `field / Variant: type = default [, machine how]; kind Kind [(min, max, why)];
/// env ["SUFFIX", ...]`. `machine how` marks a default chosen from the machine, `how` saying
/// how; the suffixes, most preferred first, follow each of [`ENV_PREFIXES`].
macro_rules! settings {
    ($(
        $(#[$doc:meta])*
        $field:ident / $variant:ident: $ty:ty = $default:expr $(, machine $how:expr)?;
            kind $kind:ident $(($min:expr, $max:expr, $why:expr))?;
            env [$($suffix:literal),+];
    )*) => {
        /// The settings, as one value.
        #[derive(Clone, Debug, PartialEq, serde::Serialize)]
        pub struct Settings {
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Default for Settings {
            /// KvikIO's documented defaults, except `num_threads` (KvikIO: 1), which gpufile
            /// chooses from the machine.
            fn default() -> Self {
                Settings { $($field: $default,)* }
            }
        }

        /// A setting's name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Name {
            $(#[doc = concat!("`", stringify!($field), "`")] $variant,)*
        }

        const COUNT: usize = [$(stringify!($field)),*].len();

        impl Name {
            /// Every setting, in the order `gpufile config` prints them.
            pub const ALL: [Name; COUNT] = [$(Name::$variant),*];

            /// The name used by `defaults.get` / `defaults.set`.
            pub fn as_str(self) -> &'static str {
                match self { $(Name::$variant => stringify!($field),)* }
            }

            /// The kind of value the setting holds.
            pub fn kind(self) -> Kind {
                match self { $(Name::$variant => Kind::$kind,)* }
            }

            /// The range of an integer setting (counts, sizes, seconds); `None` for other kinds.
            pub fn bounds(self) -> Option<Bounds> {
                match self { $(Name::$variant => bounds!($($min, $max, $why)?),)* }
            }

            /// Environment variable suffixes, most preferred first (`KVIKIO_NTHREADS` has an
            /// alias).
            pub fn env_suffixes(self) -> &'static [&'static str] {
                match self { $(Name::$variant => &[$($suffix),+],)* }
            }

            /// Where the value comes from before the environment or a program sets it.
            fn default_origin(self) -> Origin {
                match self { $(Name::$variant => default_origin!($($how)?),)* }
            }
        }

        impl Settings {
            /// The current value of one setting.
            pub fn get(&self, name: Name) -> Value {
                match name { $(Name::$variant => self.$field.to_value(),)* }
            }

            /// Stores a value produced by [`validate`] for the same name.
            fn put(&mut self, name: Name, value: Value) {
                // `validate` guarantees the variant and range for each name; sizes fit usize.
                match name {
                    $(Name::$variant => match <$ty as Field>::from_value(value) {
                        Ok(v) => self.$field = v,
                        Err(value) => unreachable!("validate() gave {value:?} for {name}"),
                    },)*
                }
            }
        }
    };
}

/// A table entry's bounds: `(min, max, why)`, or none.
macro_rules! bounds {
    () => {
        None
    };
    ($min:expr, $max:expr, $why:expr) => {
        Some(Bounds {
            min: $min,
            max: $max,
            why: $why,
        })
    };
}

/// A table entry's default origin: KvikIO's default, or chosen from the machine (`how`).
macro_rules! default_origin {
    () => {
        Origin::Default
    };
    ($how:expr) => {
        Origin::Machine($how)
    };
}

/// The unit of a byte size whose largest value is [`MAX_SIZE`].
const LARGEST_OFFSET: &str = "bytes; the largest file offset";

settings! {
    /// See [`CompatMode`].
    compat_mode / CompatMode: CompatMode = CompatMode::Auto;
        kind CompatMode;
        env ["COMPAT_MODE"];
    /// Worker threads that run the tasks of a request.
    num_threads / NumThreads: usize = default_num_threads().0, machine default_num_threads().1;
        kind Count(1, MAX_THREADS as u64, "threads");
        env ["NTHREADS", "NUM_THREADS"];
    /// Largest piece of a request handed to one worker, in bytes.
    task_size / TaskSize: usize = 4 << 20;
        kind PositiveSize(1, MAX_SIZE, LARGEST_OFFSET);
        env ["TASK_SIZE"];
    /// Device requests smaller than this go through gpufile's POSIX path, in bytes.
    gds_threshold / GdsThreshold: usize = 16 << 10;
        kind Size(0, MAX_SIZE, LARGEST_OFFSET);
        env ["GDS_THRESHOLD"];
    /// Size of each pinned bounce buffer of the POSIX device path, in bytes.
    bounce_buffer_size / BounceBufferSize: usize = 16 << 20;
        kind PositiveSize(1, MAX_BOUNCE_BUFFER_SIZE, "bytes; 1 GiB, as each run pins two");
        env ["BOUNCE_BUFFER_SIZE"];
    /// Let the POSIX path read with O_DIRECT where the file system accepts it.
    auto_direct_io_read / AutoDirectIoRead: bool = false;
        kind Bool;
        env ["AUTO_DIRECT_IO_READ"];
    /// Let the POSIX path write with O_DIRECT where the file system accepts it.
    auto_direct_io_write / AutoDirectIoWrite: bool = true;
        kind Bool;
        env ["AUTO_DIRECT_IO_WRITE"];
    /// Make every device request that would not run on GPUDirect Storage's accelerated path an
    /// error (gpufile's addition; default false).
    require_gds / RequireGds: bool = false;
        kind Bool;
        env ["REQUIRE_GDS"];
    /// Read ranges that are not in the page cache with O_DIRECT (large aligned reads, no
    /// readahead), while cached ranges stay buffered, chosen per chunk with `mincore`
    /// (gpufile's addition; default false: O_DIRECT reads do not fill the page cache, so a
    /// second read of the same data is as slow as the first).
    direct_io_uncached / DirectIoUncached: bool = false;
        kind Bool;
        env ["DIRECT_IO_UNCACHED"];
    /// Let a request of many small ranges (a gather) read and write local files through
    /// io_uring, many ranges per system call, where the kernel allows it (gpufile's addition;
    /// default true; off: one `pread`/`pwrite` per range).
    io_uring / IoUring: bool = true;
        kind Bool;
        env ["IO_URING"];
    /// Most bytes of page cache gpufile keeps registered with CUDA (pinned) so that hot file data
    /// read again goes to the GPU by DMA straight from the page cache, with no CPU copy
    /// (gpufile's addition; default 0: off, because pinned page-cache pages cannot be
    /// invalidated by another process's `O_DIRECT` write to the file, which then leaves stale
    /// pages in the page cache). See [`crate::exec::dma`].
    dma_cache_size / DmaCacheSize: usize = 0;
        kind Size(0, MAX_SIZE, LARGEST_OFFSET);
        env ["DMA_CACHE_SIZE"];
    /// Attempts of each remote request (HTTP(S), S3, WebHDFS: `gpufile-remote`) before it fails
    /// with a retryable status or a timeout; KvikIO's remote retry count.
    http_max_attempts / HttpMaxAttempts: usize = 3;
        kind Count(1, MAX_HTTP_ATTEMPTS, "attempts");
        env ["HTTP_MAX_ATTEMPTS"];
    /// HTTP statuses a remote request retries (KvikIO's list); any other error status fails it.
    http_status_codes / HttpStatusCodes: Vec<u16> = vec![429, 500, 502, 503, 504];
        kind IntList;
        env ["HTTP_STATUS_CODES"];
    /// Seconds each attempt of a remote request may wait for the server (KvikIO's timeout).
    http_timeout / HttpTimeout: u64 = 60;
        kind Seconds(1, MAX_HTTP_TIMEOUT, "seconds; 1 day");
        env ["HTTP_TIMEOUT"];
    /// KvikIO's remote-I/O backend (accepted for compatibility: every value reads the same way,
    /// see [`RemoteIoBackend`]).
    remote_io_backend / RemoteIoBackend: RemoteIoBackend = RemoteIoBackend::EasyThreadpool;
        kind RemoteIoBackend;
        env ["REMOTE_IO_BACKEND"];
    /// Size of each part of an S3 multipart upload but the last, in bytes (gpufile's addition;
    /// default 16 MiB, the bounce buffer's size, so that a part of GPU memory goes out
    /// straight from its pinned buffer). S3's limits bound it: 5 MiB to 5 GiB, and at most
    /// 10,000 parts per object (an object opened with its size raises the part size to fit).
    remote_part_size / RemotePartSize: usize = 16 << 20;
        kind PositiveSize(5 << 20, 5 << 30, "bytes; S3's smallest and largest part");
        env ["REMOTE_PART_SIZE"];
    /// Most bytes of pinned host memory one `async_save` stages its tensors in before it
    /// returns (gpufile's addition; default 32 GiB): a larger save is refused before anything
    /// is copied, rather than pinning more of the machine's memory than meant.
    async_save_pinned_limit / AsyncSavePinnedLimit: usize = 32 << 30;
        kind Size(0, MAX_SIZE, LARGEST_OFFSET);
        env ["ASYNC_SAVE_PINNED_LIMIT"];
}

/// Most worker threads gpufile picks by itself: reads stop scaling at about 16 threads
/// (docs/performance.md, "Default thread count").
pub const MAX_DEFAULT_THREADS: usize = 16;
/// Upper bound on `num_threads`, so a typo cannot ask for a million OS threads.
pub const MAX_THREADS: usize = 1024;

/// Upper bound on the byte sizes `task_size`, `gds_threshold` and `dma_cache_size`: the largest
/// file offset (`i64::MAX`). No request or file is larger, so a larger value means the same, and
/// a value near `u64::MAX` is a typo that would overflow offset arithmetic.
pub const MAX_SIZE: u64 = i64::MAX as u64;
/// Upper bound on `bounce_buffer_size` (1 GiB): every run of a device request on the bounce path
/// pins two buffers of this size in host memory, taken from the whole machine, so a larger value
/// would fail at the first GPU read or pin tens of GiB.
pub const MAX_BOUNCE_BUFFER_SIZE: u64 = 1 << 30;
/// Upper bound on `http_timeout`, in seconds (1 day): HTTP deadlines are `Instant::now() +
/// timeout`, which panics when the sum overflows, and no single range GET needs a day; a day ×
/// `http_max_attempts` stays far inside `Instant`'s range.
pub const MAX_HTTP_TIMEOUT: u64 = 86_400;
/// Upper bound on `http_max_attempts`: past the backoff cap every attempt waits the same, so more
/// attempts only prolong a failure; the bound keeps `http_timeout` × attempts a finite wait.
pub const MAX_HTTP_ATTEMPTS: u64 = 1_000;

/// The range of an integer setting, and why its upper bound is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
    /// The unit, and what the largest value is, in words.
    pub why: &'static str,
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} to {} ({})", self.min, self.max, self.why)
    }
}

/// The machine-chosen thread count and why: one worker per core, capped.
pub fn default_num_threads() -> (usize, String) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = cores.clamp(1, MAX_DEFAULT_THREADS);
    (n, format!("min(cores={cores}, {MAX_DEFAULT_THREADS})"))
}

/// What kind of value a setting holds, which decides how text and numbers are parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A [`CompatMode`].
    CompatMode,
    /// A count (at least 1).
    Count,
    /// A byte size (at least 1); text may carry a unit ([`parse_size`]): 4MiB, 16k, 1GB.
    PositiveSize,
    /// A byte size that may be 0.
    Size,
    /// true/false.
    Bool,
    /// A list of integers (comma separated as text).
    IntList,
    /// Seconds (at least 1).
    Seconds,
    /// A [`RemoteIoBackend`].
    RemoteIoBackend,
}

/// How a field of [`Settings`] is held as a [`Value`] (the table's `get` and `put`).
trait Field: Sized {
    fn to_value(&self) -> Value;
    /// The field's value, or `value` back where it is of another variant.
    fn from_value(value: Value) -> std::result::Result<Self, Value>;
}

impl Field for usize {
    fn to_value(&self) -> Value {
        Value::Int(*self as u64)
    }
    fn from_value(value: Value) -> std::result::Result<Self, Value> {
        match value {
            Value::Int(n) => Ok(n as usize),
            other => Err(other),
        }
    }
}

impl Field for u64 {
    fn to_value(&self) -> Value {
        Value::Int(*self)
    }
    fn from_value(value: Value) -> std::result::Result<Self, Value> {
        match value {
            Value::Int(n) => Ok(n),
            other => Err(other),
        }
    }
}

impl Field for bool {
    fn to_value(&self) -> Value {
        Value::Bool(*self)
    }
    fn from_value(value: Value) -> std::result::Result<Self, Value> {
        match value {
            Value::Bool(b) => Ok(b),
            other => Err(other),
        }
    }
}

impl Field for Vec<u16> {
    fn to_value(&self) -> Value {
        Value::IntList(self.iter().map(|c| u64::from(*c)).collect())
    }
    fn from_value(value: Value) -> std::result::Result<Self, Value> {
        match value {
            Value::IntList(v) => Ok(v.into_iter().map(|c| c as u16).collect()),
            other => Err(other),
        }
    }
}

impl Field for CompatMode {
    fn to_value(&self) -> Value {
        Value::CompatMode(*self)
    }
    fn from_value(value: Value) -> std::result::Result<Self, Value> {
        match value {
            Value::CompatMode(m) => Ok(m),
            other => Err(other),
        }
    }
}

impl Field for RemoteIoBackend {
    fn to_value(&self) -> Value {
        Value::RemoteIoBackend(*self)
    }
    fn from_value(value: Value) -> std::result::Result<Self, Value> {
        match value {
            Value::RemoteIoBackend(b) => Ok(b),
            other => Err(other),
        }
    }
}

impl Name {
    /// Every environment variable that sets this setting, in precedence order.
    pub fn env_vars(self) -> Vec<String> {
        ENV_PREFIXES
            .iter()
            .flat_map(|p| self.env_suffixes().iter().map(move |s| format!("{p}{s}")))
            .collect()
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl FromStr for Name {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Name::ALL
            .into_iter()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| Error::UnknownSetting {
                name: s.to_owned(),
                known: Name::ALL.map(Name::as_str).join(", "),
            })
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `GPUFILE_*` wins over `KVIKIO_*`.
pub const ENV_PREFIXES: [&str; 2] = ["GPUFILE_", "KVIKIO_"];

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
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::CompatMode(m) => write!(f, "{m}"),
            Value::RemoteIoBackend(b) => write!(f, "{b}"),
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

/// Parses a byte size as people type it: `4194304`, `4MiB`, `1.5GiB`, `16k`, `1GB`, `4 MiB`.
///
/// The rule (GNU coreutils' `dd`/`truncate`, and gdsio's and fio's single letters):
/// - a plain integer is bytes (so KvikIO's environment variables keep their meaning);
/// - `KiB MiB GiB TiB PiB` are binary (2^10, 2^20, ...);
/// - `kB KB MB GB TB PB` are decimal (10^3, 10^6, ...): `1GB` is 1,000,000,000 bytes;
/// - a single letter `k K m M g G t T p P` is binary: `16k` is 16,384 bytes, `1G` is 1 GiB;
/// - `B` alone means bytes; letters are case-insensitive; a space may separate number and unit;
/// - a fraction (`1.5GiB`, `0.5k`) must come to a whole number of bytes.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    const HINT: &str = "expected a size such as 4194304, 4MiB, 1.5GiB, 16k or 1GB";
    let t = text.trim();
    let number_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(HINT.into());
    }
    let unit: u128 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "p" | "pib" => 1 << 50,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit {other:?}: use B, KiB/MiB/GiB/TiB (binary), \
                 kB/MB/GB/TB (decimal) or k/M/G/T (binary)"
            ))
        }
    };
    const TOO_LARGE: &str = "size does not fit in 64 bits";
    // Exact: (whole.fraction × unit) in integers, so 1.5GiB is 1610612736 and 0.1GiB an error.
    let digits = format!("{whole}{fraction}");
    if digits.len() > 30 {
        return Err(TOO_LARGE.into());
    }
    let scaled: u128 = digits.parse::<u128>().map_err(|_| HINT.to_string())?;
    let denominator = 10u128.pow(fraction.len() as u32);
    let bytes = scaled.checked_mul(unit).ok_or(TOO_LARGE)?;
    if bytes % denominator != 0 {
        return Err(format!(
            "{t} is not a whole number of bytes ({} and a fraction)",
            bytes / denominator
        ));
    }
    u64::try_from(bytes / denominator).map_err(|_| TOO_LARGE.into())
}

/// An integer setting's value within `bounds`: text is a plain integer, or a size with a unit for
/// sizes ([`parse_size`]). Zero for a positive setting keeps KvikIO's words ("must be a positive
/// integer"); a value past the largest says it is too large (never "negative").
fn bounded_int(kind: Kind, input: &Input<'_>, bounds: Bounds) -> std::result::Result<u64, String> {
    let sizes = matches!(kind, Kind::PositiveSize | Kind::Size);
    let n: i128 = match input {
        Input::Int(n) => *n,
        Input::Text(t) if sizes => match parse_size(t) {
            Ok(n) => i128::from(n),
            Err(e) if e.contains("64 bits") => i128::MAX,
            Err(e) => return Err(e),
        },
        Input::Text(t) => {
            let t = t.trim();
            let digits = t.strip_prefix('-').unwrap_or(t);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("expected an integer from {bounds}"));
            }
            // Past 38 digits the value is past every bound: only its sign matters.
            t.parse::<i128>().unwrap_or(if t.starts_with('-') {
                i128::MIN
            } else {
                i128::MAX
            })
        }
        Input::Bool(_) => return Err("expected an integer, not a bool".into()),
        Input::IntList(_) => return Err("expected an integer, not a list".into()),
    };
    if n < 0 {
        return Err(format!("must not be negative: expected {bounds}"));
    }
    if n == 0 && bounds.min > 0 {
        return Err(format!("must be a positive integer: expected {bounds}"));
    }
    if n < i128::from(bounds.min) {
        return Err(format!("too small: expected {bounds}"));
    }
    if n > i128::from(bounds.max) {
        return Err(format!("too large: expected {bounds}"));
    }
    u64::try_from(n).map_err(|_| format!("too large: expected {bounds}"))
}

fn parse_bool(text: &str) -> std::result::Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => Err("expected true/false (also on/off, yes/no, 1/0)".into()),
    }
}

/// Checks an input against a setting's kind and range; the reason is the error text (for an
/// integer setting it names the accepted range, [`Name::bounds`]).
pub fn validate(name: Name, input: &Input<'_>) -> std::result::Result<Value, String> {
    match name.kind() {
        Kind::CompatMode => compat_mode_from(input).map(Value::CompatMode),
        Kind::RemoteIoBackend => remote_io_backend_from(input).map(Value::RemoteIoBackend),
        Kind::Count | Kind::PositiveSize | Kind::Size | Kind::Seconds => {
            let bounds = name.bounds().ok_or("a setting without bounds")?;
            bounded_int(name.kind(), input, bounds).map(Value::Int)
        }
        Kind::Bool => bool_from(input).map(Value::Bool),
        Kind::IntList => status_codes_from(input).map(Value::IntList),
    }
}

/// A [`CompatMode`]: KvikIO's words, its enum values, or a bool (true is ON).
fn compat_mode_from(input: &Input<'_>) -> std::result::Result<CompatMode, String> {
    match input {
        Input::Text(t) => t.parse(),
        Input::Int(n) => CompatMode::from_value(*n)
            .ok_or_else(|| format!("expected OFF=0, ON=1 or AUTO=2, or {COMPAT_MODE_WORDS}")),
        Input::Bool(b) => Ok(if *b { CompatMode::On } else { CompatMode::Off }),
        Input::IntList(_) => Err("expected a CompatMode, not a list".into()),
    }
}

/// A [`RemoteIoBackend`]: KvikIO's names or enum values.
fn remote_io_backend_from(input: &Input<'_>) -> std::result::Result<RemoteIoBackend, String> {
    match input {
        Input::Text(t) => t.parse(),
        Input::Int(n) => RemoteIoBackend::from_value(*n)
            .ok_or_else(|| format!("expected {REMOTE_IO_BACKEND_WORDS}")),
        Input::Bool(_) | Input::IntList(_) => Err(format!(
            "expected a RemoteIOBackend: {REMOTE_IO_BACKEND_WORDS}"
        )),
    }
}

/// A flag: a bool, 0 or 1, or its words.
fn bool_from(input: &Input<'_>) -> std::result::Result<bool, String> {
    match input {
        Input::Bool(b) => Ok(*b),
        Input::Int(0) => Ok(false),
        Input::Int(1) => Ok(true),
        Input::Int(_) => Err("expected true/false or 1/0".into()),
        Input::Text(t) => parse_bool(t),
        Input::IntList(_) => Err("expected a bool, not a list".into()),
    }
}

/// HTTP status codes (100-599): a list, or comma-separated text.
fn status_codes_from(input: &Input<'_>) -> std::result::Result<Vec<u64>, String> {
    let items: Vec<i128> = match input {
        Input::IntList(v) => v.clone(),
        Input::Text(t) => t
            .split(',')
            .map(|s| s.trim().parse::<i128>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| "expected comma-separated integers such as 429,500,503")?,
        Input::Int(_) | Input::Bool(_) => return Err("expected a list of integers".into()),
    };
    items
        .into_iter()
        .map(|n| match u16::try_from(n) {
            Ok(c) if (100..=599).contains(&c) => Ok(u64::from(c)),
            _ => Err(format!("{n} is not an HTTP status code (100-599)")),
        })
        .collect()
}

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "lowercase")]
pub enum Origin {
    /// KvikIO's default.
    Default,
    /// Chosen from this machine; the text says how.
    Machine(String),
    /// An environment variable (its name).
    Env(String),
    /// Set by the program (`defaults.set`, a CLI flag).
    Set,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::Machine(how) => write!(f, "default: {how}"),
            Origin::Env(var) => write!(f, "env {var}"),
            Origin::Set => f.write_str("set"),
        }
    }
}

/// Settings with the origin of each value.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    /// The values.
    pub settings: Settings,
    origins: Vec<Origin>,
}

impl State {
    /// Defaults overlaid with the environment as seen through `lookup` (a pure function of it, so
    /// tests need not touch the process environment).
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<State> {
        State::from_env_os(|var| lookup(var).map(OsString::from))
    }

    /// As [`State::from_env`], with values as the OS holds them: a value that is not UTF-8 is an
    /// [`Error::InvalidEnv`] naming its variable, never skipped (a lower-priority variable, or
    /// the default, would then win without a word).
    pub fn from_env_os(lookup: impl Fn(&str) -> Option<OsString>) -> Result<State> {
        let mut settings = Settings::default();
        let mut origins: Vec<Origin> = Name::ALL.iter().map(|n| n.default_origin()).collect();
        for name in Name::ALL {
            let Some((var, raw)) = name
                .env_vars()
                .into_iter()
                .find_map(|v| lookup(&v).map(|t| (v, t)))
            else {
                continue;
            };
            let text = raw.into_string().map_err(|raw| Error::InvalidEnv {
                var: var.clone(),
                value: raw.to_string_lossy().into_owned(),
                reason: format!(
                    "not valid UTF-8 (bytes b\"{}\")",
                    raw.as_encoded_bytes().escape_ascii()
                ),
            })?;
            let value =
                validate(name, &Input::Text(&text)).map_err(|reason| Error::InvalidEnv {
                    var: var.clone(),
                    value: text.clone(),
                    reason,
                })?;
            settings.put(name, value);
            origins[name.index()] = Origin::Env(var);
        }
        Ok(State { settings, origins })
    }

    /// Where `name`'s value came from.
    pub fn origin(&self, name: Name) -> &Origin {
        &self.origins[name.index()]
    }

    /// Validates every update first, then applies all of them (all or nothing).
    pub fn set(&mut self, updates: &[(Name, Input<'_>)]) -> Result<()> {
        let mut checked = Vec::with_capacity(updates.len());
        for (name, input) in updates {
            let value = validate(*name, input).map_err(|reason| Error::InvalidSetting {
                name: name.as_str(),
                value: input.to_string(),
                reason,
            })?;
            checked.push((*name, value));
        }
        for (name, value) in checked {
            self.settings.put(name, value);
            self.origins[name.index()] = Origin::Set;
        }
        Ok(())
    }

    /// Puts back values (and origins) captured earlier with [`State::snapshot`].
    pub fn restore(&mut self, saved: &[(Name, Value, Origin)]) {
        for (name, value, origin) in saved {
            self.settings.put(*name, value.clone());
            self.origins[name.index()] = origin.clone();
        }
    }

    /// The value and origin of each named setting, for a later [`State::restore`].
    pub fn snapshot(&self, names: &[Name]) -> Vec<(Name, Value, Origin)> {
        names
            .iter()
            .map(|n| (*n, self.settings.get(*n), self.origin(*n).clone()))
            .collect()
    }
}

impl State {
    /// Defaults overlaid with this process's environment.
    pub fn from_process_env() -> Result<State> {
        State::from_env_os(|v| std::env::var_os(v))
    }
}

/// Whether notices are also printed to stderr: `RUST_LOG` names gpufile, or info/debug level
/// (read once per process).
pub fn log_notices_to_stderr() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("RUST_LOG")
            .is_ok_and(|v| v.contains("gpufile") || v.contains("info") || v.contains("debug"))
    })
}

/// `GPUFILE_CUFILE_PATH`: a file or folder to load libcufile from first (read once).
pub fn cufile_path() -> Option<std::path::PathBuf> {
    std::env::var_os("GPUFILE_CUFILE_PATH").map(Into::into)
}

/// The CA bundle variables, in KvikIO's order: the first one set names a PEM file of trusted
/// certificates (libcurl's and OpenSSL's names, then the AWS SDK's).
pub const CA_BUNDLE_VARS: [&str; 3] = ["CURL_CA_BUNDLE", "SSL_CERT_FILE", "AWS_CA_BUNDLE"];

/// The CA bundle to trust instead of the built-in roots, as `(variable, path)`: the first of
/// [`CA_BUNDLE_VARS`] that is set and not empty, looked up through `lookup`.
pub fn ca_bundle_from(
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Option<(&'static str, std::path::PathBuf)> {
    CA_BUNDLE_VARS.iter().find_map(|var| {
        lookup(var)
            .filter(|v| !v.is_empty())
            .map(|v| (*var, std::path::PathBuf::from(v)))
    })
}

/// [`ca_bundle_from`] over this process's environment (read when a remote client is built).
pub fn ca_bundle() -> Option<(&'static str, std::path::PathBuf)> {
    ca_bundle_from(|v| std::env::var_os(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn remote_io_backend_accepts_kvikio_names_and_values() {
        let s = State::from_env(env(&[])).unwrap();
        assert_eq!(
            s.settings.remote_io_backend,
            RemoteIoBackend::EasyThreadpool
        );
        let s = State::from_env(env(&[("KVIKIO_REMOTE_IO_BACKEND", "  Multi_Poll ")])).unwrap();
        assert_eq!(s.settings.remote_io_backend, RemoteIoBackend::MultiPoll);
        assert_eq!(
            s.origin(Name::RemoteIoBackend),
            &Origin::Env("KVIKIO_REMOTE_IO_BACKEND".into())
        );
        assert_eq!(
            validate(Name::RemoteIoBackend, &Input::Int(0)),
            Ok(Value::RemoteIoBackend(RemoteIoBackend::EasyThreadpool))
        );
        for bad in ["multi", "easy", "multipoll", ""] {
            let err = State::from_env(env(&[("KVIKIO_REMOTE_IO_BACKEND", bad)])).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("KVIKIO_REMOTE_IO_BACKEND"), "{text}");
            assert!(
                text.contains("EASY_THREADPOOL") && text.contains("MULTI_POLL"),
                "{text}"
            );
        }
        let err = validate(Name::RemoteIoBackend, &Input::Int(2)).unwrap_err();
        assert!(err.contains("MULTI_POLL=1"), "{err}");
    }

    #[test]
    fn ca_bundle_follows_kvikio_order_and_skips_empty() {
        let os = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(ca_bundle_from(os(&[])), None);
        assert_eq!(
            ca_bundle_from(os(&[("AWS_CA_BUNDLE", "/a"), ("SSL_CERT_FILE", "/s")])),
            Some(("SSL_CERT_FILE", "/s".into()))
        );
        assert_eq!(
            ca_bundle_from(os(&[("CURL_CA_BUNDLE", ""), ("AWS_CA_BUNDLE", "/a")])),
            Some(("AWS_CA_BUNDLE", "/a".into()))
        );
        assert_eq!(
            ca_bundle_from(os(&[("CURL_CA_BUNDLE", "/c"), ("SSL_CERT_FILE", "/s")])),
            Some(("CURL_CA_BUNDLE", "/c".into()))
        );
    }

    #[test]
    fn defaults_match_kvikio() {
        let s = State::from_env(env(&[])).unwrap();
        assert_eq!(s.settings.compat_mode, CompatMode::Auto);
        assert_eq!(s.settings.gds_threshold, 16384);
        assert_eq!(s.settings.task_size, 4 << 20);
        assert_eq!(s.settings.bounce_buffer_size, 16 << 20);
        assert!(s.settings.num_threads >= 1 && s.settings.num_threads <= MAX_DEFAULT_THREADS);
        assert!(matches!(s.origin(Name::NumThreads), Origin::Machine(_)));
        assert_eq!(s.origin(Name::TaskSize), &Origin::Default);
    }

    #[test]
    fn kvikio_env_names_are_honoured_and_gpufile_wins() {
        let s = State::from_env(env(&[
            ("KVIKIO_COMPAT_MODE", "off"),
            ("KVIKIO_TASK_SIZE", "1048576"),
            ("GPUFILE_TASK_SIZE", "2MiB"),
            ("KVIKIO_NUM_THREADS", "3"),
            ("KVIKIO_GDS_THRESHOLD", "0"),
        ]))
        .unwrap();
        assert_eq!(s.settings.compat_mode, CompatMode::Off);
        assert_eq!(s.settings.task_size, 2 << 20);
        assert_eq!(
            s.origin(Name::TaskSize),
            &Origin::Env("GPUFILE_TASK_SIZE".into())
        );
        assert_eq!(s.settings.num_threads, 3);
        assert_eq!(
            s.origin(Name::NumThreads),
            &Origin::Env("KVIKIO_NUM_THREADS".into())
        );
        assert_eq!(s.settings.gds_threshold, 0);
    }

    #[test]
    fn nthreads_wins_over_its_alias() {
        let s = State::from_env(env(&[
            ("KVIKIO_NTHREADS", "5"),
            ("KVIKIO_NUM_THREADS", "3"),
        ]))
        .unwrap();
        assert_eq!(s.settings.num_threads, 5);
    }

    #[test]
    fn bad_env_value_names_the_variable() {
        for (var, value) in [
            ("KVIKIO_COMPAT_MODE", "maybe"),
            ("KVIKIO_TASK_SIZE", "0"),
            ("KVIKIO_TASK_SIZE", "lots"),
            ("KVIKIO_NTHREADS", "0"),
            ("GPUFILE_AUTO_DIRECT_IO_READ", "perhaps"),
        ] {
            let err = State::from_env(env(&[(var, value)])).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::InvalidEnv { .. }), "{text}");
            assert!(text.contains(var) && text.contains(value), "{text}");
        }
    }

    /// A value that is not UTF-8 is an error naming its variable, even where a lower-priority
    /// variable holds a good value (never skipped, so that one cannot win without a word).
    #[test]
    fn non_utf8_env_value_is_an_error_naming_the_variable() {
        use std::os::unix::ffi::OsStringExt;
        let bad = || OsString::from_vec(b"4\xffMiB".to_vec());
        let lookup = |var: &str| match var {
            "GPUFILE_TASK_SIZE" => Some(bad()),
            "KVIKIO_TASK_SIZE" => Some(OsString::from("1MiB")),
            _ => None,
        };
        let err = State::from_env_os(lookup).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidEnv { .. }), "{text}");
        assert!(text.contains("GPUFILE_TASK_SIZE"), "{text}");
        assert!(
            text.contains("4\\xffMiB") && text.contains("UTF-8"),
            "{text}"
        );
        // The same bytes in a KVIKIO_ variable, alone.
        let err = State::from_env_os(|v| (v == "KVIKIO_NTHREADS").then(bad)).unwrap_err();
        assert!(err.to_string().contains("KVIKIO_NTHREADS"), "{err}");
        // Good UTF-8 still parses through the OS-string lookup.
        let s = State::from_env_os(|v| (v == "KVIKIO_TASK_SIZE").then(|| "2MiB".into())).unwrap();
        assert_eq!(s.settings.task_size, 2 << 20);
    }

    #[test]
    fn compat_mode_spellings() {
        for (text, mode) in [
            ("ON", CompatMode::On),
            ("true", CompatMode::On),
            ("Yes", CompatMode::On),
            ("1", CompatMode::On),
            ("off", CompatMode::Off),
            ("FALSE", CompatMode::Off),
            ("no", CompatMode::Off),
            ("0", CompatMode::Off),
            ("Auto", CompatMode::Auto),
        ] {
            assert_eq!(text.parse::<CompatMode>(), Ok(mode), "{text}");
        }
        assert!("maybe".parse::<CompatMode>().is_err());
        assert!(validate(Name::CompatMode, &Input::Int(7)).is_err());
        assert_eq!(
            validate(Name::CompatMode, &Input::Int(2)),
            Ok(Value::CompatMode(CompatMode::Auto))
        );
    }

    #[test]
    fn set_is_all_or_nothing_and_restore_puts_back() {
        let mut s = State::from_env(env(&[])).unwrap();
        let saved = s.snapshot(&[Name::TaskSize, Name::NumThreads]);
        let err = s
            .set(&[
                (Name::TaskSize, Input::Int(1024)),
                (Name::NumThreads, Input::Int(0)),
            ])
            .unwrap_err();
        assert!(err.to_string().contains("num_threads"), "{err}");
        assert_eq!(
            s.settings.task_size,
            4 << 20,
            "nothing applied when one value is bad"
        );
        s.set(&[
            (Name::TaskSize, Input::Int(1024)),
            (Name::NumThreads, Input::Int(8)),
        ])
        .unwrap();
        assert_eq!((s.settings.task_size, s.settings.num_threads), (1024, 8));
        assert_eq!(s.origin(Name::TaskSize), &Origin::Set);
        s.restore(&saved);
        assert_eq!(s.settings.task_size, 4 << 20);
        assert_eq!(s.origin(Name::TaskSize), &Origin::Default);
    }

    /// The table gives each setting the name, variables, kind, range, default and origin it
    /// had when each was spelled out by hand (what `gpufile config` and `defaults.get` show).
    #[test]
    fn table_gives_every_setting_its_names_kind_range_and_default() {
        let s = State::from_env(env(&[])).unwrap();
        let rows: Vec<String> = Name::ALL
            .iter()
            .map(|n| {
                let origin = match s.origin(*n) {
                    Origin::Machine(_) => "machine".to_owned(),
                    o => o.to_string(),
                };
                let value = match n {
                    Name::NumThreads => "-".to_owned(),
                    _ => s.settings.get(*n).to_string(),
                };
                let bounds = n.bounds().map_or("-".to_owned(), |b| b.to_string());
                let vars = n.env_vars().join(" ");
                format!("{n} [{vars}] {:?} {bounds} = {value} ({origin})", n.kind())
            })
            .collect();
        let expected = [
            "compat_mode [GPUFILE_COMPAT_MODE KVIKIO_COMPAT_MODE] CompatMode - = AUTO (default)",
            "num_threads [GPUFILE_NTHREADS GPUFILE_NUM_THREADS KVIKIO_NTHREADS KVIKIO_NUM_THREADS] \
             Count 1 to 1024 (threads) = - (machine)",
            "task_size [GPUFILE_TASK_SIZE KVIKIO_TASK_SIZE] PositiveSize 1 to 9223372036854775807 \
             (bytes; the largest file offset) = 4194304 (default)",
            "gds_threshold [GPUFILE_GDS_THRESHOLD KVIKIO_GDS_THRESHOLD] Size 0 to \
             9223372036854775807 (bytes; the largest file offset) = 16384 (default)",
            "bounce_buffer_size [GPUFILE_BOUNCE_BUFFER_SIZE KVIKIO_BOUNCE_BUFFER_SIZE] \
             PositiveSize 1 to 1073741824 (bytes; 1 GiB, as each run pins two) = 16777216 \
             (default)",
            "auto_direct_io_read [GPUFILE_AUTO_DIRECT_IO_READ KVIKIO_AUTO_DIRECT_IO_READ] Bool - \
             = false (default)",
            "auto_direct_io_write [GPUFILE_AUTO_DIRECT_IO_WRITE KVIKIO_AUTO_DIRECT_IO_WRITE] Bool \
             - = true (default)",
            "require_gds [GPUFILE_REQUIRE_GDS KVIKIO_REQUIRE_GDS] Bool - = false (default)",
            "direct_io_uncached [GPUFILE_DIRECT_IO_UNCACHED KVIKIO_DIRECT_IO_UNCACHED] Bool - = \
             false (default)",
            "io_uring [GPUFILE_IO_URING KVIKIO_IO_URING] Bool - = true (default)",
            "dma_cache_size [GPUFILE_DMA_CACHE_SIZE KVIKIO_DMA_CACHE_SIZE] Size 0 to \
             9223372036854775807 (bytes; the largest file offset) = 0 (default)",
            "http_max_attempts [GPUFILE_HTTP_MAX_ATTEMPTS KVIKIO_HTTP_MAX_ATTEMPTS] Count 1 to \
             1000 (attempts) = 3 (default)",
            "http_status_codes [GPUFILE_HTTP_STATUS_CODES KVIKIO_HTTP_STATUS_CODES] IntList - = \
             429,500,502,503,504 (default)",
            "http_timeout [GPUFILE_HTTP_TIMEOUT KVIKIO_HTTP_TIMEOUT] Seconds 1 to 86400 (seconds; \
             1 day) = 60 (default)",
            "remote_io_backend [GPUFILE_REMOTE_IO_BACKEND KVIKIO_REMOTE_IO_BACKEND] \
             RemoteIoBackend - = EASY_THREADPOOL (default)",
            "remote_part_size [GPUFILE_REMOTE_PART_SIZE KVIKIO_REMOTE_PART_SIZE] PositiveSize \
             5242880 to 5368709120 (bytes; S3's smallest and largest part) = 16777216 (default)",
            "async_save_pinned_limit [GPUFILE_ASYNC_SAVE_PINNED_LIMIT \
             KVIKIO_ASYNC_SAVE_PINNED_LIMIT] Size 0 to 9223372036854775807 (bytes; the largest \
             file offset) = 34359738368 (default)",
        ];
        assert_eq!(rows, expected);
        // Integer kinds have a range, the others none; every name parses back to itself.
        for n in Name::ALL {
            let integer = matches!(
                n.kind(),
                Kind::Count | Kind::PositiveSize | Kind::Size | Kind::Seconds
            );
            assert_eq!(n.bounds().is_some(), integer, "{n}");
            assert_eq!(n.as_str().parse::<Name>().unwrap(), n);
            assert_eq!(n.index(), Name::ALL.iter().position(|m| *m == n).unwrap());
            // get and put agree for every field.
            let mut t = s.clone();
            t.settings.put(n, s.settings.get(n));
            assert_eq!(t, s, "{n}");
        }
    }

    #[test]
    fn unknown_name_lists_known_ones() {
        let err = "colour".parse::<Name>().unwrap_err();
        assert!(err.to_string().contains("task_size"));
    }

    #[test]
    fn sizes_and_lists() {
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("16k"), Ok(16 << 10));
        assert_eq!(parse_size(" 1G "), Ok(1 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("4kB"), Ok(4000));
        assert_eq!(parse_size("4KB"), Ok(4000));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("4 mib"), Ok(4 << 20));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size(".5k"), Ok(512));
        assert_eq!(parse_size("7b"), Ok(7));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("16EiB").unwrap_err(), "unknown size unit \"eib\": use B, KiB/MiB/GiB/TiB (binary), kB/MB/GB/TB (decimal) or k/M/G/T (binary)");
        assert!(parse_size("0.1GiB")
            .unwrap_err()
            .contains("not a whole number of bytes"));
        assert!(parse_size("1.5").is_err());
        assert!(parse_size("1..5k").is_err());
        assert!(parse_size("1.2.3k").is_err());
        assert!(parse_size(".").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("1e9").is_err());
        assert!(parse_size("16PiB").is_ok());
        assert!(parse_size("16384PiB").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert_eq!(
            validate(Name::HttpStatusCodes, &Input::Text("429, 503")),
            Ok(Value::IntList(vec![429, 503]))
        );
        assert!(validate(Name::HttpStatusCodes, &Input::IntList(vec![42])).is_err());
        assert!(validate(Name::TaskSize, &Input::Int(-1)).is_err());
        assert!(validate(Name::TaskSize, &Input::Bool(true)).is_err());
        assert!(validate(Name::NumThreads, &Input::Int(MAX_THREADS as i128 + 1)).is_err());
    }

    /// Every integer setting refuses a value past its bound at `set` and in the environment,
    /// saying the name, the value and the range; a value too large never reads as negative.
    #[test]
    fn every_integer_setting_is_bounded_at_set_and_in_env() {
        let huge = [
            (Name::HttpTimeout, (1i128 << 63) - 1),
            (Name::HttpTimeout, MAX_HTTP_TIMEOUT as i128 + 1),
            (Name::BounceBufferSize, (1i128 << 64) - 1),
            (Name::BounceBufferSize, MAX_BOUNCE_BUFFER_SIZE as i128 + 1),
            (Name::TaskSize, 1i128 << 70),
            (Name::TaskSize, MAX_SIZE as i128 + 1),
            (Name::GdsThreshold, 1i128 << 64),
            (Name::DmaCacheSize, 1i128 << 64),
            (Name::NumThreads, MAX_THREADS as i128 + 1),
            (Name::HttpMaxAttempts, MAX_HTTP_ATTEMPTS as i128 + 1),
            (Name::HttpMaxAttempts, 1i128 << 64),
        ];
        for (name, n) in huge {
            let max = name.bounds().unwrap().max;
            let mut state = State::from_env(env(&[])).unwrap();
            let before = state.clone();
            let e = state.set(&[(name, Input::Int(n))]).unwrap_err().to_string();
            assert_eq!(state, before, "{name} {n}");
            for part in [name.as_str(), &n.to_string(), "too large", &max.to_string()] {
                assert!(e.contains(part), "{name} = {n}: {e:?} lacks {part:?}");
            }
            assert!(!e.contains("negative"), "{e}");
            // The environment: the same words, naming the variable.
            let var = name.env_vars()[0].clone();
            let e = State::from_env(env(&[(&var, &n.to_string())]))
                .unwrap_err()
                .to_string();
            for part in [var.as_str(), &n.to_string(), "too large", &max.to_string()] {
                assert!(e.contains(part), "{var}={n}: {e:?} lacks {part:?}");
            }
            // The largest value itself is accepted.
            state.set(&[(name, Input::Int(max as i128))]).unwrap();
            assert_eq!(state.settings.get(name), Value::Int(max));
        }
        let e = State::from_env(env(&[("KVIKIO_TASK_SIZE", "16EiB")])).unwrap_err();
        assert!(e.to_string().contains("KVIKIO_TASK_SIZE"), "{e}");
        let e = State::from_env(env(&[("KVIKIO_BOUNCE_BUFFER_SIZE", "2GiB")])).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        let e = State::from_env(env(&[("KVIKIO_HTTP_TIMEOUT", "99999999999999999999999")]))
            .unwrap_err();
        assert!(
            e.to_string().contains("too large: expected 1 to 86400"),
            "{e}"
        );
        let e = validate(Name::TaskSize, &Input::Int(-1)).unwrap_err();
        assert!(e.contains("must not be negative"), "{e}");
    }

    proptest! {
        #[test]
        fn any_positive_size_round_trips_through_env(n in 1u64..(1 << 40)) {
            let text = n.to_string();
            let s = State::from_env(env(&[("KVIKIO_TASK_SIZE", &text)])).unwrap();
            prop_assert_eq!(s.settings.task_size as u64, n);
        }

        #[test]
        fn env_parsing_never_panics(value in "\\PC{0,12}", which in 0usize..Name::ALL.len()) {
            let name = Name::ALL[which];
            let var = name.env_vars()[0].clone();
            match State::from_env(env(&[(&var, &value)])) {
                Ok(s) => prop_assert_eq!(s.origin(name), &Origin::Env(var)),
                Err(e) => prop_assert!(e.to_string().contains(&var)),
            }
        }

        #[test]
        fn size_suffixes_scale(n in 0u64..1024, unit in 0usize..4) {
            let (suffix, shift) = [("", 0), ("KiB", 10), ("MiB", 20), ("GiB", 30)][unit];
            prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n << shift));
        }

        #[test]
        fn decimal_suffixes_and_fractions_are_exact(n in 0u64..1_000_000, unit in 0usize..4) {
            let (suffix, scale) = [("kB", 1_000u64), ("MB", 1_000_000), ("GB", 1_000_000_000), ("k", 1024)][unit];
            prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n * scale));
            // n/1000 of the unit, written as a decimal fraction.
            let text = format!("{}.{:03}{suffix}", n / 1000, n % 1000);
            let exact = (n as u128 * scale as u128) % 1000 == 0;
            prop_assert_eq!(parse_size(&text).is_ok(), exact);
            if exact {
                prop_assert_eq!(parse_size(&text), Ok((n as u128 * scale as u128 / 1000) as u64));
            }
        }

        #[test]
        fn parse_size_never_panics(text in "\\PC{0,24}") {
            let _ = parse_size(&text);
        }
    }
}
