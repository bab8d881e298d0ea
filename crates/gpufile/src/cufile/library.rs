//! Finding and loading `libcufile.so.0` (once per process; `gpufile-sys` keeps the outcome).

use std::path::PathBuf;
use std::sync::Mutex;

use gpufile_sys::cufile::{self as sys, CufileApi};

use crate::error::{Error, Result};

/// Folders given by [`set_search_dirs`]: process-wide because the library loads once.
static SEARCH_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Folders to search for `libcufile.so.0` before the system loader (the Python package passes
/// the `nvidia/cu13/lib` and `nvidia/cufile/lib` folders of its site-packages). Only the first
/// load attempt uses them.
pub fn set_search_dirs(dirs: Vec<PathBuf>) {
    *SEARCH_DIRS.lock().unwrap_or_else(|e| e.into_inner()) = dirs;
}

/// Where gpufile looks, in order: `GPUFILE_CUFILE_PATH` (a file or a folder), the folders given
/// to [`set_search_dirs`], the system loader, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`.
pub fn candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = crate::config::cufile_path() {
        v.push(if p.is_dir() {
            p.join("libcufile.so.0")
        } else {
            p
        });
    }
    let extra = SEARCH_DIRS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    v.extend(extra.into_iter().map(|d| d.join("libcufile.so.0")));
    v.extend(sys::system_candidates());
    v
}

/// The loaded library, or why it did not load.
pub fn library() -> Result<&'static sys::Loaded> {
    sys::cufile(&candidates()).map_err(|e| Error::CufileUnavailable {
        reason: e.to_string(),
    })
}

/// The library's functions (loads it on first use).
pub(super) fn api() -> Result<&'static CufileApi> {
    Ok(&library()?.api)
}

/// `(major, minor)` of the loaded cuFile, where it says (`cuFileGetVersion`, 1.15+).
pub fn version() -> Result<Option<(i32, i32)>> {
    Ok(api()?.version())
}
