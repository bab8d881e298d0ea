//! The bytes of every file of a checkpoint, read through the engine (one request per file, into
//! host memory) and hashed tensor by tensor on every thread given; the next file is read while
//! one is hashed.

use std::time::Instant;

use super::{hash::hash_ranges, DigestError};
use crate::batch::OpBuffer;
use crate::config::Settings;
use crate::engine::Engine;
use crate::formats::safetensors::{submit_load, Checkpoint, Files, Submitted, Target};
use crate::request::Buffer;

/// One file of a checkpoint, hashed.
#[derive(Clone, Debug)]
pub struct FileDigest {
    /// Index into [`Checkpoint::files`].
    pub file: usize,
    /// Every tensor of the file's header (not only those an index names), in offset order:
    /// its name and the BLAKE3 hash of its bytes.
    pub tensors: Vec<(String, blake3::Hash)>,
    /// The bytes hashed (the file's data area).
    pub bytes: u64,
    /// The time this file took: waiting for its read (after the previous file's hashing) and
    /// hashing it. The files' seconds add up to the whole run's.
    pub seconds: f64,
}

/// A file's read in flight and the memory it lands in. Dropping it waits for the read (a
/// future does not cancel its request), so the memory outlives every write into it.
struct InFlight {
    submitted: Submitted,
    /// The file as a checkpoint of its own: every tensor of its header, selected in order.
    single: Checkpoint,
    buf: Vec<u8>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let _ = self.submitted.future.wait();
    }
}

fn submit(
    engine: &Engine,
    settings: &Settings,
    checkpoint: &Checkpoint,
    file: usize,
    mut buf: Vec<u8>,
) -> Result<InFlight, DigestError> {
    let header = &checkpoint.files[file];
    let single = Checkpoint::from_headers(&header.path, vec![header.clone()], None, None)?;
    let selection: Vec<usize> = (0..single.entries.len()).collect();
    // Tensors tile the data area, so the plan is one range, the data area, from offset 0.
    let total = single
        .plan(&selection, Default::default())
        .map(|p| p.total)?;
    // A buffer an earlier file used: its pages are already there (a fresh one faults each
    // page in as the read lands).
    buf.resize(total as usize, 0);
    let target = Target {
        selection,
        buffer: (total > 0).then(|| OpBuffer::new(Buffer::host(&mut buf))),
    };
    // SAFETY: `buf`'s heap memory moves into the returned `InFlight` with the future, which
    // waits for the read before it is dropped; nothing touches it until the future is done.
    let submitted = unsafe { submit_load(engine, settings, &single, &Files::Local, &[target]) }?;
    Ok(InFlight {
        submitted,
        single,
        buf,
    })
}

/// Hashes every tensor of every file of `checkpoint` (every tensor of each file's header), file
/// by file, with `threads` hashing threads (the reads take the engine's `settings`). `each` is
/// called with each file's digests as it is done; an error from it stops the run.
pub fn digest_files(
    engine: &Engine,
    settings: &Settings,
    checkpoint: &Checkpoint,
    threads: usize,
    mut each: impl FnMut(FileDigest) -> Result<(), DigestError>,
) -> Result<(), DigestError> {
    let n = checkpoint.files.len();
    if n == 0 {
        return Ok(());
    }
    let mut pending = Some(submit(engine, settings, checkpoint, 0, Vec::new())?);
    let mut spare = Vec::new();
    let mut clock = Instant::now();
    for file in 0..n {
        let mut this = pending.take().expect("a read submitted for each file");
        let read = this.submitted.future.wait()?;
        let expected = this.submitted.bytes();
        if read as u64 != expected {
            return Err(DigestError::Short {
                path: checkpoint.files[file].path.clone(),
                read: read as u64,
                expected,
            });
        }
        if file + 1 < n {
            let buf = std::mem::take(&mut spare);
            pending = Some(submit(engine, settings, checkpoint, file + 1, buf)?);
        }
        let plan = &this.submitted.plans[0];
        let ranges: Vec<(usize, usize)> = this
            .single
            .entries
            .iter()
            .zip(&plan.dests)
            .map(|(e, &d)| (d as usize, this.single.info(e).len() as usize))
            .collect();
        let hashes = hash_ranges(&this.buf, &ranges, threads);
        let tensors = this
            .single
            .entries
            .iter()
            .zip(hashes)
            .map(|(e, h)| (this.single.info(e).name.clone(), h))
            .collect();
        let now = Instant::now();
        let done = FileDigest {
            file,
            tensors,
            bytes: expected,
            seconds: (now - clock).as_secs_f64(),
        };
        clock = now;
        // The read is done: its memory serves the file after next.
        spare = std::mem::take(&mut this.buf);
        drop(this);
        each(done)?;
    }
    Ok(())
}
