//! The safetensors format: header parsing, validation, and a read plan of byte ranges.
//!
//! A safetensors file is an 8-byte little-endian header length `n`, `n` bytes of JSON, then the
//! data area. The JSON maps tensor names to `{"dtype", "shape", "data_offsets": [begin, end]}`
//! (offsets relative to the data area) and may hold `"__metadata__"`, an object of strings.
//!
//! How to use:
//! 1. [`Checkpoint::open`] a `.safetensors` file, a Hugging Face sharded checkpoint's
//!    `model.safetensors.index.json`, or a directory (its index if it has one, else every
//!    `*.safetensors` file in it). Every header is read and validated before any data is read.
//! 2. [`Checkpoint::plan`] the tensors you want: the byte ranges to read (adjacent tensors of a
//!    file coalesced into one range) and where each tensor lands in one destination allocation.
//! 3. Read every range (all files at once) into that allocation; tensors are views into it.
//!
//! Validation follows the `safetensors` crate (the reference reader) so that a file gpufile
//! accepts, it accepts too, and the other way round: the header is at most
//! [`MAX_HEADER_LEN`] bytes, tensors tile the data area exactly (sorted by offset, no gap, no
//! overlap, the last one ending at the end of the file), and every tensor's byte length is its
//! element count times its dtype's size. The order of the tensors in the JSON does not matter
//! (the reference sorts them by offset too). gpufile is stricter in one place: a key that appears
//! twice in the header is an error (JSON parsers disagree on which one wins).
//!
//! The modules: `dtype` ([`Dtype`]), `error` ([`FormatError`]), `header` (one file's
//! [`Header`] and its [`TensorInfo`]), `index` (a sharded checkpoint's [`Index`]), `checkpoint`
//! ([`Checkpoint`] and its [`ReadPlan`]), [`load`] (selecting tensors and reading them, as every
//! binding does), `shard` (parts of tensors: a block's byte ranges, tensor-parallel
//! [`Sharding`]) [`save`] (writing files) and [`digest`] (BLAKE3 digests of tensors).

mod checkpoint;
pub mod digest;
mod dtype;
mod error;
mod header;
mod index;
pub mod load;
#[cfg(test)]
mod load_tests;
pub mod save;
mod shard;
#[cfg(test)]
mod shard_tests;
#[cfg(test)]
mod tests;

pub use checkpoint::{resolve_inside, Checkpoint, Entry, Gather, PlanOptions, ReadPlan, ReadRange};
pub use dtype::Dtype;
pub use error::FormatError;
pub use header::{Header, TensorInfo};
pub use index::Index;
pub use load::{submit_load, submit_parts, Files, LoadError, Submitted, Target};
pub use shard::{block_read, chunk, BlockRead, Sharding, Span, Split};

/// Largest header gpufile reads, as in the `safetensors` crate (100 MB): a larger length field
/// is not a safetensors file, and would size an allocation by untrusted input.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Largest `*.safetensors.index.json` gpufile reads (the same bound as a header).
pub const MAX_INDEX_LEN: u64 = 100_000_000;

/// The index file name of a Hugging Face sharded checkpoint.
pub const INDEX_FILE_NAME: &str = "model.safetensors.index.json";

/// The alignment of each read range's start in the destination allocation by default: 256
/// bytes, what `cudaMalloc` guarantees, so tensors are as aligned as their own allocation
/// would be.
pub const DEFAULT_ALIGN: u64 = 256;

/// Result alias of this module.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;
