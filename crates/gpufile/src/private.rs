//! What gpufile's own crates (the Python binding, the C ABI, the CLI, diagnostics, the remote
//! crate) need of the core beyond its public API. Hidden from the documentation and outside any
//! stability promise: the core changes these with its front ends in one commit. Nothing here is
//! for other crates to use.

/// Gathering many operations into requests (the bindings' batch calls).
pub mod batch {
    pub use crate::batch::{interleave, submit, Op, OpBuffer, Piece, Submission};
}

/// The settings table, its sources and its names (the bindings' `defaults`, the CLI's
/// `config`).
pub mod config {
    pub use crate::config::{
        parse_size, remote_io_started, take_unknown_env_warnings, validate, Kind, State,
        MAX_THREADS,
    };
}

/// CUDA's driver API as the front ends call it (devices, contexts, streams, memory).
pub mod cuda {
    pub use crate::cuda::{
        classify, context_device, current_context, device_name, device_pci_address,
        device_total_memory, driver_version, primary_context, stream_idle, stream_wait_value32,
        synchronize_stream, Context, ContextGuard, Event, MemoryKind, PinnedBuffer, PointerInfo,
        Stream, StreamWait,
    };
}

/// cuFile's driver, buffers, configuration and properties (KvikIO's `cufile` functions).
pub mod cufile {
    pub use crate::cufile::{
        availability, bar_size_kb, buf_deregister, buf_register, config_path, driver_close,
        driver_open, driver_setting, library, p2p_flags, parameter_limits, parameters, properties,
        read_config, registered_files, set_driver_setting, set_search_dirs, stream_deregister,
        stream_register, version, DriverSetting, DriverValue, P2pFlags, Properties, RegisteredFile,
        StorageType, SIZE_T_PARAMETERS,
    };
}

/// The host I/O decision of a gather, for `explain`.
pub mod engine {
    pub use crate::engine::host_io;
}

/// The error table's helpers: the cross-binding tests' errors, OS messages, the remote
/// crate's error kinds.
pub mod error {
    pub use crate::error::{one_of_each, os_message, register_source_kind};
}

/// Executor facts `explain` reports.
pub mod exec {
    pub use crate::exec::uring::probe as uring_probe;
}

/// What the remote crate counts where it happens (KvikIO 26.10's `statistics::Counters`).
pub mod observe {
    pub use crate::observe::counters::{
        count_http_connection, count_http_retry, count_remote_size_probe,
    };
}

/// KvikIO's page-cache functions.
pub mod pagecache {
    pub use crate::pagecache::{
        drop_file_page_cache, drop_system_page_cache, open, page_cache_info,
    };
}

/// The plan's decisions, for `explain` and `check` (which show them without running them).
pub mod plan {
    pub use crate::plan::{
        after_registration, check_task_size, choose_path, page_cache_dma, plan_request,
        Availability, Machine, Needs, Policy, Shape, Strategy, DMA_GRANULE, DMA_MIN_REQUEST,
    };
}

/// Injected system-call faults, for the bindings' tests.
pub mod posix {
    pub use crate::posix::faults;
}

/// Crash-safe publication of new files (the Python package's writers).
pub mod publish {
    pub use crate::publish::{
        is_temporary, remove_stale_temporaries, sync_dir, DirLock, PendingFile, WriteBehind,
    };
}

/// The safetensors writer's steps that the remote crate's checkpoint save shares with the
/// local one, and the bindings' helpers.
pub mod safetensors {
    pub use crate::formats::safetensors::resolve_inside;
    pub use crate::formats::safetensors::save::checkpoint::{layout, CheckpointLayout, INDEX_NAME};
    pub use crate::formats::safetensors::save::write::{submit_files, FileToWrite, STOP_POLL};
    pub use crate::formats::safetensors::save::{plan_save, SavePlan, SaveTensor};
}

/// Requests queued on an application's CUDA stream.
pub mod stream {
    pub use crate::stream::{submit, OnStream, StreamOrder};
}
