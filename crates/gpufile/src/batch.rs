//! One submission of many reads and writes, as KvikIO's `BatchHandle::submit` takes them: the
//! one implementation behind Python's `BatchHandle`, the C ABI's `gpufile_batch_submit` and the
//! C++ `kvikio::BatchHandle`.
//!
//! How to use:
//! 1. Describe each buffer once as an [`OpBuffer`] and each file side as an [`Endpoint`]
//!    ([`crate::FileHandle::endpoint`]).
//! 2. Make an [`Op`] per operation (its endpoint, buffer, file offset, buffer offset and size)
//!    and [`submit`] them under one [`Settings`].
//! 3. The operations of one endpoint, one buffer and one direction start as one request of many
//!    ranges ([`Group`]); every group is checked and planned before any starts
//!    ([`Engine::submit_each`]), so a refused operation (a range past its buffer, reads whose
//!    destinations overlap, writes to the same bytes of one file, a read past the end of its
//!    file, a write on a file not open for writing) refuses the submission before any byte
//!    moves.
//! 4. An operation's outcome is its group's ([`Submission::outcome`]): complete with its size
//!    once the group's request succeeded, else failed with the group's error, or cancelled.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::Settings;
use crate::cuda::{PointerInfo, StreamWait};
use crate::engine::shared_writes::WriteSpans;
use crate::engine::{Engine, PathReport};
use crate::error::{Error, Result};
use crate::future::IoFuture;
use crate::request::{Buffer, Direction, Range, Ranges, Request};
use crate::source::Endpoint;

/// The memory that operations of a batch read into or write from, with what the caller knows
/// of it (the driver's answer for a device address, a producer's stream to wait for).
#[derive(Clone, Copy, Debug)]
pub struct OpBuffer {
    /// The whole buffer: an operation's `buf_offset` counts from its start.
    pub buffer: Buffer,
    /// What [`crate::cuda::classify`] said of a device buffer's address (see
    /// [`Request::pointer_info`]).
    pub pointer_info: Option<PointerInfo>,
    /// Work to wait for before the buffer is touched (see [`Request::after`]).
    pub after: Option<StreamWait>,
}

impl OpBuffer {
    /// `buffer`, with nothing more known of it.
    pub fn new(buffer: Buffer) -> Self {
        OpBuffer {
            buffer,
            pointer_info: None,
            after: None,
        }
    }
}

/// One read or write of a batch: `size` bytes at `file_offset` on `endpoint` (whose direction
/// is the operation's) and at `buf_offset` in `buffer`.
#[derive(Clone, Copy)]
pub struct Op<'a> {
    /// The file side, and the direction.
    pub endpoint: &'a Endpoint,
    /// The memory side.
    pub buffer: &'a OpBuffer,
    /// Offset in the file.
    pub file_offset: u64,
    /// Offset in the buffer.
    pub buf_offset: usize,
    /// Bytes.
    pub size: usize,
}

/// What makes operations one request: the same source or sink (the same open file: clones of
/// one handle share it), the same direction and the same memory (kind, address and length).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    endpoint: usize,
    direction: Direction,
    device: bool,
    addr: u64,
    len: usize,
}

impl Key {
    fn of(op: &Op<'_>) -> Self {
        let endpoint = match op.endpoint {
            Endpoint::Read(s) => Arc::as_ptr(s).cast::<()>() as usize,
            Endpoint::Write(s) => Arc::as_ptr(s).cast::<()>() as usize,
        };
        let (device, addr) = match op.buffer.buffer {
            Buffer::Host { ptr, .. } => (false, ptr as usize as u64),
            Buffer::Device { addr, .. } => (true, addr),
        };
        Key {
            endpoint,
            direction: op.endpoint.direction(),
            device,
            addr,
            len: op.buffer.buffer.len(),
        }
    }
}

/// The groups of `ops`: the indices of the operations of one endpoint, direction and buffer,
/// in submission order; the groups in the order of their first operation.
pub fn group(ops: &[Op<'_>]) -> Vec<Vec<usize>> {
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let g = *index.entry(Key::of(op)).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    groups
}

/// One request of a submission: the operations it serves (indices into the submission's
/// operations, in order: its ranges), its future and what its plan decided.
pub struct Group {
    /// The operations, in the order of the request's ranges.
    pub ops: Vec<usize>,
    /// The request's future: the bytes of all its operations, or its first error.
    pub future: IoFuture,
    /// The path, ranges and tasks its plan decided.
    pub report: PathReport,
}

/// What became of one operation.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Its group's request has not ended yet.
    Running,
    /// Done: its bytes moved.
    Complete(usize),
    /// Its group's request failed (the operation's own bytes may have moved or not).
    Failed(Error),
    /// Its group's request was cancelled before all of it ran.
    Cancelled,
}

impl Outcome {
    /// The outcome of an operation of `size` bytes whose group's request ended with `result`.
    pub fn of(size: usize, result: &Result<usize>) -> Self {
        match result {
            Ok(_) => Outcome::Complete(size),
            Err(Error::Cancelled) => Outcome::Cancelled,
            Err(e) => Outcome::Failed(e.clone()),
        }
    }

    /// The OS error number of a failed operation, where its error has one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Outcome::Failed(e) => e.errno(),
            _ => None,
        }
    }
}

/// The requests of one submission, and which one serves each operation.
pub struct Submission {
    groups: Vec<Group>,
    /// Per operation: its group and its size.
    ops: Vec<(usize, usize)>,
}

impl Submission {
    /// The requests, in the order of their first operation.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The requests, taken out (a binding keeps each future with what holds its buffer).
    pub fn into_groups(self) -> Vec<Group> {
        self.groups
    }

    /// The operations submitted.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no operation was submitted.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The group (an index into [`Submission::groups`]) serving operation `op`.
    ///
    /// # Panics
    /// Where `op` is not an operation of the submission.
    pub fn group_of(&self, op: usize) -> usize {
        self.ops[op].0
    }

    /// What became of operation `op` so far; does not wait.
    ///
    /// # Panics
    /// Where `op` is not an operation of the submission.
    pub fn outcome(&self, op: usize) -> Outcome {
        let (g, size) = self.ops[op];
        let future = &self.groups[g].future;
        match future.is_done() {
            true => Outcome::of(size, &future.wait()),
            false => Outcome::Running,
        }
    }

    /// Waits until the request serving operation `op` has ended; its outcome.
    ///
    /// # Panics
    /// Where `op` is not an operation of the submission.
    pub fn wait(&self, op: usize) -> Outcome {
        let (g, size) = self.ops[op];
        Outcome::of(size, &self.groups[g].future.wait())
    }

    /// Cancels every request (tasks not started are skipped; see [`IoFuture::cancel`]).
    pub fn cancel(&self) {
        self.groups.iter().for_each(|g| g.future.cancel());
    }
}

/// Refuses write operations that land on the same bytes of one file, whatever their buffers and
/// handles (two handles of one file are one file): which lands last is not defined. The error
/// names the two operations and the first shared bytes.
fn no_shared_file_bytes(ops: &[Op<'_>]) -> Result<()> {
    let writes = ops
        .iter()
        .filter(|op| op.endpoint.direction() == Direction::Write);
    if writes.take(2).count() < 2 {
        return Ok(());
    }
    let mut spans = WriteSpans::default();
    for (i, op) in ops.iter().enumerate() {
        let range = Range {
            file_offset: op.file_offset,
            len: op.size,
            buf_offset: op.buf_offset,
        };
        spans.add(op.endpoint, i, &[range]);
    }
    match spans.first_shared() {
        None => Ok(()),
        Some(shared) => Err(shared.error("operations", &ops[shared.a].endpoint.describe())),
    }
}

/// Starts `ops` on `engine` under `settings`: the operations of one endpoint, direction and
/// buffer as one request of many ranges, every request checked and planned before the first
/// starts. A refused operation is the error, and nothing has started: its check's error (as
/// [`Engine::submit`] gives it for a request of ranges: a range past its buffer or overlapping
/// another in the buffer, a read past the end of the file, ...), reads of different groups
/// into the same bytes, or writes of any two operations to the same bytes of one file
/// ([`Error::InvalidArgument`]).
///
/// # Safety
/// Each operation's buffer is valid for its whole length (writable for a read) until the future
/// of its group is done, and not used otherwise meanwhile (as for [`Engine::submit`]).
pub unsafe fn submit(engine: &Engine, ops: &[Op<'_>], settings: &Settings) -> Result<Submission> {
    no_shared_file_bytes(ops)?;
    let groups = group(ops);
    let requests: Vec<(Endpoint, Request)> = groups
        .iter()
        .map(|members| {
            let first = &ops[members[0]];
            let ranges: Arc<[Range]> = members
                .iter()
                .map(|&i| Range {
                    file_offset: ops[i].file_offset,
                    len: ops[i].size,
                    buf_offset: ops[i].buf_offset,
                })
                .collect();
            let memory = first.buffer;
            let req = match first.endpoint.direction() {
                Direction::Read => Request::read_ranges(memory.buffer, Ranges::Many(ranges.into())),
                Direction::Write => {
                    Request::write_ranges(memory.buffer, Ranges::Many(ranges.into()))
                }
            };
            let req = req.pointer_info(memory.pointer_info).after(memory.after);
            (first.endpoint.clone(), req)
        })
        .collect();
    // SAFETY: every group's buffer is an operation's, valid by the caller's contract.
    let started = unsafe { engine.submit_each(&requests, settings) }?;
    let mut per_op = vec![(0, 0); ops.len()];
    for (g, members) in groups.iter().enumerate() {
        for &i in members {
            per_op[i] = (g, ops[i].size);
        }
    }
    Ok(Submission {
        groups: groups
            .into_iter()
            .zip(started)
            .map(|(ops, (future, report))| Group {
                ops,
                future,
                report,
            })
            .collect(),
        ops: per_op,
    })
}

mod interleave;
pub use interleave::{interleave, Piece};

#[cfg(test)]
mod tests;
