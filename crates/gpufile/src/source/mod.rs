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
//! 4. An [`Endpoint`] is the file side of one request (a source to read or a sink to write),
//!    what [`crate::Engine::submit`] takes: it checks the request's ranges before any byte
//!    moves, and says whether it is a local file (which cuFile and page-cache DMA can serve).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::future::StopFlag;
use crate::request::{Direction, Range, Ranges};
use backend::IoBackend;

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

    /// [`Source::describe`]'s text, borrowed for as long as the source lives, where it holds
    /// it as text (what an observation's `source` points at, so that it outlives the callback).
    fn described(&self) -> Option<&str> {
        None
    }

    /// Size in bytes, as known now (a request past it is refused before any byte moves).
    fn size(&self) -> Result<u64>;

    /// Refuses, before any byte moves, a read of `ranges` that cannot be served: by default,
    /// one that ends past [`Source::size`] ([`Error::UnexpectedEof`]).
    fn check(&self, ranges: &Ranges) -> Result<()> {
        let Some(end) = ranges.file_end() else {
            return Ok(());
        };
        let file_size = self.size()?;
        if let Some(last) = ranges.last_in_file().filter(|_| end > file_size) {
            return Err(Error::UnexpectedEof {
                path: self.describe().into(),
                offset: last.file_offset,
                len: last.len,
                file_size,
            });
        }
        Ok(())
    }

    /// The local file this source is, where it is one: cuFile and page-cache DMA read it.
    fn local_file(self: Arc<Self>) -> Option<Arc<LocalFile>> {
        None
    }

    /// The KvikIO backend its reads are observed under (a local file's: POSIX, or GDS where
    /// cuFile runs them).
    fn io_backend(&self) -> IoBackend {
        IoBackend::Posix
    }

    /// Whether each task costs the source a request of its own to a server (a remote object's
    /// ranged GET: a round trip and the server's fixed cost per request, whatever its size). The
    /// engine then runs a read in tasks of `task_size` as they are, not cut smaller so that idle
    /// workers help: more, smaller requests cost more than the workers gain (a checkpoint's
    /// shards on 16 workers: 2 MiB GETs instead of 16 MiB ones, docs/performance.md, "Object
    /// stores both ways").
    fn request_per_task(&self) -> bool {
        false
    }

    /// Whether the source serves a read best as one request, whatever the task size (a server
    /// that ignores `Range` sends the whole object for each request: one whole-body GET).
    fn one_request(&self) -> bool {
        false
    }

    /// The smallest request worth making (a server's cost is per request): reads run in tasks
    /// of at least this many bytes, or of `task_size` where it is larger.
    fn min_request(&self) -> Option<usize> {
        None
    }

    /// Called by the engine on the submitting thread before a read that its plan splits into
    /// several tasks starts: a source that does not know yet something that changes how it is
    /// best read (whether a server honours `Range`) may learn it now, with one small request
    /// under `call` (whose stop flag is the caller's, so Ctrl-C ends a slow answer). Returns
    /// whether what it states for the plan ([`Source::one_request`] and the rest) may have
    /// changed, so that the engine plans the read again; by default, nothing to learn.
    fn before_split_read(&self, _call: IoContext<'_>) -> Result<bool> {
        Ok(false)
    }

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

/// Bytes to write: a local file, a remote object.
pub trait Sink: Send + Sync {
    /// What is written, for errors and reports.
    fn describe(&self) -> String;

    /// [`Sink::describe`]'s text, borrowed for as long as the sink lives (as
    /// [`Source::described`]).
    fn described(&self) -> Option<&str> {
        None
    }

    /// Writes all of `src` at `offset`, or fails.
    fn write_at(&self, src: &[u8], offset: u64, call: IoContext<'_>) -> Result<()>;

    /// Refuses, before any byte moves, a write of `ranges` that cannot be made (by default,
    /// none is refused).
    fn check(&self, _ranges: &[Range]) -> Result<()> {
        Ok(())
    }

    /// The local file this sink is, where it is one: cuFile writes it.
    fn local_file(self: Arc<Self>) -> Option<Arc<LocalFile>> {
        None
    }

    /// The KvikIO backend its writes are observed under.
    fn io_backend(&self) -> IoBackend {
        IoBackend::Posix
    }

    /// The size of the parts the sink takes its bytes in (an object store's multipart upload):
    /// a write's tasks are then its parts (unless the request names its own task size), and a
    /// part that fits a bounce buffer is copied and sent as one chunk, straight from the buffer.
    fn part_size(&self) -> Option<usize> {
        None
    }
}

/// The file side of a request.
#[derive(Clone)]
pub enum Endpoint {
    /// A read from this source.
    Read(Arc<dyn Source>),
    /// A write to this sink.
    Write(Arc<dyn Sink>),
}

impl Endpoint {
    /// Which way a request on it moves bytes.
    pub fn direction(&self) -> Direction {
        match self {
            Endpoint::Read(_) => Direction::Read,
            Endpoint::Write(_) => Direction::Write,
        }
    }

    /// The KvikIO backend its requests are observed under.
    pub fn io_backend(&self) -> IoBackend {
        match self {
            Endpoint::Read(s) => s.io_backend(),
            Endpoint::Write(s) => s.io_backend(),
        }
    }

    /// What is read or written, for errors and reports.
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Read(s) => s.describe(),
            Endpoint::Write(s) => s.describe(),
        }
    }

    /// [`Endpoint::describe`]'s text borrowed from the source or sink, where it holds it.
    pub fn described(&self) -> Option<&str> {
        match self {
            Endpoint::Read(s) => s.described(),
            Endpoint::Write(s) => s.described(),
        }
    }

    /// Refuses `ranges` where the source or sink cannot serve them ([`Source::check`],
    /// [`Sink::check`]).
    pub fn check(&self, ranges: &Ranges) -> Result<()> {
        match self {
            Endpoint::Read(s) => s.check(ranges),
            Endpoint::Write(s) => s.check(ranges.as_slice()),
        }
    }

    /// What this side states about itself for the plan ([`crate::plan::Needs`]); `local`:
    /// whether it is a local file ([`Endpoint::local_file`], which the caller has at hand).
    pub fn needs(&self, local: bool) -> crate::plan::Needs {
        let needs = crate::plan::Needs {
            local_file: local,
            ..Default::default()
        };
        match self {
            Endpoint::Read(s) => crate::plan::Needs {
                request_per_task: s.request_per_task(),
                one_request: s.one_request(),
                min_request: s.min_request(),
                ..needs
            },
            Endpoint::Write(s) => crate::plan::Needs {
                part_size: s.part_size(),
                ..needs
            },
        }
    }

    /// The local file on this side, where it is one.
    pub fn local_file(&self) -> Option<Arc<LocalFile>> {
        match self {
            Endpoint::Read(s) => Arc::clone(s).local_file(),
            Endpoint::Write(s) => Arc::clone(s).local_file(),
        }
    }
}

pub(crate) mod backend;
mod local;
pub(crate) use local::reopen;
pub use local::{LocalFile, DIRECT_ALIGN};

mod mmap;
pub use mmap::{MapOptions, MmapSource};
