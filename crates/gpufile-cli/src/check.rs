//! `gpufile check`: what this machine offers for GPU file I/O and, given a file, what its file
//! system allows (gpufile_diag::check gathers and renders the report).

use std::path::Path;

use gpufile::{Engine, FileHandle};

use crate::error::CliError;
use crate::{emit_json, out, CliResult};

/// Prints the report for this machine (and `path`): text, or JSON with `json`.
pub(crate) fn run(path: Option<&Path>, json: bool) -> CliResult {
    // A `KVIKIO_*`/`GPUFILE_*` variable that does not parse is refused, as by every command.
    Engine::global()?;
    // A file that cannot be opened is an error (exit 1), as it is for `read`.
    if let Some(p) = path {
        FileHandle::open(p, "r")?;
    }
    let report = gpufile_diag::check::check(path);
    if let Some(e) = report.file_error() {
        return Err(CliError::new("os", e).with_path(path.unwrap_or(Path::new(""))));
    }
    if json {
        emit_json(&report.to_json());
    } else {
        out(&report.render());
    }
    Ok(())
}
