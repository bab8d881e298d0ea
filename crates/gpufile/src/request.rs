//! What a request is: a direction, a buffer, a file offset and per-request options.
//!
//! How to use:
//! 1. Describe the caller's memory as a [`Buffer`]: [`Buffer::Host`] for ordinary or pinned host
//!    memory, [`Buffer::Device`] for a GPU address (device or managed memory; a pinned host
//!    address given here takes the host path).
//! 2. Build a [`Request`] with its [`Direction`] and file offset, and hand it to
//!    [`crate::Engine::submit`] (or [`crate::FileHandle::submit`], which uses the process engine)
//!    with the settings it should run under.

use crate::cuda::{PointerInfo, StreamWait};
use std::fmt;

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

/// One range of a request: `len` bytes at `file_offset` in the file and at `buf_offset` in the
/// caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Offset in the file.
    pub file_offset: u64,
    /// Bytes.
    pub len: usize,
    /// Offset in the caller's buffer.
    pub buf_offset: usize,
}

impl Range {
    /// The file offset just past the range (saturating: an offset past the largest file is
    /// refused before any range is checked against a file).
    pub fn end(&self) -> u64 {
        self.file_offset.saturating_add(self.len as u64)
    }
}

/// One read or write.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// Read or write.
    pub direction: Direction,
    /// The caller's memory; its length is the request's length.
    pub buffer: Buffer,
    /// Offset in the file.
    pub file_offset: u64,
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
    /// ([`crate::plan::CallerPart`]).
    pub caller_waits: bool,
}

impl Request {
    /// A read of `buffer.len()` bytes at `file_offset`.
    pub fn read(buffer: Buffer, file_offset: u64) -> Self {
        Request {
            direction: Direction::Read,
            buffer,
            file_offset,
            task_size: None,
            pointer_info: None,
            after: None,
            caller_waits: false,
        }
    }

    /// A write of `buffer` at `file_offset`.
    pub fn write(buffer: Buffer, file_offset: u64) -> Self {
        Request {
            direction: Direction::Write,
            buffer,
            file_offset,
            task_size: None,
            pointer_info: None,
            after: None,
            caller_waits: false,
        }
    }

    /// The request's ranges.
    pub fn ranges(&self) -> [Range; 1] {
        [Range {
            file_offset: self.file_offset,
            len: self.buffer.len(),
            buf_offset: 0,
        }]
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

    /// The same request, made to wait for the work queued on `stream` before it touches its
    /// buffer.
    pub fn after(mut self, stream: Option<StreamWait>) -> Self {
        self.after = stream;
        self
    }
}
