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
use std::sync::Arc;

use crate::cuda::{PointerInfo, StreamWait};
use crate::error::{Error, Result};

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

/// The ranges of a request: one (the common case, kept without an allocation) or many.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ranges {
    /// One range.
    One(Range),
    /// Several ranges of one buffer, in the order given.
    Many(Arc<[Range]>),
}

impl Ranges {
    /// The ranges, in order.
    pub fn as_slice(&self) -> &[Range] {
        match self {
            Ranges::One(r) => std::slice::from_ref(r),
            Ranges::Many(v) => v,
        }
    }

    /// Ranges from parallel arrays (the C, C++ and Python `read_ranges`): range `i` is
    /// `sizes[i]` bytes at `file_offsets[i]`, at `buf_offsets[i]` in the buffer, or, without
    /// `buf_offsets`, packed one after the other from the buffer's start in the order given.
    /// Arrays of different lengths, and values past this machine's address space, are
    /// [`Error::InvalidArgument`]; the ranges themselves are checked when the request is
    /// submitted.
    pub fn from_arrays(
        file_offsets: &[u64],
        sizes: &[u64],
        buf_offsets: Option<&[u64]>,
    ) -> Result<Ranges> {
        let n = file_offsets.len();
        let mismatch = |name: &str, m: usize| {
            Error::InvalidArgument(format!("file_offsets has {n} entries but {name} has {m}"))
        };
        if sizes.len() != n {
            return Err(mismatch("sizes", sizes.len()));
        }
        if let Some(b) = buf_offsets.filter(|b| b.len() != n) {
            return Err(mismatch("buf_offsets", b.len()));
        }
        let word = |what: &str, i: usize, v: u64| {
            usize::try_from(v).map_err(|_| {
                Error::InvalidArgument(format!(
                    "{what}[{i}] {v} is larger than this machine's address space"
                ))
            })
        };
        // Checked in a first pass, so that the list is built straight into its shared
        // allocation (no copy of a vector into it: a gather's list is megabytes).
        for i in 0..n {
            word("sizes", i, sizes[i])?;
            if let Some(b) = buf_offsets {
                word("buf_offsets", i, b[i])?;
            }
        }
        let mut packed = 0usize;
        let list = (0..n)
            .map(|i| {
                let len = sizes[i] as usize; // checked above
                let buf_offset = match buf_offsets {
                    Some(b) => b[i] as usize,
                    None => packed,
                };
                packed = packed.saturating_add(len);
                Range {
                    file_offset: file_offsets[i],
                    len,
                    buf_offset,
                }
            })
            .collect();
        Ok(Ranges::Many(list))
    }

    /// The ranges of a fixed-row gather (`read_rows`): row `rows[i]`, the `row_bytes` bytes at
    /// `base_offset + rows[i] * row_stride` in the file, lands at `i * row_bytes`. `row_bytes`
    /// 0 and offsets that overflow are [`Error::InvalidArgument`].
    pub fn rows(
        rows: &[u64],
        row_bytes: usize,
        row_stride: u64,
        base_offset: u64,
    ) -> Result<Ranges> {
        if row_bytes == 0 {
            return Err(Error::InvalidArgument(
                "row_bytes must be at least 1".into(),
            ));
        }
        let offset = |row: u64| {
            row.checked_mul(row_stride)
                .and_then(|o| o.checked_add(base_offset))
        };
        // Checked in a first pass, so that the list is built straight into its shared
        // allocation (no copy of a vector into it: 100,000 rows are 2.4 MB).
        if let Some(i) = rows.iter().position(|&row| offset(row).is_none()) {
            return Err(Error::InvalidArgument(format!(
                "rows[{i}] {} at row_stride {row_stride} from base_offset {base_offset} is \
                 past the largest file offset",
                rows[i]
            )));
        }
        if rows.len().checked_mul(row_bytes).is_none() {
            return Err(Error::InvalidArgument(format!(
                "{} rows of {row_bytes} bytes overflow the address space",
                rows.len()
            )));
        }
        let list = rows
            .iter()
            .enumerate()
            .map(|(i, &row)| Range {
                file_offset: offset(row).unwrap_or(0), // checked above
                len: row_bytes,
                buf_offset: i * row_bytes, // at most rows.len() * row_bytes, checked above
            })
            .collect();
        Ok(Ranges::Many(list))
    }

    /// Bytes in all of them.
    pub fn bytes(&self) -> usize {
        match self {
            Ranges::One(r) => r.len,
            Ranges::Many(v) => v.iter().map(|r| r.len).sum(),
        }
    }

    /// Refuses ranges that run past a buffer of `buffer_len` bytes or past the largest file
    /// offset, and ranges that overlap where tasks would race: in the buffer for a read (two
    /// tasks writing the same bytes), in the file for a write (which one lands last is not
    /// defined).
    pub fn check(&self, direction: Direction, buffer_len: usize) -> Result<()> {
        for r in self.as_slice() {
            let file_end = r.file_offset.checked_add(r.len as u64);
            if file_end.is_none_or(|e| e > i64::MAX as u64) {
                return Err(Error::InvalidArgument(format!(
                    "file_offset {} + size {} is past the largest file offset",
                    r.file_offset, r.len
                )));
            }
            if r.buf_offset
                .checked_add(r.len)
                .is_none_or(|e| e > buffer_len)
            {
                return Err(Error::InvalidArgument(format!(
                    "a range of {} bytes at buffer offset {} runs past the buffer ({buffer_len} \
                     bytes)",
                    r.len, r.buf_offset
                )));
            }
        }
        let Ranges::Many(v) = self else {
            return Ok(());
        };
        // Gathers into a packed output, and writes in file order, come as a chain of ranges
        // each ending before the next starts: no overlap, found without sorting or copying.
        let chained = match direction {
            Direction::Read => v
                .windows(2)
                .all(|w| w[0].buf_offset + w[0].len <= w[1].buf_offset),
            Direction::Write => v.windows(2).all(|w| w[0].end() <= w[1].file_offset),
        };
        if chained {
            return Ok(());
        }
        let mut spans: Vec<(u64, u64)> = v
            .iter()
            .filter(|r| r.len > 0)
            .map(|r| match direction {
                Direction::Read => (r.buf_offset as u64, (r.buf_offset + r.len) as u64),
                Direction::Write => (r.file_offset, r.end()),
            })
            .collect();
        if !spans.windows(2).all(|w| w[0] <= w[1]) {
            spans.sort_unstable();
        }
        if let Some(w) = spans.windows(2).find(|w| w[1].0 < w[0].1) {
            let what = match direction {
                Direction::Read => "buffer",
                Direction::Write => "file",
            };
            return Err(Error::InvalidArgument(format!(
                "ranges overlap in the {what} (bytes {}..{} and {}..{})",
                w[0].0, w[0].1, w[1].0, w[1].1
            )));
        }
        Ok(())
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
    /// ([`crate::plan::CallerPart`]).
    pub caller_waits: bool,
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

    /// The same request, made to wait for the work queued on `stream` before it touches its
    /// buffer.
    pub fn after(mut self, stream: Option<StreamWait>) -> Self {
        self.after = stream;
        self
    }
}

/// A request moves to the thread that runs it (the stream launcher, a binding's GIL-free
/// closure) as it is: no wrapper restates the buffer's contract.
const _: () = {
    const fn send<T: Send>() {}
    send::<Request>();
};

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(list: &[(u64, usize, usize)]) -> Ranges {
        let v: Vec<Range> = list
            .iter()
            .map(|&(file_offset, len, buf_offset)| Range {
                file_offset,
                len,
                buf_offset,
            })
            .collect();
        Ranges::Many(v.into())
    }

    #[test]
    fn ranges_inside_the_buffer_that_do_not_race_pass_and_others_are_refused() {
        let read = Direction::Read;
        let ok = ranges(&[(100, 10, 0), (0, 10, 10), (100, 0, 5), (5000, 80, 20)]);
        assert!(ok.check(read, 100).is_ok());
        // Reads of the same file bytes into different places are fine; writes of them are not.
        let same_file = ranges(&[(0, 10, 0), (5, 10, 10)]);
        assert!(same_file.check(read, 20).is_ok());
        let e = same_file.check(Direction::Write, 20).unwrap_err();
        assert!(e.to_string().contains("overlap in the file"), "{e}");
        // Two reads into the same bytes race.
        let e = ranges(&[(0, 10, 0), (50, 10, 9)])
            .check(read, 20)
            .unwrap_err();
        assert!(e.to_string().contains("overlap in the buffer"), "{e}");
        let e = ranges(&[(0, 10, 95)]).check(read, 100).unwrap_err();
        assert!(e.to_string().contains("runs past the buffer"), "{e}");
        let e = ranges(&[(u64::MAX - 1, 10, 0)])
            .check(read, 100)
            .unwrap_err();
        assert!(e.to_string().contains("largest file offset"), "{e}");
        assert_eq!(ok.bytes(), 100);
    }

    #[test]
    fn ranges_from_arrays_and_rows_and_their_bad_inputs() {
        let packed = Ranges::from_arrays(&[100, 0, 50], &[10, 0, 5], None).unwrap();
        assert_eq!(packed, ranges(&[(100, 10, 0), (0, 0, 10), (50, 5, 10)]));
        let placed = Ranges::from_arrays(&[1, 2], &[3, 4], Some(&[40, 20])).unwrap();
        assert_eq!(placed, ranges(&[(1, 3, 40), (2, 4, 20)]));
        let e = Ranges::from_arrays(&[1, 2], &[3], None).unwrap_err();
        assert_eq!(e.to_string(), "file_offsets has 2 entries but sizes has 1");
        let e = Ranges::from_arrays(&[1], &[3], Some(&[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "file_offsets has 1 entries but buf_offsets has 0"
        );
        let rows = Ranges::rows(&[3, 0, 3], 8, 16, 100).unwrap();
        assert_eq!(rows, ranges(&[(148, 8, 0), (100, 8, 8), (148, 8, 16)]));
        let e = Ranges::rows(&[1], 0, 16, 0).unwrap_err();
        assert_eq!(e.to_string(), "row_bytes must be at least 1");
        let e = Ranges::rows(&[0, 1 << 62], 8, 1 << 10, 0).unwrap_err();
        assert!(e.to_string().contains("rows[1]") && e.to_string().contains("past the largest"));
    }

    /// Overlap is judged the same whether the ranges come as a chain (each ending before the
    /// next starts: the path without a sort) or in any other order.
    #[test]
    fn overlap_is_found_in_chains_and_in_any_order() {
        let list = |v: &[(u64, usize, usize)]| {
            Ranges::Many(
                v.iter()
                    .map(|&(file_offset, len, buf_offset)| Range {
                        file_offset,
                        len,
                        buf_offset,
                    })
                    .collect(),
            )
        };
        let read = |v: &[(u64, usize, usize)]| list(v).check(Direction::Read, 100);
        let write = |v: &[(u64, usize, usize)]| list(v).check(Direction::Write, 100);
        // Chains, empty ranges among them.
        assert!(read(&[(0, 10, 0), (50, 10, 10), (0, 0, 20), (9, 5, 20)]).is_ok());
        assert!(write(&[(0, 10, 50), (10, 10, 0), (20, 0, 0), (20, 5, 0)]).is_ok());
        // The same sets out of order, and an empty range inside another one.
        assert!(read(&[(9, 5, 20), (0, 10, 0), (50, 10, 10)]).is_ok());
        assert!(read(&[(0, 10, 0), (1, 0, 5), (50, 10, 10)]).is_ok());
        assert!(write(&[(20, 5, 0), (0, 10, 50), (10, 10, 0)]).is_ok());
        // Overlaps, next to each other or apart.
        for v in [
            &[(0, 10, 0), (50, 10, 9)][..],
            &[(0, 10, 30), (0, 5, 0), (50, 10, 35)][..],
        ] {
            let e = read(v).unwrap_err().to_string();
            assert!(e.starts_with("ranges overlap in the buffer"), "{e}");
        }
        let e = write(&[(10, 10, 0), (0, 11, 50)]).unwrap_err().to_string();
        assert!(e.starts_with("ranges overlap in the file"), "{e}");
    }
}
