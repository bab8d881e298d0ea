//! Safe wrappers over the CUDA driver: pointer classification, context guards, streams, events,
//! pinned and device memory.
//!
//! How to use:
//! 1. [`classify`] a device address: its memory kind, device, owning context and allocation.
//! 2. [`ContextGuard::push`] the pointer's own context (not whatever is current) on the thread
//!    that copies, and use a [`Stream`] created in that context.
//! 3. [`PinnedBuffer`] (page-aligned, portable) and [`DeviceBuffer`] free themselves on drop.
//!
//! One module per concern, all re-exported here: `result` (the only place that calls the driver:
//! each entry point once, its status turned into a `Result`), `device` (version, devices, their
//! attributes), `context` (contexts, primary contexts, guards), `pointer` ([`classify`]),
//! `app_stream` (work on an application's stream handle), `kernel` (gpufile's gather kernel), `mark` ([`StreamWait`] and
//! [`StreamMark`]), `stream` (the [`Stream`]s and [`Event`]s gpufile owns) and `memory` (pinned,
//! registered and device memory).
//!
//! Nothing here loads `libcuda.so.1` until it is called: host-only work never touches CUDA.

mod app_stream;
mod context;
mod device;
mod kernel;
mod mark;
mod memory;
mod pointer;
mod result;
mod stream;

pub use app_stream::{
    copy_on_stream, launch_host_func, stream_idle, stream_wait_value32, synchronize_stream,
    StreamCopy,
};
pub use context::{context_device, current_context, primary_context, Context, ContextGuard};
pub use device::{
    device_count, device_name, device_pci_address, device_total_memory, driver_version,
    stream_ops_support, StreamOpsSupport,
};
pub use kernel::{gather_kernel, GatherKernel, GatherPiece};
pub use mark::{StreamMark, StreamWait};
pub use memory::{DeviceBuffer, HostRegistration, PinnedBuffer};
pub use pointer::{classify, DeviceTarget, MemoryKind, PointerInfo};
pub(crate) use result::api;
pub use stream::{Event, Stream};
