//! What a request is: a direction, a buffer, a file offset and per-request options.
//!
//! How to use:
//! 1. Describe the caller's memory as a [`Buffer`]: [`Buffer::Host`] for ordinary or pinned host
//!    memory, [`Buffer::Device`] for a GPU address (device or managed memory; a pinned host
//!    address given here takes the host path).
//! 2. Build a [`Request`] with its [`Direction`] and file offset ([`Request::read`]), or with a
//!    list of [`Range`]s of one buffer ([`Request::read_ranges`]: a gather of many pieces of a
//!    file into one buffer is one request), and hand it to [`crate::Engine::submit`] with the
//!    endpoint it reads or writes and the settings it should run under.

use std::fmt;

use crate::cuda::{PointerInfo, StreamWait};
use crate::future::StopFlag;

mod ranges;

pub use ranges::{Facts, Range, RangeList, Ranges};

/// Which way the bytes move: the one name for it across gpufile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// File → memory.
    Read,
    /// Memory → file.
    Write,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Read => "read",
            Direction::Write => "write",
        })
    }
}

/// Where the caller's buffer lives: the one name for the kind of memory across gpufile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Memory {
    /// Ordinary (pageable or pinned) host memory.
    Host,
    /// GPU memory (device or managed).
    Device,
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Memory::Host => "host",
            Memory::Device => "device",
        })
    }
}

/// The caller's memory for one request, as raw addresses (the request's `# Safety` contract says
/// how long it must stay valid).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// `len` bytes of host memory at `ptr`.
    Host {
        /// First byte.
        ptr: *mut u8,
        /// Length in bytes.
        len: usize,
    },
    /// `len` bytes of GPU memory at `addr` (a CUDA device pointer).
    Device {
        /// First byte.
        addr: u64,
        /// Length in bytes.
        len: usize,
    },
}

// SAFETY: a `Buffer` only describes memory: nothing dereferences it but the engine's
// executors, reached through `unsafe fn` submissions whose callers guarantee that the memory
// stays valid, and untouched by others, until the request is done, whichever thread runs it.
// Moving or sharing the description between threads is therefore sound.
unsafe impl Send for Buffer {}
// SAFETY: as for Send: shared access only reads the address and length.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Host memory covering `buf` (a read may write it).
    pub fn host(buf: &mut [u8]) -> Self {
        Buffer::Host {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match *self {
            Buffer::Host { len, .. } | Buffer::Device { len, .. } => len,
        }
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The kind of memory the caller said it is.
    pub fn memory(&self) -> Memory {
        match self {
            Buffer::Host { .. } => Memory::Host,
            Buffer::Device { .. } => Memory::Device,
        }
    }
}

/// One read or write.
#[derive(Clone, Debug)]
pub struct Request {
    /// Read or write.
    pub direction: Direction,
    /// The caller's memory.
    pub buffer: Buffer,
    /// What moves: by default one range, the whole buffer at a file offset.
    pub ranges: Ranges,
    /// Largest piece handed to one worker; `None` takes the settings' `task_size`. `raw_read`
    /// and `raw_write` pass the whole length (one task).
    pub task_size: Option<usize>,
    /// What [`crate::cuda::classify`] said of a device buffer's address, when the caller asked
    /// already (a binding that waited on the array's stream): the engine then does not ask the
    /// driver again (one `cuPointerGetAttributes` less per request). `None`: the engine asks.
    pub pointer_info: Option<PointerInfo>,
    /// A stream whose queued work must finish before the request touches its buffer (the
    /// buffer's producer; CUDA Array Interface v3): the engine marks the stream's end when the
    /// request is submitted (an event, recorded on the submitting thread) and each worker waits
    /// for that mark before its run starts, so the submitting thread does not wait. The stream
    /// must be live until the submit returns, not after. `None`: nothing to wait for (or the
    /// caller waited).
    pub after: Option<StreamWait>,
    /// The caller waits for the future at once (a blocking read or write): the plan may run a
    /// small request on the calling thread, or give it a share of the tasks
    /// (`crate::plan::CallerPart`).
    pub caller_waits: bool,
    /// A flag of the caller's that ends the request's preparation early: a source's request
    /// before the plan ([`crate::source::Source::before_split_read`]), which a binding that
    /// hears Ctrl-C on another thread stops by setting it (`None`: nothing stops it but its
    /// own timeouts).
    pub stop: Option<StopFlag>,
}

impl Request {
    /// A read of `buffer.len()` bytes at `file_offset`.
    pub fn read(buffer: Buffer, file_offset: u64) -> Self {
        Self::read_ranges(buffer, Ranges::One(Self::whole(buffer, file_offset)))
    }

    /// A write of `buffer` at `file_offset`.
    pub fn write(buffer: Buffer, file_offset: u64) -> Self {
        Self::write_ranges(buffer, Ranges::One(Self::whole(buffer, file_offset)))
    }

    fn whole(buffer: Buffer, file_offset: u64) -> Range {
        Range {
            file_offset,
            len: buffer.len(),
            buf_offset: 0,
        }
    }

    /// A read of `ranges` into `buffer` (each range's bytes land at its buffer offset).
    pub fn read_ranges(buffer: Buffer, ranges: Ranges) -> Self {
        Request {
            direction: Direction::Read,
            buffer,
            ranges,
            task_size: None,
            pointer_info: None,
            after: None,
            caller_waits: false,
            stop: None,
        }
    }

    /// A write of `ranges` of `buffer` (each range's bytes from its buffer offset).
    pub fn write_ranges(buffer: Buffer, ranges: Ranges) -> Self {
        Request {
            direction: Direction::Write,
            buffer,
            ranges,
            task_size: None,
            pointer_info: None,
            after: None,
            caller_waits: false,
            stop: None,
        }
    }

    /// Bytes the request moves.
    pub fn len(&self) -> usize {
        self.ranges.bytes()
    }

    /// Whether it moves no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same request, its caller waiting for it at once (or not).
    pub fn caller_waits(mut self, waits: bool) -> Self {
        self.caller_waits = waits;
        self
    }

    /// The same request with its own task size.
    pub fn task_size(mut self, task_size: Option<usize>) -> Self {
        self.task_size = task_size;
        self
    }

    /// The same request with the driver's answer for its device buffer's address (which must
    /// come from [`crate::cuda::classify`] of that address, or of an address in the same
    /// allocation, made while the caller held the buffer).
    pub fn pointer_info(mut self, info: Option<PointerInfo>) -> Self {
        self.pointer_info = info;
        self
    }

    /// The same request, its preparation stopped by `stop` ([`Request::stop`]).
    pub fn stop(mut self, stop: Option<StopFlag>) -> Self {
        self.stop = stop;
        self
    }

    /// The same request, made to wait for the work queued on `stream` before it touches its
    /// buffer.
    pub fn after(mut self, stream: Option<StreamWait>) -> Self {
        self.after = stream;
        self
    }
}

/// A raw pointer that crosses to a worker thread. The request's caller keeps the memory valid
/// (the `# Safety` contract of [`crate::Engine::submit`]).
#[derive(Clone, Copy, Debug)]
pub struct SendPtr(pub *mut u8);
// SAFETY: the pointer is only dereferenced by the one task that owns its disjoint range, while the
// caller guarantees the memory outlives the request.
unsafe impl Send for SendPtr {}
// SAFETY: as above: shared between runs, each dereferences only the ranges of its own tasks.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The address `offset` bytes further.
    pub fn at(self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}

/// A request moves to the thread that runs it (the stream launcher, a binding's GIL-free
/// closure) as it is: no wrapper restates the buffer's contract.
const _: () = {
    const fn send<T: Send>() {}
    send::<Request>();
};
