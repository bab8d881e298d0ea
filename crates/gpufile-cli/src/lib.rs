//! The `gpufile` command line: `config`, `read`, `check`, `explain`, `bench`, `load`, `digest`,
//! `verify`.
//!
//! The same [`run`] serves the standalone binary and `python -m gpufile`, so both behave alike.
//! It never exits the process itself: it returns the exit status (0 success, 1 an error, a bad
//! value included, 2 a command line of the wrong shape). With `--json`, stdout carries one JSON object, an error included
//! (docs/json.md); sizes print with units and rates with theirs (`--units`).
//!
//! One module per command (`config`, `read`, `check`, `explain`, `bench`, `load`, each with its
//! arguments and a `run`; `digest` holds both `digest` and `verify`); this file holds the parser, the dispatch and the output helpers.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde_json::Value;

mod args;
mod bench;
mod check;
mod config;
mod destination;
mod digest;
mod error;
mod explain;
mod interrupt;
mod load;
mod progress;
mod range;
mod read;
use args::parse_size_arg;
use error::CliError;
use gpufile_diag::units;

/// Move file data into GPU and host memory, fast, and say which path ran.
///
/// Sizes accept units: 4MiB, 1.5GiB, 16k (binary), 1GB (decimal). `gpufile COMMAND --help` says
/// more about each command.
#[derive(Parser, Debug)]
#[command(name = "gpufile", version)]
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
    Read(read::ReadArgs),
    /// What this machine offers for GPU file I/O, and the path each compat_mode would take.
    Check {
        /// Also check this file (file system, block device, O_DIRECT, cuFile registration).
        path: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// How a read would be split and which path each piece takes (the planner that runs it).
    Explain(explain::ExplainArgs),
    /// A gdsio-like sweep: sizes × threads × task sizes × compat modes × ops × cache × memory.
    Bench(bench::BenchArgs),
    /// Load a safetensors checkpoint (file, index or directory of shards) into one GPU
    /// allocation or host memory, as one stream of requests, and print tensors/s, GB/s and the
    /// path taken.
    Load(load::LoadArgs),
    /// Write a manifest of BLAKE3 digests of every tensor of a safetensors checkpoint (file,
    /// index or directory of shards), read through the engine and hashed on every core.
    Digest(digest::DigestArgs),
    /// Check every tensor of a safetensors checkpoint against its digests (the manifest
    /// `digest` wrote, or the table in each file's __metadata__); print per-file rates and
    /// every mismatch.
    Verify(digest::VerifyArgs),
}

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
    const NAMES: [&str; 8] = [
        "config", "read", "check", "explain", "bench", "load", "digest", "verify",
    ];
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
    for text in gpufile::__private::config::take_unknown_env_warnings() {
        eprintln!("gpufile: warning: {text}");
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind as K;
            let status = match e.kind() {
                _ if !e.use_stderr() => 0,
                // A bad value exits 1 whoever finds it, clap or the command (args.rs).
                K::ValueValidation | K::InvalidUtf8 => 1,
                _ => 2,
            };
            if status == 1 {
                let err = CliError::invalid(clap_message(&e));
                if json {
                    emit_json(&err.to_json(command_name(&args).as_deref()));
                }
                eprintln!("gpufile: error: {err}");
                return status;
            }
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
        Command::Digest(_) => "digest",
        Command::Verify(_) => "verify",
    };
    // --units belongs to the commands that print a rate (read, explain --run, bench, load).
    let result = match cli.command {
        Command::Config { json } => config::run(json),
        Command::Read(args) => read::run(&args, args.units),
        Command::Check { path, json } => check::run(path.as_deref(), json),
        Command::Explain(args) => explain::run(&args, args.units),
        Command::Bench(args) => bench::run(&args, args.units),
        Command::Load(args) => load::run(&args, args.units),
        Command::Digest(args) => digest::run_digest(&args),
        Command::Verify(args) => digest::run_verify(&args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            if json && !e.in_output {
                emit_json(&e.to_json(Some(name)));
            }
            eprintln!("gpufile: error: {e}");
            e.status
        }
    }
}

type CliResult = Result<(), CliError>;

/// clap's sentence without its `error: ` and its `--help` tip, as every error prints.
fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let text = text
        .split("\n\nFor more information")
        .next()
        .unwrap_or(text);
    text.trim_end().to_owned()
}

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
