//! Where the bytes of a request come from and go to.
//!
//! How to use:
//! 1. A [`Source`] reads `dst.len()` bytes at an offset into a host slice; a [`Sink`] writes a
//!    host slice at an offset. Both are shared by the workers of one request (`Send + Sync`) and
//!    must be safe to call from several threads at once on disjoint ranges.
//! 2. The executors take a source or a sink and do the rest: split into tasks, run them on the
//!    engine's workers and, for GPU memory, overlap each read into a pinned bounce buffer with the
//!    copy engine's transfer of the previous one. A new kind of source (a local file, a mapping,
//!    HTTP ranges, an object store) is one implementation of this trait, and gets the overlapped
//!    copy to the GPU with nothing else to write.
//! 3. Errors name what was read ([`Source::describe`]: a path or a URL) and the failing range.

use std::sync::atomic::AtomicU64;

use crate::error::Result;
use crate::future::StopFlag;

/// What one call of a source or sink may use beyond the range itself.
#[derive(Clone, Copy, Debug)]
pub struct IoContext<'a> {
    /// Bytes moved so far by the request; a source adds what it moves as it goes (progress bars).
    pub progress: &'a AtomicU64,
    /// The request asked for direct I/O (`auto_direct_io_read`/`_write`): a source that can
    /// bypass its cache for aligned ranges may do so; others ignore it.
    pub direct: bool,
    /// The request asked for direct I/O where the range is not cached (`direct_io_uncached`): a
    /// source that knows its cache reads uncached aligned ranges directly, cached ones through
    /// the cache.
    pub direct_uncached: bool,
    /// Set once the request is cancelled (Ctrl-C) or another of its tasks failed: a source that
    /// can wait long (retries, backoff, a slow server) checks it and returns `Error::Cancelled`.
    pub stop: &'a StopFlag,
}

/// Bytes to read: a local file, a memory mapping, a remote object.
pub trait Source: Send + Sync {
    /// What is read, for errors and reports: a path or a URL.
    fn describe(&self) -> String;

    /// Size in bytes, as known now (a request past it is refused before any byte moves).
    fn size(&self) -> Result<u64>;

    /// Reads exactly `dst.len()` bytes at `offset` into `dst`, or fails; a source that ends early
    /// returns `Error::UnexpectedEof` naming the offset where it ended.
    fn read_at(&self, dst: &mut [u8], offset: u64, call: IoContext<'_>) -> Result<()>;

    /// Reads like [`Source::read_at`] into a buffer that a device reads next (a pinned bounce
    /// buffer): a source may store with instructions that bypass the CPU's caches, so that the
    /// device's reads find the bytes in memory instead of snooping them out of the caches.
    fn read_for_device(&self, dst: &mut [u8], offset: u64, call: IoContext<'_>) -> Result<()> {
        self.read_at(dst, offset, call)
    }
}

/// Bytes to write: a local file (later, other destinations).
pub trait Sink: Send + Sync {
    /// What is written, for errors and reports.
    fn describe(&self) -> String;

    /// Writes all of `src` at `offset`, or fails.
    fn write_at(&self, src: &[u8], offset: u64, call: IoContext<'_>) -> Result<()>;
}

mod local;
pub(crate) use local::reopen;
pub use local::{LocalFile, DIRECT_ALIGN};

mod mmap;
pub use mmap::{MapOptions, MmapSource};
