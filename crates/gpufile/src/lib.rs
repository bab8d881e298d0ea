//! gpufile: move file data into and out of GPU and host memory as fast as the machine allows,
//! and say which data path ran and why.
//!
//! How to use (host memory needs no CUDA library; GPU memory needs the CUDA driver):
//! 1. Open a file with [`FileHandle::open`] and KvikIO's flags (`"r"`, `"w"`, `"r+"`, `"a"`).
//! 2. [`FileHandle::read`] / [`FileHandle::write`] move host bytes, split into `task_size`
//!    tasks over `num_threads` workers. Anything else is a [`Request`] given to
//!    [`Engine::submit`] on [`Engine::global`]: host or GPU memory ([`Buffer`]), one range or
//!    many ([`Ranges`]: [`Ranges::from_arrays`] for arbitrary ranges, [`Ranges::rows`] for
//!    fixed-size rows), on a file ([`FileHandle::endpoint`]) or any [`source::Source`].
//! 3. The path report: [`FileHandle::io_path`] says which path a read would take and why
//!    ([`IoPath`]: [`Backend`] and [`Reason`]); [`Engine::submit_reported`] returns what the
//!    plan of a submitted request decided ([`PathReport`]); [`observe`] counts what ran.
//! 4. Checkpoints: [`safetensors`] saves tensors as a file or a sharded Hugging Face
//!    checkpoint and loads a checkpoint's tensors in one batch over all of its files.
//! 5. Settings: the process defaults come from `KVIKIO_*` / `GPUFILE_*` variables;
//!    [`Engine::set`] changes them, [`Engine::settings`] gives a [`Settings`] to change per
//!    request.
//!
//! ```
//! use gpufile::{Buffer, Direction, Engine, FileHandle, Memory, Ranges, Request};
//!
//! let path = std::env::temp_dir().join(format!("gpufile-doc-{}.bin", std::process::id()));
//! let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
//! std::fs::write(&path, &data)?;
//!
//! // 1-2. Open and read the whole file into host memory.
//! let f = FileHandle::open(&path, "r")?;
//! let mut buf = vec![0u8; f.size()? as usize];
//! assert_eq!(f.read(&mut buf, 0, None)?, data.len());
//! assert_eq!(buf, data);
//!
//! // 3. Which path a read of this size into host memory takes, and why.
//! let engine = Engine::global()?;
//! let settings = engine.settings();
//! let io_path = f.io_path(Memory::Host, buf.len(), &settings)?;
//! println!("{io_path}"); // the backend, and the reason in words
//!
//! // Rows 3, 0 and 7 of 512-byte rows, packed into one buffer: one request.
//! let ranges = Ranges::rows(&[3, 0, 7], 512, 512, 0)?;
//! let mut rows = vec![0u8; 3 * 512];
//! let req = Request::read_ranges(Buffer::host(&mut rows), ranges);
//! // SAFETY: `rows` stays valid, and untouched by anyone else, until `wait` returns.
//! let (done, report) =
//!     unsafe { engine.submit_reported(&f.endpoint(Direction::Read), req, &settings) }?;
//! done.wait()?;
//! assert_eq!(&rows[..512], &data[3 * 512..4 * 512]);
//! assert_eq!(report.ranges, 3);
//! println!("{} ({} tasks)", report.path, report.tasks);
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Into GPU memory (needs a CUDA device; [`DeviceBuffer`] is a `cuMemAlloc` allocation, or
//! pass any device pointer as [`Buffer::Device`]):
//!
//! ```no_run
//! use gpufile::{Buffer, Direction, Engine, FileHandle, Request};
//!
//! let f = FileHandle::open("data.bin", "r")?;
//! let len = f.size()? as usize;
//! let dev = gpufile::DeviceBuffer::new(len, 0)?; // device 0
//! let engine = Engine::global()?;
//! let req = Request::read(Buffer::Device { addr: dev.addr(), len }, 0);
//! // SAFETY: `dev` outlives the request, which is waited for before it is dropped.
//! let (done, report) =
//!     unsafe { engine.submit_reported(&f.endpoint(Direction::Read), req, &engine.settings()) }?;
//! assert_eq!(done.wait()?, len);
//! println!("{}", report.path); // cufile (GPUDirect Storage) or gpufile-posix, and why
//! # Ok::<(), gpufile::Error>(())
//! ```
//!
//! What is public is what this page lists (docs/rust.md gives the list and what may change);
//! `__private` holds what gpufile's own crates share and is no API.
//!
//! Layers inside the crate, one direction (a module uses only those before it in this list):
//! `error` → `config`, `cuda` (the result layer and RAII wrappers over `gpufile-sys`), `future`, `streamed` → `request` (uses `cuda`'s pointer facts and `future`'s
//! stop flag), `pool` → `posix` → `plan` (pure decisions) → `pagecache`, `cufile` → `source`
//! (where bytes come from and go to; a source states the KvikIO backend it is observed under,
//! and a local file keeps the notice it comes to have for whoever asked it) → `observe` (what
//! ran: counters, notices, monitors; an observation names its endpoint) → `exec` (one executor
//! per backend) → `engine` (the one request path; it answers planning's questions about the
//! executors, and forwards a file's notice) → `file` (a local file's handle), `stream`
//! (requests queued on an application's CUDA stream), `batch` (many operations as a request per
//! file, buffer and direction) → `publish` (crash-safe new files) → `formats` (safetensors) →
//! the public `safetensors` facade.

// Internals: visible to this crate only. What other crates may use is re-exported below by name
// (the public API) or in `__private` (for gpufile's own front ends, no stability promise).
pub(crate) mod batch;
pub(crate) mod config;
pub(crate) mod cuda;
pub(crate) mod cufile;
pub(crate) mod engine;
pub(crate) mod error;
pub(crate) mod exec;
pub(crate) mod file;
pub(crate) mod formats;
pub(crate) mod future;
pub(crate) mod pagecache;
pub(crate) mod plan;
pub(crate) mod pool;
pub(crate) mod posix;
pub(crate) mod publish;
pub(crate) mod request;
pub(crate) mod stream;
pub(crate) mod streamed;

// The public modules.
pub mod observe;
pub mod safetensors;
pub mod source;

// The public items at the crate's root.
pub use config::{CompatMode, Input, Name, Origin, RemoteIoBackend, Settings, Value};
pub use cuda::{device_count, DeviceBuffer};
pub use engine::{Engine, PathReport};
pub use error::{Error, ErrorKind, Op, Result};
pub use file::{FileHandle, OpenMode};
pub use future::{IoFuture, StopFlag};
pub use plan::{Backend, Dma, HostIo, HostIoBackend, HostIoReason, IoPath, Reason};
pub use request::{Buffer, Direction, Facts, Memory, Range, RangeList, Ranges, Request};

// What gpufile's own crates (the Python binding, the C ABI, the CLI, diagnostics, the remote
// crate) need of the core beyond the public API: hidden from the documentation and outside any
// stability promise, so that the core can change them with its front ends in one commit.
#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

/// gpufile's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

// The README's examples are compiled with the doc tests, so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
