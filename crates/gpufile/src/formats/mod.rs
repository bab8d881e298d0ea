//! File formats whose bytes gpufile reads: a header parser and a plan of byte ranges per format.
//!
//! How to use:
//! 1. Parse the format's header ([`safetensors::Header::read`], or
//!    [`safetensors::Checkpoint::open`] for a sharded checkpoint). Parsers are pure over bytes and
//!    validate everything before a byte of data is read; errors name the file and the entry.
//! 2. Ask for a plan ([`safetensors::Checkpoint::plan`]): the byte ranges to read for a selection,
//!    coalesced where adjacent, and where each entry lands in one destination allocation.
//! 3. Hand the ranges to the I/O layer (all at once: one stream of requests).
//!
//! A new format is one new module here; nothing else in the tree changes.

pub mod safetensors;
