//! gpufile: move file data into and out of GPU and host memory as fast as the machine allows,
//! and say which data path ran and why.
//!
//! How to use (host memory; no CUDA library is loaded for it):
//! 1. Optionally change settings with [`config::set`] (or `KVIKIO_*` / `GPUFILE_*` variables).
//! 2. Open a file with [`FileHandle::open`] and KvikIO's flags.
//! 3. [`FileHandle::read`] / [`FileHandle::write`] split the request into `task_size` tasks over
//!    `num_threads` workers; [`FileHandle::io_path`] tells the path and the reason.
//!
//! ```no_run
//! let f = gpufile::FileHandle::open("data.bin", "r")?;
//! let mut buf = vec![0u8; f.size()? as usize];
//! let n = f.read(&mut buf, 0, None)?;
//! assert_eq!(n, buf.len());
//! # Ok::<(), gpufile::Error>(())
//! ```

pub mod config;
pub mod cuda;
pub mod cufile;
mod device;
pub mod error;
pub mod explain;
pub mod file;
pub mod observe;
pub mod pagecache;
pub mod plan;
pub mod platform;
pub mod pool;
pub mod posix;
pub mod source;

pub use config::{CompatMode, Settings};
pub use device::{free_bounce_buffers, pooled_bounce_bytes};
pub use error::{Error, RemoteFailure, Result};
pub use file::{FileHandle, OpenMode};
pub use plan::{Backend, IoPath, Memory, Reason};
pub use pool::IoFuture;

/// gpufile's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
