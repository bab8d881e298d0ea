//! `gpufile._native`: the PyO3 bindings, split by domain. Conversion and GIL release only; the
//! logic lives in the `gpufile` crate (and `gpufile-diag` for check/explain), the KvikIO-shaped
//! façade in `python/gpufile/`.

use pyo3::prelude::*;

mod batch;
mod buffer;
mod callbacks;
mod cufile;
mod dlpack;
mod errors;
mod file;
mod future;
mod kinds;
mod mmap;
mod notices;
mod ranges;
mod remote;
mod remote_open;
mod remote_write;
mod request;
mod safetensors;
mod safetensors_save;
mod settings;
mod statistics;
mod stoppable;
mod tools;

/// gpufile's native extension.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", gpufile::VERSION)?;
    m.add("GpufileError", py.get_type::<errors::GpufileError>())?;
    m.add("EndOfFileError", py.get_type::<errors::EndOfFileError>())?;
    m.add("CudaError", py.get_type::<errors::CudaError>())?;
    m.add("CufileError", py.get_type::<errors::CufileError>())?;
    errors::register(m)?;
    m.add_class::<file::NativeFile>()?;
    m.add_class::<future::NativeFuture>()?;
    m.add_class::<future::NativeBatchFuture>()?;
    m.add_class::<mmap::NativeMmap>()?;
    m.add_class::<settings::SettingsSnapshot>()?;
    m.add_class::<tools::Observation>()?;
    for f in [
        wrap_pyfunction!(settings::settings_get, m)?,
        wrap_pyfunction!(settings::settings_set, m)?,
        wrap_pyfunction!(settings::settings_report, m)?,
        wrap_pyfunction!(settings::settings_snapshot, m)?,
        wrap_pyfunction!(settings::bounce_buffer_free, m)?,
        wrap_pyfunction!(settings::bounce_buffer_pooled, m)?,
        wrap_pyfunction!(settings::dma_cache_registered, m)?,
        wrap_pyfunction!(settings::dma_cache_clear, m)?,
        wrap_pyfunction!(cufile::cufile_set_search_dirs, m)?,
        wrap_pyfunction!(cufile::cufile_version, m)?,
        wrap_pyfunction!(cufile::cufile_library, m)?,
        wrap_pyfunction!(cufile::cufile_properties, m)?,
        wrap_pyfunction!(cufile::cufile_parameters, m)?,
        wrap_pyfunction!(cufile::cufile_config, m)?,
        wrap_pyfunction!(cufile::cufile_driver_open, m)?,
        wrap_pyfunction!(cufile::cufile_driver_close, m)?,
        wrap_pyfunction!(cufile::cufile_driver_get, m)?,
        wrap_pyfunction!(cufile::cufile_driver_set, m)?,
        wrap_pyfunction!(cufile::memory_register, m)?,
        wrap_pyfunction!(cufile::memory_deregister, m)?,
        wrap_pyfunction!(cufile::stream_synchronize, m)?,
        wrap_pyfunction!(cufile::stream_register, m)?,
        wrap_pyfunction!(cufile::stream_deregister, m)?,
        wrap_pyfunction!(tools::observe_begin, m)?,
        wrap_pyfunction!(tools::observe_end, m)?,
        wrap_pyfunction!(tools::stats, m)?,
        wrap_pyfunction!(tools::take_notices, m)?,
        wrap_pyfunction!(tools::take_env_warnings, m)?,
        wrap_pyfunction!(tools::check, m)?,
        wrap_pyfunction!(tools::explain, m)?,
        wrap_pyfunction!(tools::_inject_faults, m)?,
        wrap_pyfunction!(tools::in_flight, m)?,
        wrap_pyfunction!(tools::page_cache_info, m)?,
        wrap_pyfunction!(tools::drop_file_page_cache, m)?,
        wrap_pyfunction!(tools::drop_system_page_cache, m)?,
        wrap_pyfunction!(tools::compat_mode_preferred, m)?,
        wrap_pyfunction!(tools::shutdown, m)?,
        wrap_pyfunction!(tools::cli_main, m)?,
        wrap_pyfunction!(batch::submit_batch, m)?,
        wrap_pyfunction!(batch::submit_ops, m)?,
        wrap_pyfunction!(batch::interleave, m)?,
        wrap_pyfunction!(future::when_all, m)?,
        wrap_pyfunction!(callbacks::callbacks_close, m)?,
    ] {
        m.add_function(f)?;
    }
    safetensors::register(m)?;
    safetensors_save::register(m)?;
    remote::register(m)?;
    remote_open::register(m)?;
    remote_write::register(m)?;
    statistics::register(m)?;
    Ok(())
}
