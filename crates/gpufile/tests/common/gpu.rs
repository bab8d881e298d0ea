//! Helpers of the tests that need a CUDA device. gpufile's GPU tests and the C API's include this
//! file by path, so it names the core crate `gpufile_core`, as the C API does (its own crate is
//! `gpufile`); gpufile's tests bring that name in with `extern crate gpufile as gpufile_core`.

use gpufile_core::cuda;

/// Whether a CUDA device is usable; where not, says why the test is skipped and the test returns
/// early (as on CI).
pub fn gpu() -> bool {
    match cuda::device_count() {
        Ok(n) if n > 0 => true,
        Ok(_) => {
            eprintln!("skipped: no CUDA device");
            false
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// The process settings with gpufile's POSIX path forced (`compat_mode` on), so a test covers
/// the bounce executor whether or not cuFile is installed.
#[allow(dead_code)] // the C API's test reads through its own entry points and does not use it
pub fn on_posix_path() -> gpufile_core::Settings {
    gpufile_core::Settings {
        compat_mode: gpufile_core::CompatMode::On,
        ..gpufile_core::Engine::global().unwrap().settings()
    }
}
