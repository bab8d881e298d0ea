//! `gpufile read`: a whole file (or a range), or a remote object, read into GPU or host memory
//! `--repeat` times; bytes, the median time, throughput and the path taken are printed.
//!
//! How it runs, one named step each:
//! 1. [`run_settings`]: the settings with this run's flags applied (the process defaults stay).
//! 2. [`ReadSource::open`] and [`read_range`]: the file or object, and the range checked against
//!    its size before any memory is allocated.
//! 3. [`Destination::choose`] and [`ReadSource::plan`]: the memory, and the path the read takes.
//! 4. [`timed_runs`]: the reads, observed ([`gpufile::observe`]) and timed one by one.
//! 5. [`verify`] (`--verify`): the bytes read against a plain read of the same range.
//! 6. [`Outcome`]: the report, as text or as docs/json.md's `read` object.

use std::path::{Path, PathBuf};
use std::time::Instant;

use gpufile::StopFlag;
use gpufile::{Engine, Request, Settings};
use gpufile::{Input, Name};
use gpufile_diag::units::{self, Units};
use gpufile_remote::RemoteStats;

use crate::args::{OFFSET, SIZE};
use crate::destination::Destination;
use crate::error::CliError;
use crate::interrupt::Interrupts;
use crate::progress::wait_with_progress;
use crate::range::{file_range, file_size};
use crate::{emit_json, CliResult};

mod report;
mod source;

use report::Outcome;
pub(crate) use source::plain_remote_read;
use source::ReadSource;

#[derive(clap::Args, Debug)]
pub(crate) struct ReadArgs {
    /// The file to read: a regular file, or a URL (http://, https://, s3://, gs://, webhdfs://...)
    /// read by ranged requests.
    file: PathBuf,
    /// Worker threads (default: the `num_threads` setting).
    #[arg(long, short = 't')]
    threads: Option<String>,
    /// Task size, e.g. 4MiB (default: the `task_size` setting).
    #[arg(long, allow_hyphen_values = true, value_parser = SIZE)]
    task_size: Option<String>,
    /// compat_mode: on, off or auto (default: the `compat_mode` setting).
    #[arg(long)]
    compat_mode: Option<String>,
    /// File offset to start at, e.g. 1GiB (past the end of the file is an error).
    #[arg(long, default_value = "0", allow_hyphen_values = true, value_parser = OFFSET)]
    offset: String,
    /// Bytes to read (default: to the end of the file; past the end is an error).
    #[arg(long, allow_hyphen_values = true, value_parser = SIZE)]
    size: Option<String>,
    /// Read this many times into the same buffer and report the median (the first run also pays
    /// for touching fresh memory).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_REPEAT as i64))]
    repeat: u32,
    /// Read into host memory even where a GPU exists.
    #[arg(long, conflicts_with = "device")]
    host: bool,
    /// Read into the memory of this GPU (default: GPU 0 where CUDA works, else host memory).
    #[arg(long, value_name = "N")]
    device: Option<i32>,
    /// Check the bytes read against a plain read of the file.
    #[arg(long)]
    verify: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// How rates print: decimal (GB/s, the default), binary (GiB/s, as gdsio prints) or both.
    #[arg(long, default_value = "decimal", value_name = "UNITS")]
    pub(crate) units: Units,
}

/// Most `--repeat` runs one `gpufile read` makes.
const MAX_REPEAT: u32 = 100_000;

/// What an interrupted `read` says became of its work.
const NOTHING_REPORTED: &str = "the read was stopped; nothing is reported";

/// Reads as `args` asks and prints the report.
pub(crate) fn run(args: &ReadArgs, units: Units) -> CliResult {
    let settings = run_settings(args)?;
    // From here on a Ctrl-C stops the command (every step below looks or waits stoppably).
    let interrupts = Interrupts::catch()?;
    let source = ReadSource::open(&args.file, &interrupts)?;
    let shown = source.shown(&args.file);
    let (offset, size) = read_range(args, &source, &shown)?;
    let (mut dest, why_host) = Destination::choose(args.host, args.device, size, "")?;
    let path = interrupts.stoppable(|stop| source.plan(&mut dest, (offset, size), &settings, stop));
    interrupts.check_that(NOTHING_REPORTED)?;
    let path = path?;

    let remote_before = source.remote_stats();
    let observation = gpufile::observe::begin();
    let runs = timed_runs(
        args,
        units,
        &source,
        &mut dest,
        (offset, size),
        &settings,
        &interrupts,
    );
    let observed = gpufile::observe::end(observation);
    let runs = runs?;
    // Over the runs only: the size request at open and --verify's read are not counted.
    let remote = runs_only(source.remote_stats(), remote_before);
    let verified = if args.verify {
        let checked = interrupts
            .stoppable(|stop| verify(&source, &args.file, &dest, (offset, size), &shown, stop));
        interrupts.check_that(NOTHING_REPORTED)?;
        checked?;
        Some(true)
    } else {
        None
    };
    // A signal as the last run ended: no report either.
    interrupts.check_that(NOTHING_REPORTED)?;
    let seconds = median(&runs);
    let outcome = Outcome {
        source: &source,
        shown,
        offset,
        size,
        dest: &dest,
        why_host,
        settings: &settings,
        path,
        remote,
        repeat: args.repeat,
        runs,
        seconds,
        verified,
        observed,
    };
    if args.json {
        emit_json(&outcome.to_json());
    } else {
        outcome.print(units);
    }
    Ok(())
}

/// The settings this run takes: the flags apply to this run only, the process defaults stay as
/// they are.
fn run_settings(args: &ReadArgs) -> Result<Settings, CliError> {
    let mut updates = Vec::new();
    if let Some(t) = &args.threads {
        updates.push((Name::NumThreads, Input::Text(t)));
    }
    if let Some(t) = &args.task_size {
        updates.push((Name::TaskSize, Input::Text(t)));
    }
    if let Some(t) = &args.compat_mode {
        updates.push((Name::CompatMode, Input::Text(t)));
    }
    Ok(Engine::global()?.settings_with(&updates)?)
}

/// `--offset` and `--size` against the size of the file or object (`shown` names it): refused
/// here, before any memory is allocated for it.
fn read_range(args: &ReadArgs, source: &ReadSource, shown: &str) -> Result<(u64, usize), CliError> {
    let object_size = match source {
        ReadSource::Local(file) => file_size(&args.file, file)?,
        ReadSource::Remote(remote) => remote.nbytes(),
    };
    let (offset, size) = file_range(
        Path::new(shown),
        &args.offset,
        args.size.as_deref(),
        object_size,
    )?;
    let size = usize::try_from(size).map_err(|_| "--size is too large for this machine")?;
    Ok((offset, size))
}

/// Reads `range` (offset, size) into `dest` `--repeat` times; the seconds each run took. A
/// caught signal stops the run in flight and ends the command (no report of cut runs).
fn timed_runs(
    args: &ReadArgs,
    units: Units,
    source: &ReadSource,
    dest: &mut Destination,
    (offset, size): (u64, usize),
    settings: &Settings,
    interrupts: &Interrupts,
) -> Result<Vec<f64>, CliError> {
    let mut runs = Vec::new();
    for _ in 0..args.repeat {
        interrupts.check_that(NOTHING_REPORTED)?;
        let start = Instant::now();
        let req = Request::read(dest.buffer(0, size), offset);
        // SAFETY: `dest` outlives the future: it is waited on below (an interrupted wait
        // included), before `dest` is used again or dropped.
        let fut = unsafe { Engine::global()?.submit(&source.endpoint(), req, settings) }?;
        let show = !args.json;
        let n = wait_with_progress(&fut, size as u64, show, units, interrupts, NOTHING_REPORTED)?;
        runs.push(start.elapsed().as_secs_f64());
        if n != size {
            return Err(format!(
                "read {}, expected {size}",
                units::count(n as u64, "byte", "bytes")
            )
            .into());
        }
    }
    Ok(runs)
}

/// The remote counters' growth from `before` to `after` (None for a local file).
fn runs_only(after: Option<RemoteStats>, before: Option<RemoteStats>) -> Option<RemoteStats> {
    after.zip(before).map(|(after, before)| RemoteStats {
        requests: after.requests - before.requests,
        retries: after.retries - before.retries,
        bytes: after.bytes - before.bytes,
    })
}

/// `--verify`: the bytes in `dest` against a plain read of the same range, an error where they
/// differ.
fn verify(
    source: &ReadSource,
    file: &Path,
    dest: &Destination,
    (offset, size): (u64, usize),
    shown: &str,
    stop: &StopFlag,
) -> Result<(), CliError> {
    let expect = source.plain_read(file, offset, size, stop)?;
    let mut got = vec![0u8; dest.len()];
    dest.copy_out(0, &mut got)?;
    if got != expect {
        return Err(CliError::new(
            "verification-failed",
            format!("verification failed: the bytes read differ from {shown}"),
        )
        .with_path(shown));
    }
    Ok(())
}

/// The median of the runs' seconds (the upper one of an even count).
fn median(runs: &[f64]) -> f64 {
    let mut sorted = runs.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}
