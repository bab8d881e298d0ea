//! The settings table: every setting declared once (its field, default, name, kind, bounds and
//! environment variables), and what the declaration makes of it: [`Settings`], [`Name`],
//! [`Kind`] and [`Bounds`].
//!
//! How to add a setting: one entry in the `settings!` invocation below; everything else (the
//! getters, `gpufile config`, the environment variables, validation) follows from it.

use std::fmt;
use std::str::FromStr;

use super::{CompatMode, Origin, RemoteIoBackend, RemoteReactorDispatch, Value};
use crate::error::{Error, Result};

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
            pub(super) fn default_origin(self) -> Origin {
                match self { $(Name::$variant => default_origin!($($how)?),)* }
            }
        }

        impl Settings {
            /// The current value of one setting.
            pub fn get(&self, name: Name) -> Value {
                match name { $(Name::$variant => self.$field.to_value(),)* }
            }

            /// Stores a value produced by [`validate`](super::validate) for the same name.
            pub(super) fn put(&mut self, name: Name, value: Value) {
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
    /// pages in the page cache). See `crate::exec::dma`.
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
    /// Reactor threads of KvikIO's `MULTI_POLL` backend (default 1). gpufile has no reactor
    /// threads: accepted and kept, with KvikIO's rules ([`Name::fixed_once_remote_io_starts`]),
    /// and changes nothing.
    remote_io_num_reactors / RemoteIoNumReactors: usize = 1;
        kind Count(1, u32::MAX as u64, "reactor threads; KvikIO's unsigned int");
        env ["REMOTE_IO_NUM_REACTORS"];
    /// How KvikIO's `MULTI_POLL` backend spreads one read over its reactors (see
    /// `RemoteReactorDispatch`); accepted and kept as `remote_io_num_reactors` is.
    remote_io_reactor_dispatch / RemoteIoReactorDispatch: RemoteReactorDispatch =
        RemoteReactorDispatch::PerChunk;
        kind RemoteReactorDispatch;
        env ["REMOTE_IO_REACTOR_DISPATCH"];
    /// Most remote requests KvikIO's `MULTI_POLL` backend keeps in flight (default 256; 0: no
    /// limit); accepted and kept as `remote_io_num_reactors` is. gpufile's remote requests run
    /// one per worker thread, so `num_threads` bounds them per request, as KvikIO's
    /// `EASY_THREADPOOL` is bounded.
    remote_io_max_concurrent_requests / RemoteIoMaxConcurrentRequests: usize = 256;
        kind Count(0, MAX_SIZE, "requests; 0: no limit");
        env ["REMOTE_IO_MAX_CONCURRENT_REQUESTS"];
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
    /// Most bytes of GPU memory one `async_save` snapshots its GPU tensors in, per call
    /// (gpufile's addition; default 8 GiB: one rank's shard of most checkpoints, a tenth of an
    /// 80 GB GPU). A snapshot also never takes more than half the memory the driver reports
    /// free on each GPU, so the training step that follows keeps room; where either bound
    /// refuses, or the allocation fails, the tensors go to pinned host memory instead. 0: never.
    async_save_device_limit / AsyncSaveDeviceLimit: usize = 8 << 30;
        kind Size(0, MAX_SIZE, LARGEST_OFFSET);
        env ["ASYNC_SAVE_DEVICE_LIMIT"];
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
    /// A count (at least 1, or 0 where its bounds allow it).
    Count,
    /// A byte size (at least 1); text may carry a unit ([`parse_size`](super::parse_size)): 4MiB, 16k, 1GB.
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
    /// A `RemoteReactorDispatch`.
    RemoteReactorDispatch,
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

impl Field for RemoteReactorDispatch {
    fn to_value(&self) -> Value {
        Value::RemoteReactorDispatch(*self)
    }
    fn from_value(value: Value) -> std::result::Result<Self, Value> {
        match value {
            Value::RemoteReactorDispatch(d) => Ok(d),
            other => Err(other),
        }
    }
}

impl Name {
    /// The settings KvikIO fixes for the rest of the process once its `MULTI_POLL` reactor pool
    /// starts (the first remote read under that backend): they cannot be changed then, so they
    /// have no value to restore, and Python's `defaults.set` takes them one at a time, never in
    /// a dict or a `with` block.
    pub const FIXED_ONCE_REMOTE_IO_STARTS: [Name; 3] = [
        Name::RemoteIoNumReactors,
        Name::RemoteIoReactorDispatch,
        Name::RemoteIoMaxConcurrentRequests,
    ];

    /// Whether this setting is one of [`Name::FIXED_ONCE_REMOTE_IO_STARTS`].
    pub fn fixed_once_remote_io_starts(self) -> bool {
        Name::FIXED_ONCE_REMOTE_IO_STARTS.contains(&self)
    }

    /// Every environment variable that sets this setting, in precedence order.
    pub fn env_vars(self) -> Vec<String> {
        ENV_PREFIXES
            .iter()
            .flat_map(|p| self.env_suffixes().iter().map(move |s| format!("{p}{s}")))
            .collect()
    }

    pub(super) fn index(self) -> usize {
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
