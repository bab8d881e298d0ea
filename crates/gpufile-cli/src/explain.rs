//! `gpufile explain`: how a read would be split and which path each piece takes, from the
//! planner that runs it (gpufile_diag::explain); with `--run`, the read performed and its
//! observation printed beside the prediction.

use std::path::PathBuf;

use gpufile::__private::config;
use gpufile::{FileHandle, Memory};
use gpufile_diag::units::Units;

use crate::args::{parse_size_arg, OFFSET, SIZE};
use crate::destination::default_memory;
use crate::error::CliError;
use crate::range::{file_range, file_size};
use crate::{emit_json, out, CliResult};

/// FILE or --size (or both): a command line with neither is of the wrong shape (exit 2, with
/// clap's usage), as any missing argument is.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("what").args(["file", "size"]).required(true).multiple(true)))]
pub(crate) struct ExplainArgs {
    /// The file to explain (and read with --run); --size defaults to its size.
    file: Option<PathBuf>,
    /// Bytes to read, e.g. 1GiB (default: from --offset to the end of FILE).
    #[arg(long, allow_hyphen_values = true, value_parser = SIZE)]
    size: Option<String>,
    /// File offset, e.g. 1MiB.
    #[arg(long, default_value = "0", allow_hyphen_values = true, value_parser = OFFSET)]
    offset: String,
    /// task_size (default: the setting).
    #[arg(long, allow_hyphen_values = true, value_parser = SIZE)]
    task_size: Option<String>,
    /// num_threads (default: the setting).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=config::MAX_THREADS as i64))]
    threads: Option<u32>,
    /// compat_mode: on, off or auto (default: the setting).
    #[arg(long)]
    compat_mode: Option<String>,
    /// gds_threshold (default: the setting).
    #[arg(long)]
    gds_threshold: Option<String>,
    /// Into host memory (default: GPU 0 where CUDA has a device, else host memory, as `read`).
    #[arg(long, conflicts_with = "device")]
    host: bool,
    /// Into the memory of this GPU (a plan for another machine's GPU works without one here).
    #[arg(long, value_name = "N")]
    device: Option<i32>,
    /// What cuFile can do: probe this machine, or assume nvfs, compat or none.
    #[arg(long, default_value = "probe")]
    cufile: String,
    /// cufile.json to read (default: CUFILE_ENV_PATH_JSON or /etc/cufile.json).
    #[arg(long)]
    cufile_json: Option<PathBuf>,
    /// The buffer is registered with cuFile (memory_register).
    #[arg(long)]
    registered: bool,
    /// Perform the read and print prediction and observation side by side.
    #[arg(long, requires = "file")]
    run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// How rates print: decimal (GB/s, the default), binary (GiB/s, as gdsio prints) or both.
    #[arg(long, default_value = "decimal", value_name = "UNITS")]
    pub(crate) units: Units,
}

/// Explains (and with `--run` performs) the read `args` describe, and prints it.
pub(crate) fn run(args: &ExplainArgs, units: Units) -> CliResult {
    let to_usize = |what: &str, n: u64| -> Result<usize, CliError> {
        usize::try_from(n).map_err(|_| CliError::invalid(format!("--{what} is too large")))
    };
    let size_arg = |what: &str, t: &str| to_usize(what, parse_size_arg(what, t)?);
    let (file_offset, size) = match (&args.file, &args.size) {
        (Some(f), size) => {
            let h = FileHandle::open(f, "r")?;
            let file_size = file_size(f, &h)?;
            if args.run || size.is_none() {
                file_range(f, &args.offset, size.as_deref(), file_size)?
            } else {
                // A prediction may describe a read the file could not serve; --run checks.
                (
                    parse_size_arg("offset", &args.offset)?,
                    parse_size_arg("size", size.as_deref().unwrap_or("0"))?,
                )
            }
        }
        (None, Some(s)) => (
            parse_size_arg("offset", &args.offset)?,
            parse_size_arg("size", s)?,
        ),
        // The parser refuses it (the group `what` above).
        (None, None) => return Err(CliError::new("usage", "explain needs a FILE or --size")),
    };
    // As `read` does, with or without --run: where no memory is named, GPU 0 where CUDA has a
    // device, else host memory (a plan for another machine's GPU names --device).
    let (memory, fallback) = match (args.host, args.device) {
        (true, _) => (Memory::Host, None),
        (_, Some(_)) => (Memory::Device, None),
        (false, None) => default_memory(),
    };
    let req = gpufile_diag::explain::Request {
        size: to_usize("size", size)?,
        file_offset,
        memory,
        device: args.device.unwrap_or(0),
        task_size: args
            .task_size
            .as_deref()
            .map(|t| size_arg("task-size", t))
            .transpose()?,
        num_threads: args.threads.map(|n| n as usize),
        compat_mode: args
            .compat_mode
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e: String| CliError::invalid(format!("--compat-mode: {e}")))?,
        gds_threshold: args
            .gds_threshold
            .as_deref()
            .map(|t| size_arg("gds-threshold", t))
            .transpose()?,
        cufile: args.cufile.parse()?,
        cufile_json: args.cufile_json.clone(),
        registered_buffer: args.registered,
    };
    let mut outcome = gpufile_diag::explain::explain_and_run(&req, args.file.as_deref(), args.run)?;
    outcome.units = units;
    if let Some(why) = fallback {
        outcome
            .explanation
            .notes
            .insert(0, gpufile_diag::explain::host_fallback_note(&why));
    }
    if args.json {
        emit_json(&outcome.to_json());
    } else {
        out(&outcome.render());
    }
    Ok(())
}
