//! Helpers of the tests that need a CUDA device. gpufile's GPU tests and the C API's include this
//! file by path, so it names the core crate `gpufile_core`, as the C API does (its own crate is
//! `gpufile`); gpufile's tests bring that name in with `extern crate gpufile as gpufile_core`.
//!
//! Every such test is `#[ignore = "needs a GPU: ..."]`: `cargo test` lists it as ignored, not
//! passed, where there is no GPU, and the GPU machine runs it with `--include-ignored`, where a
//! missing device fails it (see [`require_gpu`]) instead of passing without running.

/// Panics (fails the test) unless a CUDA device is usable, saying why not.
pub fn require_gpu() {
    match gpufile_core::device_count() {
        Ok(n) if n > 0 => {}
        Ok(_) => panic!(
            "the CUDA driver finds no device, and this test needs one (it runs where asked for \
             with --include-ignored: on the GPU machine)"
        ),
        Err(e) => panic!(
            "no usable CUDA driver ({e}), and this test needs a GPU (it runs where asked for \
             with --include-ignored: on the GPU machine)"
        ),
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

/// `limit` times GPUFILE_TEST_TIME_SCALE (default 1; the factor the Python tests' limits take
/// too): a wall-clock limit a slow or loaded machine may stretch.
#[allow(dead_code)] // the C API's test has no wall-clock limit
pub fn scaled(limit: std::time::Duration) -> std::time::Duration {
    let scale = std::env::var("GPUFILE_TEST_TIME_SCALE").map_or(1.0, |v| {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or_else(|| panic!("GPUFILE_TEST_TIME_SCALE={v:?}: a number above 0"))
    });
    limit.mul_f64(scale)
}
