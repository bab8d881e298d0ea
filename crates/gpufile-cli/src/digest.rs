//! `gpufile digest` and `gpufile verify`: BLAKE3 digests of every tensor of a safetensors
//! checkpoint (a file, an index, or a directory of shards), written to a manifest, and checked
//! against one (or against the table a file carries in its `__metadata__`).
//!
//! Both read each file through the engine (one request per file, into host memory) and hash its
//! tensors on every thread (`--threads`, default: every core), the next file read while one is
//! hashed: the core's `safetensors::digest`. `--json` prints docs/json.md's `digest` or
//! `verify`; a verify that finds a mismatch prints its report (the mismatches in it) and exits 1.

use std::path::{Path, PathBuf};

use gpufile::safetensors::digest::{
    self, compare, default_manifest_path, digest_files, embedded, file_digests, file_key,
    read_manifest, write_manifest, DigestError, FileDigests, Manifest, Mismatch, METADATA_KEY,
};
use gpufile::safetensors::Checkpoint;
use gpufile::{Engine, Settings};
use gpufile::{Input, Name};
use gpufile_diag::schema;
use gpufile_diag::units::{self, Units};
use serde_json::{json, Value};

use crate::error::CliError;
use crate::interrupt::Interrupts;

/// What an interrupted digest or verify says became of its work.
const NOTHING_DONE: &str = "the run was stopped; nothing is reported or written";

/// `gpufile digest`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct DigestArgs {
    /// A .safetensors file, a model.safetensors.index.json, or a directory of shards.
    path: PathBuf,
    /// Where to write the manifest (default: PATH.blake3.json beside a file,
    /// gpufile.blake3.json in a checkpoint's directory).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace an existing manifest.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    common: Common,
}

/// `gpufile verify`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct VerifyArgs {
    /// A .safetensors file, a model.safetensors.index.json, or a directory of shards.
    path: PathBuf,
    /// The manifest to check against (default: the one `gpufile digest PATH` writes; where
    /// there is none, the digests the files carry in their __metadata__).
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// Options both commands take.
#[derive(clap::Args, Debug)]
struct Common {
    /// Threads that read and hash (default: the `num_threads` setting reads, every core
    /// hashes).
    #[arg(long, short = 't', value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// How rates print: decimal (GB/s, the default), binary (GiB/s) or both.
    #[arg(long, default_value = "decimal", value_name = "UNITS")]
    units: Units,
}

impl From<DigestError> for CliError {
    fn from(e: DigestError) -> Self {
        match e {
            DigestError::Format(e) => e.into(),
            DigestError::Io(e) => e.into(),
            DigestError::BadManifest { ref path, .. } => {
                CliError::new("bad-manifest", e.to_string()).with_path(path.clone())
            }
            DigestError::Short { ref path, .. } => {
                CliError::new("unexpected-eof", e.to_string()).with_path(path.clone())
            }
            other => CliError::new("internal", other.to_string()),
        }
    }
}

/// One file, hashed.
struct FileRun {
    path: PathBuf,
    tensors: usize,
    bytes: u64,
    seconds: f64,
    /// verify: where its digests came from (`"manifest"`, `"metadata"`), and its mismatches.
    digests: Option<&'static str>,
    mismatches: usize,
}

impl FileRun {
    fn to_json(&self, verify: bool) -> Value {
        let mut v = json!({
            "path": self.path,
            "tensors": self.tensors,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "throughput_gb_per_s": units::gb_per_s(self.bytes, self.seconds),
        });
        if verify {
            v["digests"] = json!(self.digests);
            v["mismatches"] = json!(self.mismatches);
        }
        v
    }
}

/// The settings the reads take and the hashing threads: `--threads` for both, else the
/// `num_threads` setting and every core.
fn threads(common: &Common) -> Result<(Settings, usize), CliError> {
    let engine = Engine::global()?;
    match common.threads {
        Some(n) => {
            let text = n.to_string();
            let settings = engine.settings_with(&[(Name::NumThreads, Input::Text(&text))])?;
            Ok((settings, n as usize))
        }
        None => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            Ok((engine.settings(), cores))
        }
    }
}

/// The checkpoint at `path` (a local one: digests are made of files on this machine).
fn open(path: &Path) -> Result<Checkpoint, CliError> {
    if path.to_str().is_some_and(gpufile_remote::is_url) {
        return Err(CliError::invalid(format!(
            "{}: digests are made and checked of local files; copy the checkpoint here first",
            gpufile_remote::redact(&path.to_string_lossy())
        )));
    }
    Ok(Checkpoint::open(path)?)
}

/// Hashes every file of `checkpoint`, stoppably; `each` sees every file's digests.
fn hash_all(
    checkpoint: &Checkpoint,
    common: &Common,
    interrupts: &Interrupts,
    mut each: impl FnMut(&digest::FileDigest) -> Result<(), CliError>,
) -> Result<(Vec<FileRun>, usize), CliError> {
    let (settings, threads) = threads(common)?;
    let engine = Engine::global()?;
    let mut files = Vec::new();
    let mut failed = None;
    let ran = interrupts.stoppable(|stop| {
        digest_files(&engine, &settings, checkpoint, threads, |d| {
            if stop.is_set() {
                // Stops the run; the caller reports the signal.
                return Err(DigestError::Io(gpufile::Error::InvalidArgument(
                    "interrupted".into(),
                )));
            }
            files.push(FileRun {
                path: checkpoint.files[d.file].path.clone(),
                tensors: d.tensors.len(),
                bytes: d.bytes,
                seconds: d.seconds,
                digests: None,
                mismatches: 0,
            });
            each(&d).map_err(|e| {
                failed = Some(e);
                DigestError::Io(gpufile::Error::InvalidArgument("stopped".into()))
            })
        })
    });
    interrupts.check_that(NOTHING_DONE)?;
    if let Some(e) = failed {
        return Err(e);
    }
    ran?;
    Ok((files, threads))
}

/// The totals of `files`: tensors, bytes, seconds.
fn totals(files: &[FileRun]) -> (usize, u64, f64) {
    files.iter().fold((0, 0, 0.0), |(t, b, s), f| {
        (t + f.tensors, b + f.bytes, s + f.seconds)
    })
}

/// The report's lines common to both commands: the checkpoint, the totals and each file.
fn text_report(path: &Path, files: &[FileRun], threads: usize, rates: Units) -> String {
    let (tensors, bytes, seconds) = totals(files);
    let mut text = format!(
        "checkpoint  {} ({})\ntensors     {tensors}\nbytes       {bytes} ({})\n\
         seconds     {seconds:.6}\nthroughput  {}\nthreads     {threads}\n",
        path.display(),
        units::count(files.len() as u64, "file", "files"),
        units::size(bytes),
        units::rate(bytes, seconds, rates),
    );
    for f in files {
        let name = f.path.file_name().unwrap_or(f.path.as_os_str());
        text += &format!(
            "file        {}: {}, {}, {}{}\n",
            name.to_string_lossy(),
            units::count(f.tensors as u64, "tensor", "tensors"),
            units::size(f.bytes),
            units::rate(f.bytes, f.seconds, rates),
            match (f.digests, f.mismatches) {
                (None, _) => String::new(),
                (Some(_), 0) => ", ok".into(),
                (Some(_), n) => format!(", {}", units::count(n as u64, "mismatch", "mismatches")),
            }
        );
    }
    text
}

/// The JSON fields common to both commands.
fn json_report(path: &Path, files: &[FileRun], threads: usize, verify: bool) -> Value {
    let (tensors, bytes, seconds) = totals(files);
    json!({
        "checkpoint": path,
        "files": files.iter().map(|f| f.to_json(verify)).collect::<Vec<_>>(),
        "tensors": tensors,
        "bytes": bytes,
        "seconds": seconds,
        "throughput_gb_per_s": units::gb_per_s(bytes, seconds),
        "threads": threads,
    })
}

/// Runs `gpufile digest`.
pub(crate) fn run_digest(args: &DigestArgs) -> Result<(), CliError> {
    Engine::global()?;
    let interrupts = Interrupts::catch()?;
    let checkpoint = open(&args.path)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_manifest_path(&args.path));
    let exists = |out: &Path| {
        let mut e = CliError::new(
            "os",
            format!("{} exists; pass --force to replace it", out.display()),
        );
        e.errno = Some(libc::EEXIST);
        e.with_path(out)
    };
    // Refused before any byte is read; checked again as it is written.
    if !args.force && std::fs::symlink_metadata(&out).is_ok() {
        return Err(exists(&out));
    }
    let mut manifest = Manifest::default();
    let (files, threads) = hash_all(&checkpoint, &args.common, &interrupts, |d| {
        let header = &checkpoint.files[d.file];
        manifest
            .files
            .insert(file_key(&header.path), file_digests(header, d));
        Ok(())
    })?;
    write_manifest(&out, &manifest, args.force).map_err(|e| match e.errno() {
        Some(libc::EEXIST) => exists(&out),
        _ => e.into(),
    })?;
    if args.common.json {
        let mut body = json_report(&args.path, &files, threads, false);
        body["manifest"] = json!(out);
        crate::emit_json(&schema::envelope("digest", body));
    } else {
        let mut text = text_report(&args.path, &files, threads, args.common.units);
        text += &format!("manifest    {}\n", out.display());
        crate::out(&text);
    }
    Ok(())
}

/// Each file's expected digests and where they come from: the manifest where it has the file,
/// else the file's own `__metadata__` table; an error names a file with neither.
fn expected_tables(
    checkpoint: &Checkpoint,
    manifest: Option<(&Path, &Manifest)>,
    shown: &Path,
) -> Result<Vec<(FileDigests, &'static str)>, CliError> {
    let mut out = Vec::with_capacity(checkpoint.files.len());
    for header in &checkpoint.files {
        let listed = manifest.and_then(|(_, m)| m.files.get(&file_key(&header.path)));
        let table = match listed {
            Some(t) => (t.clone(), "manifest"),
            None => match embedded(header)? {
                Some(t) => (t, "metadata"),
                None => {
                    let why = match manifest {
                        Some((p, _)) => format!("the manifest {} does not list it", p.display()),
                        None => format!(
                            "no manifest ({}) and no {METADATA_KEY:?} in its __metadata__",
                            default_manifest_path(shown).display()
                        ),
                    };
                    return Err(CliError::new(
                        "no-digest",
                        format!(
                            "{}: no digests to verify against: {why}; make them with \
                             `gpufile digest {}`",
                            header.path.display(),
                            shown.display()
                        ),
                    )
                    .with_path(&header.path));
                }
            },
        };
        if let Some(size) = table.0.size.filter(|&s| s != header.file_size) {
            return Err(CliError::new(
                "verification-failed",
                format!(
                    "verification failed: {}: {} bytes, its digests are of a file of {size}",
                    header.path.display(),
                    header.file_size
                ),
            )
            .with_path(&header.path));
        }
        out.push(table);
    }
    Ok(out)
}

/// One mismatch as the report prints it.
fn mismatch_line(m: &Mismatch) -> String {
    let none = |d: &Option<String>, what: &str| d.clone().unwrap_or_else(|| what.to_owned());
    format!(
        "mismatch    {}: tensor {:?}: expected {}, computed {}\n",
        m.file.display(),
        m.tensor,
        none(&m.expected, "(no digest)"),
        none(&m.computed, "(no such tensor)")
    )
}

/// Runs `gpufile verify`.
pub(crate) fn run_verify(args: &VerifyArgs) -> Result<(), CliError> {
    Engine::global()?;
    let interrupts = Interrupts::catch()?;
    let checkpoint = open(&args.path)?;
    let manifest_path = match &args.manifest {
        Some(p) => {
            if std::fs::metadata(p).is_err() {
                return Err(CliError::new(
                    "no-digest",
                    format!(
                        "{}: no such manifest; make one with `gpufile digest {} --out {}`",
                        p.display(),
                        args.path.display(),
                        p.display()
                    ),
                )
                .with_path(p));
            }
            p.clone()
        }
        None => default_manifest_path(&args.path),
    };
    let manifest = read_manifest(&manifest_path)?;
    if let Some(m) = &manifest {
        let have: std::collections::HashSet<String> =
            checkpoint.files.iter().map(|h| file_key(&h.path)).collect();
        if let Some(gone) = m.files.keys().find(|k| !have.contains(*k)) {
            return Err(CliError::new(
                "verification-failed",
                format!(
                    "verification failed: the manifest {} lists {gone}, which {} does not hold",
                    manifest_path.display(),
                    args.path.display()
                ),
            )
            .with_path(&manifest_path));
        }
    }
    let used = manifest.as_ref().map(|m| (manifest_path.as_path(), m));
    let tables = expected_tables(&checkpoint, used, &args.path)?;
    let mut mismatches: Vec<Mismatch> = Vec::new();
    let mut per_file = vec![0usize; checkpoint.files.len()];
    let (mut files, threads) = hash_all(&checkpoint, &args.common, &interrupts, |d| {
        let found = compare(&checkpoint.files[d.file], d, &tables[d.file].0);
        per_file[d.file] = found.len();
        mismatches.extend(found);
        Ok(())
    })?;
    for (f, run) in files.iter_mut().enumerate() {
        run.digests = Some(tables[f].1);
        run.mismatches = per_file[f];
    }
    let error = (!mismatches.is_empty()).then(|| {
        CliError::new(
            "verification-failed",
            format!(
                "verification failed: {} of {} differ from {} digests",
                units::count(mismatches.len() as u64, "tensor", "tensors"),
                args.path.display(),
                if manifest.is_some() {
                    "the manifest's"
                } else {
                    "their"
                },
            ),
        )
        .with_path(&args.path)
    });
    let manifest_shown = manifest.as_ref().map(|_| manifest_path.clone());
    if args.common.json {
        let mut body = json_report(&args.path, &files, threads, true);
        body["manifest"] = json!(manifest_shown);
        body["mismatches"] = json!(mismatches
            .iter()
            .map(|m| json!({
                "file": m.file,
                "tensor": m.tensor,
                "expected": m.expected,
                "computed": m.computed,
            }))
            .collect::<Vec<_>>());
        body["verified"] = json!(error.is_none());
        body["error"] = json!(error
            .as_ref()
            .map(|e| e.to_json(Some("verify"))["error"].clone()));
        crate::emit_json(&schema::envelope("verify", body));
    } else {
        let mut text = text_report(&args.path, &files, threads, args.common.units);
        text += &match &manifest_shown {
            Some(p) => format!("digests     {}\n", p.display()),
            None => format!("digests     each file's __metadata__ ({METADATA_KEY:?})\n"),
        };
        for m in &mismatches {
            text += &mismatch_line(m);
        }
        if error.is_none() {
            text += "verified    every tensor matches its digest\n";
        }
        crate::out(&text);
    }
    match error {
        None => Ok(()),
        Some(e) => Err(e.in_output(args.common.json)),
    }
}
