//! Writing several safetensors files as one batch: each file's header, then every tensor's bytes
//! from its own memory (host or device), the files' writes interleaved.

use crate::cuda::{PointerInfo, StreamWait};
use crate::formats::safetensors::{Dtype, FormatError};
use crate::{Buffer, Direction, Engine, Error, FileHandle, IoFuture, Request, Settings};
use std::collections::BTreeMap;
use std::time::Duration;

use super::{plan_save, SaveTensor};

/// One tensor to write: what the header says of it and the memory holding its bytes (C order).
#[derive(Clone, Debug)]
pub struct TensorRow {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its logical shape (for F4, the element count).
    pub shape: Vec<u64>,
    /// Its bytes: host or device memory, `buffer.len()` bytes.
    pub buffer: Buffer,
    /// What the caller already knows of a device buffer's address (see [`Request`]).
    pub pointer_info: Option<PointerInfo>,
    /// The buffer's producer stream, waited for before the bytes are read (see [`Request`]).
    pub after: Option<StreamWait>,
}

impl TensorRow {
    /// A row for `len` bytes of host memory at `ptr`.
    pub fn host(name: impl Into<String>, dtype: Dtype, shape: Vec<u64>, data: &[u8]) -> Self {
        TensorRow {
            name: name.into(),
            dtype,
            shape,
            buffer: Buffer::Host {
                ptr: data.as_ptr().cast_mut(),
                len: data.len(),
            },
            pointer_info: None,
            after: None,
        }
    }

    /// What the header builder needs of the row.
    pub fn spec(&self) -> SaveTensor {
        SaveTensor {
            name: self.name.clone(),
            dtype: self.dtype,
            shape: self.shape.clone(),
            len: self.buffer.len() as u64,
        }
    }

    /// The write of `len` of its bytes from `at` to `file_offset`, carrying what the row knows
    /// of its memory.
    pub fn request(&self, at: usize, len: usize, file_offset: u64) -> Request {
        let buffer = match self.buffer {
            Buffer::Host { ptr, .. } => Buffer::Host {
                ptr: ptr.wrapping_add(at),
                len,
            },
            Buffer::Device { addr, .. } => Buffer::Device {
                addr: addr + at as u64,
                len,
            },
        };
        Request::write(buffer, file_offset)
            .pointer_info(self.pointer_info)
            .after(self.after)
    }
}

/// A file to write: an open, empty file, its tensors and its metadata.
pub struct FileToWrite<'a> {
    /// The file (errors name its path).
    pub file: &'a FileHandle,
    /// Its tensors.
    pub tensors: Vec<&'a TensorRow>,
    /// Its `__metadata__`.
    pub metadata: Option<&'a BTreeMap<String, String>>,
}

/// Why a save failed: a tensor or header the format refuses (nothing written), the I/O (or an
/// argument the save itself refuses: [`crate::Error::InvalidArgument`]), or a step of a
/// checkpoint's commit after the new checkpoint was published.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// A tensor or header the format refuses.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The I/O failed.
    #[error(transparent)]
    Io(#[from] crate::Error),
    /// A step of a checkpoint's commit failed after its commit point: the directory loads as the
    /// new checkpoint (its index may name the shards by their temporary names, which a later
    /// save replaces), and the error is the failed step's.
    #[error("{0} (the new checkpoint is published: the directory loads as it)")]
    Committed(crate::Error),
}

impl SaveError {
    /// The I/O error of an [`SaveError::Io`] or [`SaveError::Committed`]; a refused tensor as
    /// an argument error.
    pub fn into_error(self) -> crate::Error {
        match self {
            SaveError::Io(e) | SaveError::Committed(e) => e,
            SaveError::Format(e) => crate::Error::InvalidArgument(e.to_string()),
        }
    }
}

/// Plans every file first (a refused tensor writes nothing), writes each header, then submits
/// every tensor's bytes as one batch: the files' sizes and the batch's future. Several files'
/// writes are interleaved ([`crate::batch::interleave`]), so that the workers write to every
/// file at once.
///
/// # Safety
/// Every row's buffer must stay valid, and unchanged, until the future is done.
pub unsafe fn submit_files(
    engine: &Engine,
    settings: &Settings,
    files: &[FileToWrite<'_>],
) -> Result<(Vec<u64>, IoFuture), SaveError> {
    let mut plans = Vec::with_capacity(files.len());
    for f in files {
        let specs: Vec<SaveTensor> = f.tensors.iter().map(|t| t.spec()).collect();
        plans.push(plan_save(f.file.path(), &specs, f.metadata)?);
    }
    let mut endpoints = Vec::with_capacity(files.len());
    for (f, plan) in files.iter().zip(&plans) {
        f.file.write(&plan.header, 0, None)?;
        endpoints.push(f.file.endpoint(Direction::Write));
    }
    let lens: Vec<Vec<usize>> = files
        .iter()
        .map(|f| f.tensors.iter().map(|t| t.buffer.len()).collect())
        .collect();
    // One file's requests whole (a request per tensor); several files' in pieces, interleaved.
    let batch: Vec<_> = crate::batch::interleave(&lens, settings)
        .into_iter()
        .map(|p| {
            let t = &files[p.file].tensors[p.write];
            let off = plans[p.file].offsets[p.write] + p.at as u64;
            (endpoints[p.file].clone(), t.request(p.at, p.len, off))
        })
        .collect();
    // SAFETY: the caller keeps every buffer valid until the future is done.
    let fut = unsafe { engine.submit_batch(&batch, settings) }?;
    Ok((plans.iter().map(|p| p.file_size).collect(), fut))
}

/// How often a save asks its caller's stop function (see
/// [`super::checkpoint::SaveOptions::stop`]).
pub const STOP_POLL: Duration = Duration::from_millis(50);

/// Waits for `fut`, asking `stop` every [`STOP_POLL`]: where it says so, the requests are
/// cancelled and waited for, and the error is [`Error::Cancelled`].
pub fn wait_stoppable(
    fut: &IoFuture,
    stop: Option<&(dyn Fn() -> bool + Sync)>,
) -> crate::Result<()> {
    let Some(stop) = stop else {
        return fut.wait().map(drop);
    };
    loop {
        if let Some(r) = fut.wait_timeout(STOP_POLL) {
            return r.map(drop);
        }
        if stop() {
            fut.cancel();
            let _ = fut.wait();
            return Err(Error::Cancelled);
        }
    }
}
