//! `gpufile load`: a safetensors checkpoint (one file, a sharded checkpoint's index, or a
//! directory of shards) into one GPU allocation or host memory, as one stream of requests.
//!
//! How it runs:
//! 1. [`Checkpoint::open`] reads and validates every header before a byte of data is read (a bad
//!    file is refused, naming the file and the tensor).
//! 2. [`Checkpoint::select`] picks the tensors (`--filter`, the core's rule) and
//!    [`Checkpoint::plan_parts`] gives their byte ranges (with `--shard`, this rank's part of
//!    each sharded tensor: [`Checkpoint::shard_parts`]), adjacent tensors of a file merged, and
//!    where each tensor lands in one destination allocation.
//! 3. One allocation (GPU memory, or host memory with `--host` or where no GPU can be used),
//!    then every range of every file goes to the engine at once (the core's [`submit_parts`],
//!    as Python and C load: one [`Engine::submit_batch`]): the workers go from one file to the
//!    next with no gap.
//! 4. Tensors, bytes, seconds, GB/s, tensors/s and what ran (the path report); `--verify`
//!    compares every tensor's bytes with a plain read of its range.
//!
//! `--json` prints one object, docs/json.md's `load` (schema_version, command, sizes in bytes,
//! times in seconds, one throughput field in decimal GB/s); an error is its error object.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use gpufile::__private::batch::OpBuffer;
use gpufile::observe::Report;
use gpufile::safetensors::{
    block_read, submit_parts, Checkpoint, Files, FormatError, LoadError, PlanOptions, ReadPlan,
    Sharding, Span, Split, Target,
};
use gpufile::StopFlag;
use gpufile::{Engine, ErrorKind, FileHandle, IoPath, Memory, Settings};
use gpufile_diag::schema;
use gpufile_diag::units::{self, Units};
use serde_json::{json, Value};

use crate::destination::Destination;
use crate::error::CliError;
use crate::interrupt::Interrupts;

/// What an interrupted `load` says became of its work.
const NOTHING_REPORTED: &str = "the load was stopped; nothing is reported";

/// Bytes compared at a time by `--verify` (its memory does not grow with the tensors).
const VERIFY_CHUNK: usize = 16 << 20;

/// `gpufile load`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct LoadArgs {
    /// A .safetensors file, a model.safetensors.index.json, or a directory of shards; or the
    /// s3://, gs://, http(s):// or WebHDFS URL of a file, an index, or a prefix holding
    /// model.safetensors.index.json (else model.safetensors).
    path: PathBuf,
    /// Load into the memory of this GPU (default: GPU 0 where CUDA works, else host memory).
    #[arg(long, value_name = "N")]
    device: Option<i32>,
    /// Load into host memory even where a GPU exists.
    #[arg(long, conflicts_with = "device")]
    host: bool,
    /// Load only these tensors: names separated by commas (or the flag repeated); a name
    /// ending in `*` selects every tensor whose name starts with what precedes it.
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    filter: Vec<String>,
    /// Load only this rank's part of each tensor a pattern matches (tensor-parallel):
    /// PATTERN=SPLIT pairs separated by commas, SPLIT `colwise`, `rowwise`, `replicate` or a
    /// dimension, as Python's load_checkpoint(shard=...); with --rank and --world-size.
    #[arg(long, value_delimiter = ',', value_name = "PATTERN=SPLIT,...",
          requires_all = ["rank", "world_size"])]
    shard: Vec<String>,
    /// This rank, from 0 (with --shard).
    #[arg(long, value_name = "N", requires = "shard")]
    rank: Option<u64>,
    /// How many ranks share the tensors (with --shard).
    #[arg(long, value_name = "N", requires = "shard")]
    world_size: Option<u64>,
    /// Compare every tensor's bytes with a plain read of its range of the file.
    #[arg(long)]
    verify: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// How rates print: decimal (GB/s, the default), binary (GiB/s, as gdsio prints) or both.
    #[arg(long, default_value = "decimal", value_name = "UNITS")]
    pub(crate) units: Units,
}

impl From<FormatError> for CliError {
    /// By the error's kind in the core's table: `safetensors` for a file that breaks the
    /// format (the message names the file and the tensor), `unknown-tensor` for a name the
    /// checkpoint lacks, `not-a-regular-file` as `read` says it, `os` where the OS refused; the
    /// file at fault as the path.
    fn from(e: FormatError) -> Self {
        let e = match e {
            FormatError::Io { path, source } => {
                // The errors of finding a file are its open's, as `read` words them; the rest
                // are of reading its header.
                let lookup = [
                    libc::ENOENT,
                    libc::ENOTDIR,
                    libc::EACCES,
                    libc::EPERM,
                    libc::ELOOP,
                    libc::ENAMETOOLONG,
                    libc::EISDIR,
                ];
                let op = match source.raw_os_error() {
                    Some(errno) if !lookup.contains(&errno) => "read",
                    _ => "open",
                };
                return CliError::os(op, &path, &source);
            }
            other => other,
        };
        let kind = match e.kind() {
            ErrorKind::UnknownName => "unknown-tensor",
            ErrorKind::NotSeekable => "not-a-regular-file",
            ErrorKind::InvalidData | ErrorKind::BadArgument => "safetensors",
            _ => "os",
        };
        let mut err = CliError::new(kind, e.to_string());
        err.errno = e.errno();
        err.path = e.path().map(Path::to_path_buf);
        err
    }
}

impl From<gpufile_remote::CheckpointError> for CliError {
    fn from(e: gpufile_remote::CheckpointError) -> Self {
        match e {
            gpufile_remote::CheckpointError::Format(e) => e.into(),
            gpufile_remote::CheckpointError::Remote(e) => e.into(),
        }
    }
}

/// The selected tensors (indices into `checkpoint.entries`, each once, in checkpoint order):
/// the core's rule ([`Checkpoint::select`]); an empty name is a usage error of `--filter`.
fn select(checkpoint: &Checkpoint, filter: &[String]) -> Result<Vec<usize>, CliError> {
    let patterns: Vec<&str> = filter.iter().map(|p| p.trim()).collect();
    if patterns.iter().any(|p| p.is_empty()) {
        return Err(CliError::invalid(
            "--filter: an empty tensor name (two commas in a row?)",
        ));
    }
    Ok(checkpoint.select(&patterns)?)
}

/// The part of each selected tensor this rank reads by `--shard` (the core's [`Sharding`]; none
/// without it: every tensor whole); a rule that is no `PATTERN=SPLIT` is a usage error.
fn shard_parts(
    checkpoint: &Checkpoint,
    selection: &[usize],
    args: &LoadArgs,
) -> Result<Vec<Option<Vec<Span>>>, CliError> {
    if args.shard.is_empty() {
        return Ok(Vec::new());
    }
    let mut rules = Vec::with_capacity(args.shard.len());
    for rule in &args.shard {
        let Some((pattern, split)) = rule.trim().rsplit_once('=') else {
            return Err(CliError::invalid(format!(
                "--shard: {rule:?} is not PATTERN=SPLIT"
            )));
        };
        rules.push((pattern.to_owned(), Split::parse(split)?));
    }
    let (rank, world) = (args.rank.unwrap_or(0), args.world_size.unwrap_or(1));
    let sharding = Sharding::new(rank, world, rules)?;
    Ok(checkpoint.shard_parts(selection, &sharding)?)
}

/// What one file of the checkpoint gave.
struct FileLoad {
    path: PathBuf,
    tensors: usize,
    bytes: u64,
}

/// A finished load, for printing.
struct Loaded {
    checkpoint: PathBuf,
    files: Vec<FileLoad>,
    tensors: usize,
    tensors_total: usize,
    bytes: u64,
    checkpoint_bytes: u64,
    requests: usize,
    allocation: u64,
    header_seconds: f64,
    allocation_seconds: f64,
    seconds: f64,
    memory: Memory,
    device: Option<(i32, String)>,
    destination: String,
    memory_note: Option<String>,
    settings: Settings,
    path: Option<IoPath>,
    /// A remote checkpoint's endpoint type and where its credentials came from (never the
    /// credentials).
    remote: Option<(String, Option<&'static str>)>,
    verified: Option<bool>,
    observed: Report,
}

impl Loaded {
    fn tensors_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.tensors as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// `gpufile load --json`:
    ///
    /// | field | type | meaning |
    /// | --- | --- | --- |
    /// | `schema_version` | int | 2 |
    /// | `command` | string | `"load"` |
    /// | `checkpoint` | string | the path given |
    /// | `files` | [{`path`, `tensors`, `bytes`}] | every file of the checkpoint: tensors loaded from it, bytes read |
    /// | `tensors` | int | tensors loaded |
    /// | `tensors_total` | int | tensors in the checkpoint |
    /// | `bytes` | int | bytes read (the loaded tensors' bytes) |
    /// | `checkpoint_bytes` | int | bytes of every tensor of the checkpoint |
    /// | `requests` | int | read requests (adjacent tensors of a file are one) |
    /// | `allocation_bytes` | int | the one destination allocation (tensors aligned) |
    /// | `memory` | string | `"host"` or `"device"` |
    /// | `device`, `device_name` | int, string, or null | the GPU loaded into |
    /// | `memory_note` | string or null | why host memory where none was named |
    /// | `settings` | {`num_threads`, `task_size`, `compat_mode`} | what the reads ran under |
    /// | `path` | {`backend`, `reason`: {`kind`, `detail`, `text`}} or null | the path of the largest read, and why |
    /// | `header_seconds` | number | reading and validating the headers |
    /// | `allocation_seconds` | number | allocating (and, for host memory, zeroing) the destination |
    /// | `seconds` | number | the reads, from the first submitted to the last done |
    /// | `throughput_gb_per_s` | number | `bytes / seconds`, decimal GB/s |
    /// | `tensors_per_s` | number | `tensors / seconds` |
    /// | `verified` | bool or null | with `--verify`, true (a mismatch is an error) |
    /// | `observed` | {`path`, `by_path`, `cufile_stats`, `cufile_stats_note`} | what ran |
    fn to_json(&self) -> Value {
        let files: Vec<Value> = self
            .files
            .iter()
            .map(|f| json!({ "path": f.path, "tensors": f.tensors, "bytes": f.bytes }))
            .collect();
        let (device, device_name) = match &self.device {
            Some((ordinal, name)) => (Some(*ordinal), Some(name.clone())),
            None => (None, None),
        };
        let body = json!({
            "checkpoint": self.checkpoint,
            "files": files,
            "tensors": self.tensors,
            "tensors_total": self.tensors_total,
            "bytes": self.bytes,
            "checkpoint_bytes": self.checkpoint_bytes,
            "requests": self.requests,
            "allocation_bytes": self.allocation,
            "memory": self.memory,
            "device": device,
            "device_name": device_name,
            "memory_note": self.memory_note,
            "settings": {
                "num_threads": self.settings.num_threads,
                "task_size": self.settings.task_size,
                "compat_mode": self.settings.compat_mode.name(),
            },
            "path": self.path.as_ref().map(schema::path),
            "remote": self.remote.as_ref().map(|(endpoint, credentials)| json!({
                "endpoint": endpoint,
                "credentials": credentials,
            })),
            "header_seconds": self.header_seconds,
            "allocation_seconds": self.allocation_seconds,
            "seconds": self.seconds,
            "throughput_gb_per_s": units::gb_per_s(self.bytes, self.seconds),
            "tensors_per_s": self.tensors_per_s(),
            "verified": self.verified,
            "observed": schema::observation(&self.observed),
        });
        schema::envelope("load", body)
    }

    fn to_text(&self, rates: Units) -> String {
        let human = units::size;
        let selected = if self.tensors == self.tensors_total {
            String::new()
        } else {
            format!(
                " of {} ({} of {})",
                self.tensors_total,
                human(self.bytes),
                human(self.checkpoint_bytes)
            )
        };
        let mut text = format!(
            "checkpoint  {} ({} file{})\ntensors     {}{}\nbytes       {} ({}) in {} request{}\n\
             seconds     {:.6} (before it: headers {:.6}, allocation {:.6})\nthroughput  {}, {:.0} tensors/s\n\
             memory      {}{}\n",
            self.checkpoint.display(),
            self.files.len(),
            if self.files.len() == 1 { "" } else { "s" },
            self.tensors,
            selected,
            self.bytes,
            human(self.bytes),
            self.requests,
            if self.requests == 1 { "" } else { "s" },
            self.seconds,
            self.header_seconds,
            self.allocation_seconds,
            units::rate(self.bytes, self.seconds, rates),
            self.tensors_per_s(),
            self.destination,
            self.memory_note
                .as_ref()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default(),
        );
        if let Some(p) = &self.path {
            text += &format!("path        {}\nreason      {}\n", p.backend, p.reason);
        }
        if let Some((endpoint, credentials)) = &self.remote {
            text += &format!("remote      {endpoint}\n");
            if let Some(c) = credentials {
                text += &format!("credentials {c}\n");
            }
        }
        text += &format!(
            "threads     {}\ntask_size   {}\n",
            self.settings.num_threads,
            human(self.settings.task_size as u64)
        );
        let observed =
            schema::observed_path(&self.observed).unwrap_or_else(|| "nothing read".into());
        let counts: Vec<String> = [
            ("gpufile-posix", &self.observed.gpufile_posix),
            ("cufile", &self.observed.cufile),
            ("remote", &self.observed.remote),
        ]
        .into_iter()
        .filter(|(_, t)| t.ops > 0)
        .map(|(name, t)| {
            format!(
                "{name}: {} request{}, {} task{}, {}",
                t.ops,
                if t.ops == 1 { "" } else { "s" },
                t.tasks,
                if t.tasks == 1 { "" } else { "s" },
                human(t.bytes)
            )
        })
        .collect();
        text += &format!("observed    {observed}");
        if !counts.is_empty() {
            text += &format!(" ({})", counts.join("; "));
        }
        text.push('\n');
        match (self.observed.cufile.ops, &self.observed.cufile_stats) {
            (0, _) => {}
            (_, Some(s)) => {
                text += &format!(
                    "cufile      cuFile's counters: n={} nvfs={} posix={}\n",
                    s.n_reads, s.nvfs_reads, s.posix_reads
                )
            }
            (_, None) => {
                text += &format!(
                    "cufile      counters unavailable: {}\n",
                    self.observed
                        .cufile_stats_note
                        .as_deref()
                        .unwrap_or("unknown")
                )
            }
        }
        if self.verified == Some(true) {
            text += "verified    every tensor matches the file\n";
        }
        text
    }
}

/// Reads the `selection` (each tensor whole, or its part in `parts`) into `dest` as the core
/// loads a checkpoint ([`submit_parts`]: one batch of requests over every file); the bytes
/// read. A progress bar in `bar`'s units where
/// given.
fn read_all(
    (checkpoint, sources): (&Checkpoint, &Files),
    (selection, parts): (&[usize], &[Option<Vec<Span>>]),
    dest: &mut Destination,
    settings: &Settings,
    bar: Option<Units>,
    interrupts: &Interrupts,
) -> Result<u64, CliError> {
    let len = dest.len();
    let target = Target {
        selection: selection.to_vec(),
        buffer: (len > 0).then(|| OpBuffer::new(dest.buffer(0, len))),
    };
    // SAFETY: `dest` is neither used nor dropped until the future has been waited on below
    // (an interrupted wait included).
    let submitted = unsafe {
        submit_parts(
            &*Engine::global()?,
            settings,
            checkpoint,
            sources,
            std::slice::from_ref(&target),
            &[parts.to_vec()],
        )
    }
    .map_err(|e| match e {
        LoadError::Format(e) => CliError::from(e),
        LoadError::Io(e) => CliError::from(e),
        e => CliError::new("safetensors", e.to_string()),
    })?;
    let expected = submitted.bytes();
    let n = crate::progress::wait_with_progress(
        &submitted.future,
        expected,
        bar.is_some(),
        bar.unwrap_or_default(),
        interrupts,
        NOTHING_REPORTED,
    )? as u64;
    if n != expected {
        return Err(CliError::new(
            "unexpected-eof",
            format!(
                "read {}, expected {}",
                units::count(n, "byte", "bytes"),
                expected
            ),
        ));
    }
    Ok(n)
}

/// Compares every selected tensor with a plain read of its bytes (a remote one's by one ranged
/// request per chunk, stopped by `stop`); a mismatch names the tensor.
fn verify(
    checkpoint: &Checkpoint,
    remote: Option<&[Arc<gpufile_remote::RemoteFile>]>,
    (selection, parts): (&[usize], &[Option<Vec<Span>>]),
    plan: &ReadPlan,
    dest: &Destination,
    stop: &StopFlag,
) -> Result<(), CliError> {
    let mut files: HashMap<usize, std::fs::File> = HashMap::new();
    let (mut want, mut got) = (Vec::new(), Vec::new());
    for (k, (&i, &at)) in selection.iter().zip(&plan.dests).enumerate() {
        let entry = &checkpoint.entries[i];
        let header = &checkpoint.files[entry.file];
        let info = checkpoint.info(entry);
        let os = |op| move |e| CliError::os(op, &header.path, &e);
        let start = header.data_start + info.start;
        let whole: Vec<Span> = info.shape.iter().map(|&n| Span::whole(n)).collect();
        let part = parts.get(k).and_then(Option::as_ref);
        let read = block_read(info, start, part.unwrap_or(&whole))?;
        // Each range of the tensor (or its part), in pieces of at most VERIFY_CHUNK bytes:
        // (file offset, offset in what was read of the tensor).
        let pieces = read.ranges.iter().flat_map(|r| {
            (0..r.len.div_ceil(VERIFY_CHUNK)).map(move |c| {
                let o = c * VERIFY_CHUNK;
                (
                    r.file_offset + o as u64,
                    r.buf_offset + o,
                    (r.len - o).min(VERIFY_CHUNK),
                )
            })
        });
        for (at_file, done, n) in pieces {
            let done = done as u64;
            want.resize(n, 0);
            got.resize(n, 0);
            match remote {
                Some(remote) => {
                    crate::read::plain_remote_read(&remote[entry.file], &mut want, at_file, stop)?
                }
                None => {
                    let file = match files.entry(entry.file) {
                        Entry::Occupied(o) => o.into_mut(),
                        Entry::Vacant(v) => {
                            v.insert(std::fs::File::open(&header.path).map_err(os("open"))?)
                        }
                    };
                    file.read_exact_at(&mut want, at_file).map_err(os("read"))?;
                }
            }
            if stop.is_set() {
                return Ok(()); // the caller reports the signal
            }
            dest.copy_out((at + done) as usize, &mut got)?;
            if let Some(k) = want.iter().zip(&got).position(|(a, b)| a != b) {
                return Err(CliError::new(
                    "verification-failed",
                    format!(
                        "verification failed: {}: tensor {:?} differs from the file at byte {} \
                         of the {}",
                        header.path.display(),
                        info.name,
                        done + k as u64,
                        if part.is_some() {
                            "part read"
                        } else {
                            "tensor"
                        }
                    ),
                )
                .with_path(&header.path));
            }
        }
    }
    Ok(())
}

/// Runs `gpufile load`.
pub(crate) fn run(args: &LoadArgs, rates: Units) -> Result<(), CliError> {
    let engine = Engine::global()?;
    let settings = engine.settings();
    // From here on a Ctrl-C stops the command (every step below looks or waits stoppably).
    let interrupts = Interrupts::catch()?;

    let start = Instant::now();
    let url = args.path.to_str().filter(|p| gpufile_remote::is_url(p));
    let (checkpoint, remote) = match url {
        Some(url) => {
            let rc = interrupts.stoppable(|_| gpufile_remote::open_checkpoint(url));
            interrupts.check_that(NOTHING_REPORTED)?;
            let rc = rc?;
            (rc.checkpoint, Some(rc.files))
        }
        None => (Checkpoint::open(&args.path)?, None),
    };
    let sources = match &remote {
        Some(files) => Files::Sources(
            files
                .iter()
                .map(|f| f.clone() as Arc<dyn gpufile::source::Source>)
                .collect(),
        ),
        None => Files::Local,
    };
    let header_seconds = start.elapsed().as_secs_f64();
    let selection = select(&checkpoint, &args.filter)?;
    let parts = shard_parts(&checkpoint, &selection, args)?;
    let plan = checkpoint.plan_parts(&selection, &parts, PlanOptions::default())?;

    // Allocated (host memory: zeroed, so no page faults) before the clock starts: the reads
    // are what `seconds` times.
    let start = Instant::now();
    let total = usize::try_from(plan.total)
        .map_err(|_| CliError::invalid(format!("{} bytes do not fit this machine", plan.total)))?;
    let (mut dest, memory_note) =
        Destination::choose(args.host, args.device, total, " for the tensors")?;
    let allocation_seconds = start.elapsed().as_secs_f64();
    let largest = plan.ranges.iter().max_by_key(|r| r.len);
    let path = match largest {
        // A remote object's path is its ranged requests (the report's records say so).
        Some(_) if remote.is_some() => None,
        Some(r) => {
            let file = FileHandle::open(&checkpoint.files[r.file].path, "r")?;
            Some(file.io_path(dest.memory(), r.len as usize, &settings)?)
        }
        None => None,
    };

    let observation = gpufile::observe::begin();
    let start = Instant::now();
    let bytes = read_all(
        (&checkpoint, &sources),
        (&selection, &parts),
        &mut dest,
        &settings,
        (!args.json).then_some(rates),
        &interrupts,
    );
    let seconds = start.elapsed().as_secs_f64();
    let observed = gpufile::observe::end(observation);
    let bytes = bytes?;

    let verified = if args.verify {
        let checked = interrupts.stoppable(|stop| {
            verify(
                &checkpoint,
                remote.as_deref(),
                (&selection, &parts),
                &plan,
                &dest,
                stop,
            )
        });
        interrupts.check_that(NOTHING_REPORTED)?;
        checked?;
        Some(true)
    } else {
        None
    };

    // A signal as the reads ended: no report either.
    interrupts.check_that(NOTHING_REPORTED)?;
    let mut files: Vec<FileLoad> = checkpoint
        .files
        .iter()
        .map(|h| FileLoad {
            path: h.path.clone(),
            tensors: 0,
            bytes: 0,
        })
        .collect();
    for &i in &selection {
        files[checkpoint.entries[i].file].tensors += 1;
    }
    for r in &plan.ranges {
        files[r.file].bytes += r.len;
    }
    for g in &plan.gathers {
        files[g.file].bytes += g.bytes;
    }
    let loaded = Loaded {
        checkpoint: match url {
            Some(u) => gpufile_remote::redact(u).into(),
            None => args.path.clone(),
        },
        files,
        tensors: selection.len(),
        tensors_total: checkpoint.entries.len(),
        bytes,
        checkpoint_bytes: checkpoint.bytes(),
        requests: plan.ranges.len() + plan.gathers.len(),
        allocation: plan.total,
        header_seconds,
        allocation_seconds,
        seconds,
        memory: dest.memory(),
        device: match &dest {
            Destination::Device { ordinal, name, .. } => Some((*ordinal, name.clone())),
            Destination::Host(_) => None,
        },
        destination: dest.describe(),
        memory_note,
        settings,
        path,
        remote: remote
            .as_ref()
            .and_then(|files| files.first())
            .map(|f| (f.remote_endpoint_type().to_string(), f.credentials_source())),
        verified,
        observed,
    };
    if args.json {
        crate::emit_json(&loaded.to_json());
    } else {
        crate::out(&loaded.to_text(rates));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufile::safetensors::Header;

    /// A checkpoint of one file with tensors `names` (F32, 2 elements each), parsed from bytes.
    fn checkpoint(names: &[&str]) -> Checkpoint {
        let mut header = serde_json::Map::new();
        for (i, n) in names.iter().enumerate() {
            header.insert(
                (*n).into(),
                json!({"dtype": "F32", "shape": [2], "data_offsets": [i * 8, i * 8 + 8]}),
            );
        }
        let json = serde_json::to_vec(&header).unwrap();
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&json);
        bytes.resize(bytes.len() + names.len() * 8, 7);
        let path = PathBuf::from("m.safetensors");
        let h = Header::from_bytes(&path, &bytes).unwrap();
        Checkpoint::from_headers(&path, vec![h], None, None).unwrap()
    }

    fn names(ck: &Checkpoint, sel: &[usize]) -> Vec<String> {
        sel.iter()
            .map(|&i| ck.info(&ck.entries[i]).name.clone())
            .collect()
    }

    #[test]
    fn filters_select_names_and_prefixes_once_each() {
        let ck = checkpoint(&["a.w", "a.b", "b.w", "c"]);
        assert_eq!(select(&ck, &[]).unwrap().len(), 4);
        let f = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let sel = select(&ck, &f(&["a.*", "a.w", "c"])).unwrap();
        assert_eq!(names(&ck, &sel), ["a.w", "a.b", "c"]);
        assert_eq!(select(&ck, &f(&["*"])).unwrap().len(), 4);
    }

    #[test]
    fn filters_that_match_nothing_are_errors_naming_the_checkpoint() {
        let ck = checkpoint(&["a.w"]);
        let e = select(&ck, &["nope".into()]).unwrap_err();
        assert_eq!(e.kind, "unknown-tensor");
        assert!(e.to_string().contains("m.safetensors") && e.to_string().contains("\"nope\""));
        let e = select(&ck, &["z.*".into()]).unwrap_err();
        assert_eq!(e.kind, "unknown-tensor");
        assert!(
            e.to_string().contains("no tensor name starts with \"z.\""),
            "{e}"
        );
        let e = select(&ck, &[" ".into()]).unwrap_err();
        assert_eq!(e.kind, "invalid-argument");
        assert!(e.to_string().contains("empty tensor name"), "{e}");
    }

    #[test]
    fn verify_names_the_tensor_and_the_first_differing_byte() {
        // Two tensors, the second longer than one verify chunk, so that the offset of a
        // difference in its second chunk is checked too.
        let (a, b) = (16u64, VERIFY_CHUNK as u64 + 100);
        let header = json!({
            "a": {"dtype": "U8", "shape": [a], "data_offsets": [0, a]},
            "b": {"dtype": "U8", "shape": [b], "data_offsets": [a, a + b]},
        });
        let header = serde_json::to_vec(&header).unwrap();
        let data: Vec<u8> = (0..a + b).map(|i| (i % 251) as u8).collect();
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(&header);
        file.extend_from_slice(&data);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        std::fs::write(&path, &file).unwrap();

        let ck = Checkpoint::open(&path).unwrap();
        let selection = select(&ck, &[]).unwrap();
        let plan = ck.plan(&selection, PlanOptions::default()).unwrap();
        let mut host = vec![0u8; plan.total as usize];
        for r in &plan.ranges {
            let at = (r.offset - ck.files[0].data_start) as usize;
            host[r.dest as usize..][..r.len as usize]
                .copy_from_slice(&data[at..at + r.len as usize]);
        }
        let mut dest = Destination::Host(host);
        verify(
            &ck,
            None,
            (&selection, &[]),
            &plan,
            &dest,
            &StopFlag::default(),
        )
        .unwrap();

        let Destination::Host(host) = &mut dest else {
            unreachable!()
        };
        let wrong = plan.dests[1] as usize + VERIFY_CHUNK + 5;
        host[wrong] ^= 1;
        let e = verify(
            &ck,
            None,
            (&selection, &[]),
            &plan,
            &dest,
            &StopFlag::default(),
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("m.safetensors")
                && text.contains("tensor \"b\"")
                && text.contains(&format!("at byte {} of the tensor", VERIFY_CHUNK + 5)),
            "{text}"
        );
    }
}
