//! gpufile: move file data into and out of GPU and host memory as fast as the machine allows,
//! and say which data path ran and why.
//!
//! How to use (host memory; no CUDA library is loaded for it):
//! 1. Optionally change the process defaults with [`Engine::set`] on [`Engine::global`] (or
//!    `KVIKIO_*` / `GPUFILE_*` variables), or pass settings per request.
//! 2. Open a file with [`FileHandle::open`] and KvikIO's flags.
//! 3. [`FileHandle::read`] / [`FileHandle::write`] split the request into `task_size` tasks over
//!    `num_threads` workers; [`Engine::submit`] takes any [`Request`] (host or GPU memory, one
//!    range or many) on any [`source::Endpoint`] (a file's: [`FileHandle::endpoint`]);
//!    [`FileHandle::io_path`] tells the path and the reason.
//!
//! Layers, one direction (a module uses only those above it in this list): `request`, `error`,
//! `config` → `plan` (pure decisions) → `cuda`, `cufile` (result layer and RAII wrappers over
//! `gpufile-sys`) → `source` (where bytes come from and go to) → `future`, `pool` (generic) →
//! `exec` (one executor per backend) → `observe` → `engine` (the one request path) → `batch`
//! (many operations as a request per file, buffer and direction), `file` (a local file's
//! handle), `stream` (requests queued on an application's CUDA stream).
//!
//! ```no_run
//! let f = gpufile::FileHandle::open("data.bin", "r")?;
//! let mut buf = vec![0u8; f.size()? as usize];
//! let n = f.read(&mut buf, 0, None)?;
//! assert_eq!(n, buf.len());
//! # Ok::<(), gpufile::Error>(())
//! ```

pub mod batch;
pub mod config;
pub mod cuda;
pub mod cufile;
pub mod engine;
pub mod error;
pub mod exec;
pub mod file;
pub mod formats;
pub mod future;
pub mod observe;
pub mod pagecache;
pub mod plan;
pub mod pool;
pub mod posix;
pub mod publish;
pub mod request;
pub mod source;
pub mod stream;
pub mod streamed;

pub use config::{CompatMode, RemoteIoBackend, Settings};
pub use engine::{Engine, PathReport};
pub use error::{Error, ErrorKind, Result};
pub use file::{FileHandle, OpenMode};
pub use future::IoFuture;
pub use plan::{Backend, HostIo, HostIoBackend, HostIoReason, IoPath, Reason};
pub use request::{Buffer, Direction, Memory, Range, Ranges, Request};

/// gpufile's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
