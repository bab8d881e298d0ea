//! The `gpufile` command line: `config`, `read`, `check`, `explain`, `bench`, `load`.
//!
//! The same [`run`] serves the standalone binary and `python -m gpufile`, so both behave alike.
//! It never exits the process itself: it returns the exit status (0 success, 1 an error, 2 a
//! usage error). With `--json`, stdout carries one JSON object, an error included
//! (docs/json.md); sizes print with units and rates with theirs (`--units`).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use serde_json::{json, Value};

mod bench;
mod destination;
mod error;
mod interrupt;
mod load;
use destination::{default_memory, Destination};
use error::CliError;
use gpufile::config::{self, Input, Kind, Name};
use gpufile::source::{IoContext, Source};
use gpufile::{Engine, FileHandle, IoPath, Memory, Request};
use gpufile_diag::schema;
use gpufile_diag::units::{self, Units};
use gpufile_remote::{ReadPlan, RemoteEndpointType, RemoteFile, RemoteStats};

/// Move file data into GPU and host memory, fast, and say which path ran.
///
/// Sizes accept units: 4MiB, 1.5GiB, 16k (binary), 1GB (decimal). `gpufile COMMAND --help` says
/// more about each command.
#[derive(Parser, Debug)]
#[command(name = "gpufile", version)]
struct Cli {
    /// How rates print: decimal (GB/s, the default), binary (GiB/s, as gdsio prints) or both.
    #[arg(long, global = true, default_value = "decimal", value_name = "UNITS")]
    units: Units,
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
    /// Load a safetensors checkpoint (file, index or directory of shards) into one GPU
    /// allocation or host memory, as one stream of requests, and print tensors/s, GB/s and the
    /// path taken.
    Load(load::LoadArgs),
}

#[derive(clap::Args, Debug)]
struct ExplainArgs {
    /// The file to explain (and read with --run); --size defaults to its size.
    file: Option<PathBuf>,
    /// Bytes to read, e.g. 1GiB (default: from --offset to the end of FILE).
    #[arg(long, allow_hyphen_values = true, value_parser = non_negative_size)]
    size: Option<String>,
    /// File offset, e.g. 1MiB.
    #[arg(long, default_value = "0", allow_hyphen_values = true, value_parser = non_negative_offset)]
    offset: String,
    /// task_size (default: the setting).
    #[arg(long, allow_hyphen_values = true, value_parser = non_negative_size)]
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
}

#[derive(clap::Args, Debug)]
struct ReadArgs {
    /// The file to read: a regular file, or a URL (http://, https://, s3://, gs://, webhdfs://...)
    /// read by ranged requests.
    file: PathBuf,
    /// Worker threads (default: the `num_threads` setting).
    #[arg(long, short = 't')]
    threads: Option<String>,
    /// Task size, e.g. 4MiB (default: the `task_size` setting).
    #[arg(long, allow_hyphen_values = true, value_parser = non_negative_size)]
    task_size: Option<String>,
    /// compat_mode: on, off or auto (default: the `compat_mode` setting).
    #[arg(long)]
    compat_mode: Option<String>,
    /// File offset to start at, e.g. 1GiB (past the end of the file is an error).
    #[arg(long, default_value = "0", allow_hyphen_values = true, value_parser = non_negative_offset)]
    offset: String,
    /// Bytes to read (default: to the end of the file; past the end is an error).
    #[arg(long, allow_hyphen_values = true, value_parser = non_negative_size)]
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
}

/// An offset as typed, refused at parse time where it is negative: clap would otherwise take
/// `-1` for an option and suggest `-- -1`, which does not help.
fn non_negative_offset(text: &str) -> Result<String, String> {
    non_negative(
        text,
        "offsets are non-negative (bytes from the start of the file)",
    )
}

/// A size as typed, refused at parse time where it is negative (as [`non_negative_offset`]).
fn non_negative_size(text: &str) -> Result<String, String> {
    non_negative(text, "sizes are non-negative (bytes, e.g. 4MiB)")
}

/// `text`, unless it starts with `-`: a negative number gets `rule`, anything else (the option
/// typed where the value belongs, `--size --json`) is named as what it is.
fn non_negative(text: &str, rule: &str) -> Result<String, String> {
    match text.trim_start().strip_prefix('-') {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') => {
            Err(rule.into())
        }
        Some(_) => Err("expected a value, got an option (give the value after the option)".into()),
        None => Ok(text.to_owned()),
    }
}

/// Most `--repeat` runs one `gpufile read` makes.
const MAX_REPEAT: u32 = 100_000;

/// The `--help` text of `gpufile` (`None`) or of one of its commands, as the command prints it:
/// docs/cli.md includes these texts, and a test keeps them equal to the parser's.
pub fn help_text(command: Option<&str>) -> Option<String> {
    let args = ["gpufile"].into_iter().chain(command).chain(["--help"]);
    match Cli::try_parse_from(args) {
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => Some(e.render().to_string()),
        _ => None,
    }
}

/// The names of `gpufile`'s commands, in the order its help lists them.
pub fn command_names() -> Vec<String> {
    use clap::CommandFactory;
    Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect()
}

/// The subcommand named in `args`, for the error object of a command line that did not parse.
fn command_name(args: &[OsString]) -> Option<String> {
    const NAMES: [&str; 6] = ["config", "read", "check", "explain", "bench", "load"];
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| NAMES.contains(a))
        .map(str::to_owned)
}

/// Runs the command line `args` (the first item is the program name); returns the exit status.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let json = args.iter().skip(1).any(|a| a == "--json");
    for text in config::take_unknown_env_warnings() {
        eprintln!("gpufile: warning: {text}");
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let status = if e.use_stderr() { 2 } else { 0 };
            if json && status != 0 {
                let mut err = CliError::new("usage", e.kind().to_string());
                err.message = e.to_string().trim_end().to_owned();
                emit_json(&err.to_json(command_name(&args).as_deref()));
                eprint!("{e}");
            } else {
                let _ = e.print();
            }
            return status;
        }
    };
    let name = match &cli.command {
        Command::Config { .. } => "config",
        Command::Read(_) => "read",
        Command::Check { .. } => "check",
        Command::Explain(_) => "explain",
        Command::Bench(_) => "bench",
        Command::Load(_) => "load",
    };
    let units = cli.units;
    let result = match cli.command {
        Command::Config { json } => cmd_config(json),
        Command::Read(args) => cmd_read(&args, units),
        Command::Check { path, json } => cmd_check(path.as_deref(), json),
        Command::Explain(args) => cmd_explain(&args, units),
        Command::Bench(args) => bench::run(&args, units),
        Command::Load(args) => load::run(&args, units),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            if json {
                emit_json(&e.to_json(Some(name)));
            }
            eprintln!("gpufile: error: {e}");
            e.status
        }
    }
}

type CliResult = Result<(), CliError>;

fn out(text: &str) {
    // A closed pipe (`gpufile config | head`) is not an error worth a panic.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn emit_json(v: &Value) {
    out(&format!(
        "{}\n",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| "{}".into())
    ));
}

fn cmd_config(json: bool) -> CliResult {
    let rows = Engine::global()?.report();
    if json {
        let map: serde_json::Map<String, Value> = rows
            .iter()
            .map(|(name, value, source)| {
                let entry = json!({ "value": value, "source": source.to_string() });
                (name.to_string(), entry)
            })
            .collect();
        emit_json(&schema::envelope("config", json!({ "settings": map })));
        return Ok(());
    }
    let mut text = format!("{:<22} {:<26} {}\n", "setting", "value", "source");
    for (name, value, source) in rows {
        let shown = match (name.kind(), &value) {
            (Kind::Size | Kind::PositiveSize, config::Value::Int(n)) => {
                format!("{n} ({})", units::size(*n))
            }
            _ => value.to_string(),
        };
        text += &format!("{:<22} {:<26} {}\n", name.as_str(), shown, source);
    }
    out(&text);
    Ok(())
}

fn cmd_check(path: Option<&Path>, json: bool) -> CliResult {
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

/// Pseudo file systems whose files report a size of 0 bytes but read as text (/proc, /sys, ...).
fn pseudo_fs(path: &Path) -> Option<String> {
    const PSEUDO: [&str; 7] = [
        "proc",
        "sysfs",
        "debugfs",
        "tracefs",
        "cgroup",
        "cgroup2",
        "securityfs",
    ];
    gpufile_diag::check::file_system(path)
        .map(|(_, fs)| fs)
        .filter(|fs| PSEUDO.contains(&fs.as_str()))
}

/// The size of the file `gpufile read`/`explain` reads. Only regular files are read: a
/// character device (/dev/zero), FIFO, socket or block device has no size to read to, and a
/// /proc or /sys file reports 0 bytes whatever it holds; each is refused with the reason.
fn file_size(path: &Path, file: &FileHandle) -> Result<u64, CliError> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path).map_err(|e| CliError::from(e).with_path(path))?;
    let t = meta.file_type();
    let kind = if t.is_file() {
        None
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    };
    if let Some(kind) = kind {
        return Err(CliError::new(
            "not-a-regular-file",
            format!(
                "{} is {kind}: gpufile reads regular files, whose size is known",
                path.display()
            ),
        )
        .with_path(path));
    }
    let size = file.size()?;
    if size == 0 {
        if let Some(fs) = pseudo_fs(path) {
            return Err(CliError::new(
                "not-a-regular-file",
                format!(
                    "{} is on {fs} (a pseudo file system), whose files report a size of 0 bytes \
                     whatever they hold: \
                     gpufile reads files whose size is known (copy it to a regular file first)",
                    path.display()
                ),
            )
            .with_path(path));
        }
    }
    Ok(size)
}

/// `--offset` and `--size` against a file of `file_size` bytes: the range, or an error of the
/// same type whichever of the two goes past the end.
fn file_range(
    path: &Path,
    offset_text: &str,
    size_text: Option<&str>,
    file_size: u64,
) -> Result<(u64, u64), CliError> {
    let offset = parse_size_arg("offset", offset_text)?;
    let eof = |message: String| {
        CliError {
            kind: "unexpected-eof".into(),
            message,
            errno: None,
            path: None,
            status: 1,
        }
        .with_path(path)
    };
    if offset > file_size {
        return Err(eof(format!(
            "--offset {offset} ({}) is past the end of {} ({file_size} bytes)",
            units::size(offset),
            path.display()
        )));
    }
    let size = match size_text {
        Some(s) => parse_size_arg("size", s)?,
        None => file_size - offset,
    };
    if offset.saturating_add(size) > file_size {
        return Err(CliError::from(gpufile::Error::UnexpectedEof {
            path: path.to_owned(),
            offset,
            len: usize::try_from(size).unwrap_or(usize::MAX),
            file_size,
        }));
    }
    Ok((offset, size))
}

fn cmd_explain(args: &ExplainArgs, units: Units) -> CliResult {
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
        (None, None) => {
            return Err(CliError::invalid(
                "explain needs a FILE or --size (e.g. --size 1GiB)",
            ))
        }
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

fn parse_size_arg(what: &str, text: &str) -> Result<u64, CliError> {
    config::parse_size(text).map_err(|e| CliError::invalid(format!("--{what} {text:?}: {e}")))
}

/// What `gpufile read` reads: a local file, or a remote object where FILE is a URL.
enum ReadSource {
    Local(FileHandle),
    Remote(Arc<RemoteFile>),
}

/// FILE as a URL (`scheme://...`: http, https, s3, gs, webhdfs, ...), or None for a local path
/// (`./http://x` names a local file).
fn remote_url(file: &Path) -> Option<&str> {
    let text = file.to_str()?;
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    valid.then_some(text)
}

impl ReadSource {
    fn open(file: &Path) -> Result<Self, CliError> {
        let Some(url) = remote_url(file) else {
            return Ok(ReadSource::Local(FileHandle::open(file, "r")?));
        };
        let remote = RemoteFile::open(url, RemoteEndpointType::Auto, None, None).map_err(|e| {
            let e = CliError::from(e);
            if e.path.is_some() {
                e
            } else {
                // Never the URL as given: it may carry a signature or a key.
                e.with_path(gpufile_remote::redact(url))
            }
        })?;
        Ok(ReadSource::Remote(Arc::new(remote)))
    }

    /// The path a read of `size` bytes into `memory` takes and why; for a remote object whose
    /// server may ignore Range, asked first (one small GET) as a read would.
    fn plan(
        &self,
        memory: gpufile::Memory,
        size: usize,
        settings: &gpufile::Settings,
    ) -> gpufile::Result<ReadPath> {
        Ok(match self {
            ReadSource::Local(file) => ReadPath::Local(file.io_path(memory, size, settings)?),
            ReadSource::Remote(remote) => {
                if remote.wants_range_probe(size, settings.task_size) {
                    remote.probe_ranges(settings)?;
                }
                ReadPath::Remote(remote.remote_endpoint_type(), remote.plan_read(size))
            }
        })
    }

    /// The file side of a read from it.
    fn endpoint(&self) -> gpufile::source::Endpoint {
        match self {
            ReadSource::Local(file) => file.endpoint(gpufile::Direction::Read),
            ReadSource::Remote(remote) => {
                gpufile::source::Endpoint::Read(Arc::clone(remote) as Arc<dyn Source>)
            }
        }
    }

    /// The name reports and errors show: the path, or the URL with signatures redacted.
    fn shown(&self, file: &Path) -> String {
        match self {
            ReadSource::Local(_) => file.display().to_string(),
            ReadSource::Remote(remote) => remote.url().to_owned(),
        }
    }

    fn remote_stats(&self) -> Option<RemoteStats> {
        match self {
            ReadSource::Local(_) => None,
            ReadSource::Remote(remote) => Some(remote.stats()),
        }
    }

    /// `size` bytes at `offset` by the plainest read there is, for `--verify`: one `pread`
    /// of the file, or one ranged request to the object.
    fn plain_read(&self, file: &Path, offset: u64, size: usize) -> Result<Vec<u8>, CliError> {
        let mut expect = vec![0u8; size];
        match self {
            ReadSource::Local(_) => {
                let f = std::fs::File::open(file).map_err(|e| CliError::from(e).with_path(file))?;
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut expect, offset)
                    .map_err(|e| CliError::from(e).with_path(file))?;
            }
            ReadSource::Remote(remote) => {
                let progress = AtomicU64::new(0);
                let call = IoContext {
                    progress: &progress,
                    direct: false,
                    direct_uncached: false,
                    stop: &gpufile::future::StopFlag::default(),
                };
                remote.read_at(&mut expect, offset, call)?;
            }
        }
        Ok(expect)
    }
}

/// The path a `gpufile read` takes: gpufile's decision for a local file, ranged requests for
/// a remote object.
enum ReadPath {
    Local(IoPath),
    Remote(RemoteEndpointType, ReadPlan),
}

impl ReadPath {
    /// The task size the runs take: a server that ignores Range serves each run from one
    /// whole-body GET; otherwise the settings'.
    fn task_size(&self) -> Option<usize> {
        match self {
            ReadPath::Remote(_, plan) => plan.task_size,
            ReadPath::Local(_) => None,
        }
    }

    fn backend(&self) -> String {
        match self {
            ReadPath::Local(p) => p.backend.to_string(),
            ReadPath::Remote(kind, _) => format!("remote ({kind})"),
        }
    }

    fn reason(&self) -> String {
        match self {
            ReadPath::Local(p) => p.reason.to_string(),
            ReadPath::Remote(_, plan) => remote_reason(plan),
        }
    }

    fn remote_endpoint(&self) -> Option<String> {
        match self {
            ReadPath::Local(_) => None,
            ReadPath::Remote(kind, _) => Some(kind.to_string()),
        }
    }

    /// docs/json.md's `path` object; a remote read is backend `remote`, reason kind `remote`
    /// with the endpoint type as its detail.
    fn to_json(&self) -> Value {
        match self {
            ReadPath::Local(p) => schema::path(p),
            ReadPath::Remote(kind, plan) => json!({
                "backend": "remote",
                "reason": {
                    "kind": "remote",
                    "detail": kind.to_string(),
                    "text": remote_reason(plan),
                },
            }),
        }
    }
}

/// Why a remote object takes the path it takes.
fn remote_reason(plan: &ReadPlan) -> String {
    format!(
        "a remote object: {}, into host memory directly or into GPU memory through pinned \
         bounce buffers",
        plan.reason()
    )
}

fn cmd_read(args: &ReadArgs, units: Units) -> CliResult {
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

    let source = ReadSource::open(&args.file)?;
    let shown = source.shown(&args.file);
    let object_size = match &source {
        ReadSource::Local(file) => file_size(&args.file, file)?,
        ReadSource::Remote(remote) => remote.nbytes(),
    };
    // Refused before any memory is allocated for it.
    let (offset, size) = file_range(
        Path::new(&shown),
        &args.offset,
        args.size.as_deref(),
        object_size,
    )?;
    let size = usize::try_from(size).map_err(|_| "--size is too large for this machine")?;
    let (mut dest, why_host) = Destination::choose(args.host, args.device, size, "")?;
    let path = source.plan(dest.memory(), size, &settings)?;
    let run_task_size = path.task_size();

    let remote_before = source.remote_stats();
    let observation = gpufile::observe::begin();
    let mut runs = Vec::new();
    for _ in 0..args.repeat {
        let start = Instant::now();
        let req = Request::read(dest.buffer(0, size), offset).task_size(run_task_size);
        // SAFETY: `dest` outlives the future: it is waited on below, before `dest` is used
        // again or dropped.
        let fut = unsafe { Engine::global()?.submit(&source.endpoint(), req, &settings) }?;
        let n = wait_with_progress(&fut, size as u64, !args.json, units)?;
        runs.push(start.elapsed().as_secs_f64());
        if n != size {
            return Err(format!("read {n} bytes, expected {size}").into());
        }
    }
    let report = gpufile::observe::end(observation);
    // Over the runs only: the size request at open and --verify's read are not counted.
    let remote = source
        .remote_stats()
        .zip(remote_before)
        .map(|(after, before)| RemoteStats {
            requests: after.requests - before.requests,
            retries: after.retries - before.retries,
            bytes: after.bytes - before.bytes,
        });
    let verified = if args.verify {
        let expect = source.plain_read(&args.file, offset, size)?;
        let mut got = vec![0u8; dest.len()];
        dest.copy_out(0, &mut got)?;
        if got != expect {
            return Err(CliError::new(
                "verification-failed",
                format!("verification failed: the bytes read differ from {shown}"),
            )
            .with_path(&shown));
        }
        Some(true)
    } else {
        None
    };
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    let seconds = sorted[sorted.len() / 2];

    if args.json {
        let (device, device_name) = match &dest {
            Destination::Device { ordinal, name, .. } => (Some(*ordinal), Some(name.clone())),
            Destination::Host(_) => (None, None),
        };
        emit_json(&schema::envelope(
            "read",
            json!({
                "file": shown,
                "offset": offset,
                "bytes": size,
                "memory": dest.memory(),
                "device": device,
                "device_name": device_name,
                "memory_note": why_host,
                "settings": {
                    "num_threads": settings.num_threads,
                    "task_size": settings.task_size,
                    "compat_mode": settings.compat_mode.name(),
                },
                "path": path.to_json(),
                "remote": remote.map(|r| json!({
                    "endpoint": path.remote_endpoint(),
                    "url": shown,
                    "requests": r.requests,
                    "retries": r.retries,
                    "bytes": r.bytes,
                })),
                "runs": runs.len(),
                "seconds": seconds,
                "seconds_per_run": runs,
                "throughput_gb_per_s": units::gb_per_s(size as u64, seconds),
                "verified": verified,
                "observed": schema::observation(&report),
            }),
        ));
        return Ok(());
    }
    let runs_note = if args.repeat > 1 {
        format!(" (median of {} runs)", args.repeat)
    } else {
        String::new()
    };
    let mut text = format!(
        "file        {}\nbytes       {} ({})\nseconds     {:.6}{}\nthroughput  {}\n\
         memory      {}{}\npath        {}\nreason      {}\nthreads     {}\ntask_size   {}\n",
        shown,
        size,
        units::size(size as u64),
        seconds,
        runs_note,
        units::rate(size as u64, seconds, units),
        dest.describe(),
        why_host.map(|w| format!(" ({w})")).unwrap_or_default(),
        path.backend(),
        path.reason(),
        settings.num_threads,
        units::size(settings.task_size as u64),
    );
    if offset > 0 {
        text += &format!("offset      {offset} ({})\n", units::size(offset));
    }
    if let Some(r) = remote {
        text += &format!(
            "remote      {} requests, {} retries, {} bytes ({})\n",
            r.requests,
            r.retries,
            r.bytes,
            units::size(r.bytes)
        );
    }
    if verified == Some(true) {
        text += match source {
            ReadSource::Local(_) => "verified    bytes match the file\n",
            ReadSource::Remote(_) => "verified    bytes match a plain ranged read of the object\n",
        };
    }
    let dma = report.gpufile_posix.dma_bytes;
    if dma > 0 {
        let total = report.gpufile_posix.bytes.max(1);
        text += &format!(
            "page cache  {} of {} by DMA from registered page cache ({:.0} %; no bounce copy)\n",
            units::size(dma),
            units::size(report.gpufile_posix.bytes),
            dma as f64 * 100.0 / total as f64
        );
    }
    out(&text);
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
    Ok(())
}

/// The progress bar's rate, in the units asked for (indicatif labels it: MB/s or MiB/s).
fn bar_template(units: Units) -> &'static str {
    match units {
        Units::Decimal => "{bar:40} {binary_bytes}/{binary_total_bytes} {decimal_bytes_per_sec} eta {eta}",
        Units::Binary => "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
        Units::Both => "{bar:40} {binary_bytes}/{binary_total_bytes} {decimal_bytes_per_sec} ({binary_bytes_per_sec}) eta {eta}",
    }
}

/// Waits for a read, drawing a progress bar on a terminal for reads that take a while.
fn wait_with_progress(
    fut: &gpufile::IoFuture,
    total: u64,
    show_progress: bool,
    units: Units,
) -> gpufile::Result<usize> {
    const BAR_MIN_BYTES: u64 = 256 << 20;
    if !show_progress || total < BAR_MIN_BYTES {
        return fut.wait();
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(bar_template(units))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_templates_parse_and_say_their_unit() {
        for u in [Units::Decimal, Units::Binary, Units::Both] {
            assert!(indicatif::ProgressStyle::with_template(bar_template(u)).is_ok());
        }
        assert!(bar_template(Units::Decimal).contains("decimal_bytes_per_sec"));
        assert!(bar_template(Units::Binary).contains("binary_bytes_per_sec"));
    }

    #[test]
    fn proc_is_a_pseudo_file_system() {
        assert_eq!(
            pseudo_fs(Path::new("/proc/self/status")).as_deref(),
            Some("proc")
        );
        assert_eq!(pseudo_fs(Path::new("/")), None);
        assert_eq!(pseudo_fs(Path::new("/nonexistent/x")), None);
    }
}
