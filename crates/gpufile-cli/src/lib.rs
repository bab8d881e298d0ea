//! The `gpufile` command line: `config`, `read`, `check`, `explain`, `bench`.
//!
//! The same [`run`] serves the standalone binary and `python -m gpufile`, so both behave alike.
//! It never exits the process itself: it returns the exit status.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

mod bench;
use gpufile::config::{self, Input, Name, Settings};
use gpufile::{Buffer, Engine, FileHandle, Memory, Request};

/// Move file data into GPU and host memory, fast, and say which path ran.
#[derive(Parser, Debug)]
#[command(name = "gpufile", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print every effective setting and where it came from (default, environment, set).
    Config {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Read a whole file (or a range) and print bytes, time, throughput and the path taken.
    Read(ReadArgs),
    /// What this machine offers for GPU file I/O, and the path each compat_mode would take.
    Check {
        /// Also check this file (file system, block device, O_DIRECT, cuFile registration).
        path: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// How a read would be split and which path each piece takes (the planner that runs it).
    Explain(ExplainArgs),
    /// A gdsio-like sweep: sizes × threads × task sizes × compat modes × ops × cache × memory.
    Bench(bench::BenchArgs),
}

#[derive(clap::Args, Debug)]
struct ExplainArgs {
    /// Bytes to read, e.g. 1GiB.
    #[arg(long)]
    size: String,
    /// File offset.
    #[arg(long, default_value = "0")]
    offset: String,
    /// task_size (default: the setting).
    #[arg(long)]
    task_size: Option<String>,
    /// num_threads (default: the setting).
    #[arg(long)]
    threads: Option<usize>,
    /// compat_mode: on, off or auto (default: the setting).
    #[arg(long)]
    compat_mode: Option<String>,
    /// gds_threshold (default: the setting).
    #[arg(long)]
    gds_threshold: Option<String>,
    /// Into host memory (default: device memory).
    #[arg(long, conflicts_with = "device")]
    host: bool,
    /// Into device memory (the default).
    #[arg(long)]
    device: bool,
    /// What cuFile can do: probe this machine, or assume nvfs, compat or none.
    #[arg(long, default_value = "probe")]
    cufile: String,
    /// cufile.json to read (default: CUFILE_ENV_PATH_JSON or /etc/cufile.json).
    #[arg(long)]
    cufile_json: Option<PathBuf>,
    /// The buffer is registered with cuFile (memory_register).
    #[arg(long)]
    registered: bool,
    /// A file to read with --run.
    file: Option<PathBuf>,
    /// Perform the read and print prediction and observation side by side.
    #[arg(long, requires = "file")]
    run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct ReadArgs {
    /// The file to read.
    file: PathBuf,
    /// Worker threads (default: the `num_threads` setting).
    #[arg(long, short = 't')]
    threads: Option<String>,
    /// Task size, e.g. 4MiB (default: the `task_size` setting).
    #[arg(long)]
    task_size: Option<String>,
    /// compat_mode: on, off or auto (default: the `compat_mode` setting).
    #[arg(long)]
    compat_mode: Option<String>,
    /// File offset to start at, e.g. 1GiB.
    #[arg(long, default_value = "0")]
    offset: String,
    /// Bytes to read (default: to the end of the file).
    #[arg(long)]
    size: Option<String>,
    /// Read this many times into the same buffer and report the median (the first run also pays
    /// for touching fresh memory).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Read into host memory even where a GPU exists.
    #[arg(long, conflicts_with = "device")]
    host: bool,
    /// Read into the memory of this GPU (default: GPU 0 where CUDA works, else host memory).
    #[arg(long)]
    device: Option<i32>,
    /// Check the bytes read against a plain read of the file.
    #[arg(long)]
    verify: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Where `gpufile read` puts the bytes.
enum Destination {
    Host(Vec<u8>),
    Device {
        buf: gpufile::cuda::DeviceBuffer,
        ordinal: i32,
        name: String,
    },
}

impl Destination {
    /// GPU `--device N`, host with `--host`, else GPU 0 if CUDA works (with the reason if not).
    fn choose(args: &ReadArgs, size: usize) -> Result<(Self, Option<String>), gpufile::Error> {
        let gpu = |ordinal: i32| -> Result<Self, gpufile::Error> {
            let name = gpufile::cuda::device_name(ordinal)?;
            let buf = gpufile::cuda::DeviceBuffer::new(size, ordinal)?;
            Ok(Destination::Device { buf, ordinal, name })
        };
        if args.host {
            return Ok((Destination::Host(vec![0u8; size]), None));
        }
        if let Some(ordinal) = args.device {
            return Ok((gpu(ordinal)?, None));
        }
        let why_host = match gpufile::cuda::device_count() {
            Ok(0) => "no CUDA device".to_string(),
            Ok(_) => return Ok((gpu(0)?, None)),
            Err(e) => e.to_string(),
        };
        Ok((Destination::Host(vec![0u8; size]), Some(why_host)))
    }

    fn memory(&self) -> Memory {
        match self {
            Destination::Host(_) => Memory::Host,
            Destination::Device { .. } => Memory::Device,
        }
    }

    fn describe(&self) -> String {
        match self {
            Destination::Host(_) => "host".into(),
            Destination::Device { ordinal, name, .. } => format!("device {ordinal} ({name})"),
        }
    }

    /// Starts a read of the whole destination under `settings`.
    fn start(
        &mut self,
        file: &FileHandle,
        offset: u64,
        settings: &Settings,
    ) -> gpufile::Result<gpufile::IoFuture> {
        let buffer = match self {
            Destination::Host(v) => Buffer::host(v),
            Destination::Device { buf, .. } => Buffer::Device {
                addr: buf.addr(),
                len: buf.len(),
            },
        };
        // SAFETY: the destination outlives the future: every caller waits on it before the
        // destination can be dropped or reused.
        unsafe { file.submit(Request::read(buffer, offset), Some(settings)) }
    }

    fn to_host(&self) -> gpufile::Result<Vec<u8>> {
        match self {
            Destination::Host(v) => Ok(v.clone()),
            Destination::Device { buf, .. } => {
                let mut v = vec![0u8; buf.len()];
                buf.copy_to_host(0, &mut v)?;
                Ok(v)
            }
        }
    }
}

/// Runs the command line `args` (the first item is the program name); returns the exit status.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let result = match cli.command {
        Command::Config { json } => cmd_config(json),
        Command::Read(args) => cmd_read(&args),
        Command::Check { path, json } => cmd_check(path.as_deref(), json),
        Command::Explain(args) => cmd_explain(&args),
        Command::Bench(args) => bench::run(&args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gpufile: error: {e}");
            1
        }
    }
}

type CliResult = Result<(), Box<dyn std::error::Error>>;

fn out(text: &str) {
    // A closed pipe (`gpufile config | head`) is not an error worth a panic.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn cmd_config(json: bool) -> CliResult {
    let rows = Engine::global()?.report();
    if json {
        let map: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(name, value, source)| {
                let entry = serde_json::json!({ "value": value, "source": source.to_string() });
                (name.to_string(), entry)
            })
            .collect();
        out(&format!("{}\n", serde_json::to_string_pretty(&map)?));
        return Ok(());
    }
    let mut text = format!("{:<22} {:<26} {}\n", "setting", "value", "source");
    for (name, value, source) in rows {
        text += &format!(
            "{:<22} {:<26} {}\n",
            name.as_str(),
            value.to_string(),
            source
        );
    }
    out(&text);
    Ok(())
}

fn cmd_check(path: Option<&std::path::Path>, json: bool) -> CliResult {
    let report = gpufile_diag::check::check(path);
    if json {
        out(&format!("{}\n", serde_json::to_string_pretty(&report)?));
    } else {
        out(&report.render());
    }
    Ok(())
}

fn cmd_explain(args: &ExplainArgs) -> CliResult {
    let size = |what, t: &str| -> Result<usize, String> {
        usize::try_from(parse_size_arg(what, t)?).map_err(|_| format!("--{what} is too large"))
    };
    let req = gpufile_diag::explain::Request {
        size: size("size", &args.size)?,
        file_offset: parse_size_arg("offset", &args.offset)?,
        memory: if args.host {
            Memory::Host
        } else {
            Memory::Device
        },
        task_size: args
            .task_size
            .as_deref()
            .map(|t| size("task-size", t))
            .transpose()?,
        num_threads: args.threads,
        compat_mode: args
            .compat_mode
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e: String| format!("--compat-mode: {e}"))?,
        gds_threshold: args
            .gds_threshold
            .as_deref()
            .map(|t| size("gds-threshold", t))
            .transpose()?,
        cufile: args.cufile.parse()?,
        cufile_json: args.cufile_json.clone(),
        registered_buffer: args.registered,
    };
    let outcome = gpufile_diag::explain::explain_and_run(&req, args.file.as_deref(), args.run)?;
    if args.json {
        out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&outcome.to_json())?
        ));
    } else {
        out(&outcome.render());
    }
    Ok(())
}

fn parse_size_arg(what: &str, text: &str) -> Result<u64, String> {
    config::parse_size(text).map_err(|e| format!("--{what} {text:?}: {e}"))
}

/// Most `--repeat` runs one `gpufile read` makes.
const MAX_REPEAT: u32 = 100_000;

fn cmd_read(args: &ReadArgs) -> CliResult {
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
    // The flags apply to this run only: the process defaults stay as they are.
    let settings = Engine::global()?.settings_with(&updates)?;
    if !(1..=MAX_REPEAT).contains(&args.repeat) {
        return Err(format!("--repeat {}: expected 1 to {MAX_REPEAT}", args.repeat).into());
    }

    let file = FileHandle::open(&args.file, "r")?;
    let offset = parse_size_arg("offset", &args.offset)?;
    let file_size = file.size()?;
    let size = match &args.size {
        Some(s) => parse_size_arg("size", s)?,
        None => file_size.saturating_sub(offset),
    };
    // Refused before any memory is allocated for it.
    if offset.saturating_add(size) > file_size {
        return Err(gpufile::Error::UnexpectedEof {
            path: args.file.clone(),
            offset,
            len: usize::try_from(size).unwrap_or(usize::MAX),
            file_size,
        }
        .into());
    }
    let size = usize::try_from(size).map_err(|_| "--size is too large for this machine")?;
    let (mut dest, why_host) = Destination::choose(args, size)?;
    let path = file.io_path(dest.memory(), size, &settings)?;

    let observation = gpufile::observe::begin();
    let mut runs = Vec::new();
    for _ in 0..args.repeat {
        let start = Instant::now();
        let fut = dest.start(&file, offset, &settings)?;
        let n = wait_with_progress(&fut, size as u64, !args.json)?;
        runs.push(start.elapsed().as_secs_f64());
        if n != size {
            return Err(format!("read {n} bytes, expected {size}").into());
        }
    }
    let report = gpufile::observe::end(observation);
    let verified = if args.verify {
        let mut expect = vec![0u8; size];
        let f = std::fs::File::open(&args.file)?;
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut expect, offset)?;
        if dest.to_host()? != expect {
            return Err("verification failed: the bytes read differ from the file".into());
        }
        Some(true)
    } else {
        None
    };
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    let seconds = sorted[sorted.len() / 2];
    let gbps = if seconds > 0.0 {
        size as f64 / seconds / 1e9
    } else {
        0.0
    };

    if args.json {
        let report = serde_json::json!({
            "file": args.file,
            "offset": offset,
            "bytes": size,
            "seconds": seconds,
            "gb_per_s": gbps,
            "runs_seconds": runs,
            "memory": dest.memory(),
            "destination": dest.describe(),
            "host_because": why_host,
            "verified": verified,
            "path": { "backend": path.backend, "reason": path.reason.to_string() },
            "num_threads": settings.num_threads,
            "task_size": settings.task_size,
            "compat_mode": settings.compat_mode.name(),
            "observed": report.to_json(),
        });
        out(&format!("{}\n", serde_json::to_string_pretty(&report)?));
    } else {
        let runs_note = if args.repeat > 1 {
            format!(" (median of {} runs)", args.repeat)
        } else {
            String::new()
        };
        out(&format!(
            "file        {}\nbytes       {} ({})\nseconds     {:.6}{}\nthroughput  {:.2} GB/s\n\
             memory      {}{}\npath        {}\nreason      {}\nthreads     {}\ntask_size   {}\n{}",
            args.file.display(),
            size,
            human_bytes(size as u64),
            seconds,
            runs_note,
            gbps,
            dest.describe(),
            why_host.map(|w| format!(" ({w})")).unwrap_or_default(),
            path.backend,
            path.reason,
            settings.num_threads,
            settings.task_size,
            if verified == Some(true) {
                "verified    bytes match the file\n"
            } else {
                ""
            },
        ));
        match (report.cufile.ops, report.cufile_stats) {
            (0, _) => {}
            (_, Some(s)) => out(&format!(
                "cufile      {} (cuFile's counters: n={} nvfs={} posix={})\n",
                report
                    .cufile_path()
                    .unwrap_or("no cuFile operation counted"),
                s.n_reads,
                s.nvfs_reads,
                s.posix_reads
            )),
            (_, None) => out(&format!(
                "cufile      counters unavailable: {}\n",
                report.cufile_stats_note.as_deref().unwrap_or("unknown")
            )),
        }
    }
    Ok(())
}

/// Waits for a read, drawing a progress bar on a terminal for reads that take a while.
fn wait_with_progress(
    fut: &gpufile::IoFuture,
    total: u64,
    show_progress: bool,
) -> gpufile::Result<usize> {
    const BAR_MIN_BYTES: u64 = 256 << 20;
    if !show_progress || total < BAR_MIN_BYTES {
        return fut.wait();
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let result = loop {
        if let Some(r) = fut.wait_timeout(Duration::from_millis(50)) {
            break r;
        }
        bar.set_position(fut.bytes_transferred());
    };
    bar.finish_and_clear();
    result
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}
