//! safetensors files and Hugging Face checkpoints: read a checkpoint's tensors in one batch over
//! all of its files, save tensors as a file or a sharded checkpoint (crash-safe: nothing is
//! visible under the final name until every byte is written).
//!
//! How to use:
//! 1. Save host tensors with [`save_host_file`] (one `.safetensors` file) or
//!    [`save_host_checkpoint`] (shards of at most [`SaveOptions::max_shard_size`] bytes and
//!    `model.safetensors.index.json`). Tensors in GPU memory: [`TensorRow`]s with
//!    [`Buffer::Device`] and the `unsafe` [`save_file`] /
//!    [`save_checkpoint`].
//! 2. [`Checkpoint::open`] a file, an index or a directory: every header is read and validated
//!    before any data is read. Pick tensors with [`Checkpoint::select`] (names and `prefix*`
//!    patterns) or [`Checkpoint::select_where`].
//! 3. [`load_host`] reads the selection into one host allocation, every file at once; each
//!    tensor is the slice at its [`ReadPlan::dests`] offset. Into GPU memory (or memory of your
//!    own): [`Checkpoint::plan`] the layout, allocate `total` bytes, and [`submit_load`] a
//!    [`Target`] over it.
//!
//! ```
//! use gpufile::safetensors::{self, Checkpoint, Dtype, FileOptions, HostTensor};
//!
//! let dir = std::env::temp_dir().join(format!("gpufile-doc-st-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("model.safetensors");
//! let weight: Vec<u8> = (0..24u8).collect(); // 2 x 3 f32
//! let bias = [1u8, 0, 0, 0];
//! safetensors::save_host_file(
//!     &path,
//!     &[
//!         HostTensor { name: "layer.weight", dtype: Dtype::F32, shape: &[2, 3], data: &weight },
//!         HostTensor { name: "layer.bias", dtype: Dtype::I32, shape: &[1], data: &bias },
//!     ],
//!     &FileOptions::default(),
//! )?;
//!
//! let ckpt = Checkpoint::open(&path)?;
//! let selection = ckpt.select(&["layer.weight"])?;
//! let (bytes, plan) = safetensors::load_host(&ckpt, &selection)?;
//! let at = plan.dests[0] as usize;
//! assert_eq!(&bytes[at..at + weight.len()], &weight[..]);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;

use crate::request::Buffer;
use crate::Engine;

/// The memory of a [`Target`]: a [`Buffer`] (host or device), with what is known of it.
pub use crate::batch::OpBuffer;
/// BLAKE3 digests of a checkpoint's tensors: compute, keep in a manifest, check.
pub use crate::formats::safetensors::digest;
pub use crate::formats::safetensors::save::checkpoint::{
    parse_size, save_checkpoint, CheckpointIndex, MetaValue, SaveOptions,
};
pub use crate::formats::safetensors::save::file::{save_file, FileOptions};
pub use crate::formats::safetensors::save::write::{SaveError, TensorRow};
pub use crate::formats::safetensors::{
    block_read, chunk, submit_load, submit_parts, BlockRead, Checkpoint, Dtype, Entry, Files,
    FormatError, Gather, Header, Index, LoadError, PlanOptions, ReadPlan, ReadRange, Sharding,
    Span, Split, Submitted, Target, TensorInfo, DEFAULT_ALIGN, INDEX_FILE_NAME, MAX_HEADER_LEN,
    MAX_INDEX_LEN,
};

/// A tensor in host memory, to save: its name, element type, shape and bytes (C order).
#[derive(Clone, Copy, Debug)]
pub struct HostTensor<'a> {
    /// The tensor's name.
    pub name: &'a str,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape (empty: a scalar).
    pub shape: &'a [u64],
    /// Its bytes: the element count times the dtype's size.
    pub data: &'a [u8],
}

impl HostTensor<'_> {
    fn row(&self) -> TensorRow {
        TensorRow::host(self.name, self.dtype, self.shape.to_vec(), self.data)
    }
}

/// Saves host tensors as one safetensors file at `path` through the global [`Engine`] and its
/// settings: the file's size. The file appears under its name only once every byte is written
/// ([`FileOptions::durable`] also syncs it); on an error no file is left behind.
pub fn save_host_file(
    path: impl AsRef<Path>,
    tensors: &[HostTensor<'_>],
    options: &FileOptions<'_>,
) -> Result<u64, SaveError> {
    let engine = Engine::global()?;
    let rows: Vec<TensorRow> = tensors.iter().map(HostTensor::row).collect();
    // SAFETY: every row borrows its bytes from `tensors`, borrowed for the whole call, and
    // `save_file` returns only after every write has ended.
    unsafe { save_file(path.as_ref(), &rows, options, &engine, &engine.settings()) }
}

/// Saves host tensors as a Hugging Face checkpoint in `dir` (created where missing) through the
/// global [`Engine`]: one `model.safetensors`, or shards and `model.safetensors.index.json`
/// where the tensors exceed [`SaveOptions::max_shard_size`]. The index, as written (or, for
/// one shard, as it would be).
pub fn save_host_checkpoint(
    dir: impl AsRef<Path>,
    tensors: &[HostTensor<'_>],
    options: &SaveOptions<'_>,
) -> Result<CheckpointIndex, SaveError> {
    let engine = Engine::global()?;
    let rows: Vec<TensorRow> = tensors.iter().map(HostTensor::row).collect();
    // SAFETY: as in `save_host_file`: the bytes are borrowed until the call has returned.
    unsafe { save_checkpoint(dir.as_ref(), &rows, options, &engine, &engine.settings()) }
}

/// Reads the tensors `selection` names (indices into [`Checkpoint::entries`], as
/// [`Checkpoint::select`] returns them) into one new host allocation, as one batch over every
/// file of the checkpoint through the global [`Engine`]: the bytes, and the plan that says where
/// each tensor is in them (`plan.dests[i]` for `selection[i]`, aligned to
/// [`DEFAULT_ALIGN`]).
pub fn load_host(
    checkpoint: &Checkpoint,
    selection: &[usize],
) -> Result<(Vec<u8>, ReadPlan), LoadError> {
    let engine = Engine::global()?;
    let plan = checkpoint.plan(selection, PlanOptions::default())?;
    let total = usize::try_from(plan.total).map_err(|_| {
        crate::Error::InvalidArgument(format!("{} bytes do not fit in memory", plan.total))
    })?;
    let mut bytes = vec![0u8; total];
    let target = Target {
        selection: selection.to_vec(),
        buffer: (total > 0).then(|| OpBuffer::new(Buffer::host(&mut bytes))),
    };
    // SAFETY: `bytes` outlives the load: `wait` returns only once every request has ended, and
    // nothing else touches `bytes` until then.
    let submitted = unsafe {
        submit_load(
            &engine,
            &engine.settings(),
            checkpoint,
            &Files::Local,
            &[target],
        )
    }?;
    submitted.future.wait()?;
    let plan = submitted.plans.into_iter().next().unwrap_or(plan);
    Ok((bytes, plan))
}
