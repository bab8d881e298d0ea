//! `gpufile bench`: a gdsio-like sweep. Every combination of sizes, threads, task sizes, compat
//! modes, operations, cache states and memories runs `--runs` times; every read is checked
//! against the file's bytes and every write by reading the written file back; the median run time
//! (for an even count, the mean of the middle two) is reported in a table (or JSON), and `--plot` draws it with matplotlib: one panel per swept
//! dimension (threads, size, task size), one line per setting, the spread across runs shown.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpufile::DeviceBuffer;
use gpufile::{Buffer, Engine, FileHandle, Memory, Request};
use gpufile::{Input, Name, Settings};

use gpufile::IoPath;
use gpufile_diag::schema;
use gpufile_diag::units::{self, Units};
use serde_json::json;

use crate::error::os_text;
use crate::interrupt::Interrupts;
use crate::{emit_json, out, parse_size_arg, CliError, CliResult};

#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// The file to read: an existing regular file at least as large as the largest size, never
    /// modified. Without it, gpufile makes (and reuses) its own file `gpufile-bench.bin` in the
    /// temporary folder (a symlink there is refused, never written through).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Make `--file` (pseudo-random bytes) when nothing is at the path yet. An existing file is
    /// never overwritten, and a symlink (dangling or not) never followed.
    #[arg(long)]
    create: bool,
    /// Request sizes.
    #[arg(long, default_value = "64MiB,256MiB", value_delimiter = ',')]
    sizes: Vec<String>,
    /// Thread counts.
    #[arg(long, default_value = "1,4", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Task sizes.
    #[arg(long, default_value = "4MiB", value_delimiter = ',')]
    task_sizes: Vec<String>,
    /// compat modes (on, off, auto).
    #[arg(long, default_value = "auto", value_delimiter = ',')]
    compat_modes: Vec<String>,
    /// Operations: read, write.
    #[arg(long, default_value = "read", value_delimiter = ',')]
    ops: Vec<String>,
    /// Cache states: hot (page cache warm), cold (the file evicted from the page cache before
    /// each run).
    #[arg(long, default_value = "hot", value_delimiter = ',')]
    cache: Vec<String>,
    /// Memories: host, device (default: device where a GPU exists, else host).
    #[arg(long, value_delimiter = ',')]
    memory: Vec<String>,
    /// Runs per combination (the median run time is reported; for an even count, the mean of the
    /// middle two).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Draw the results into this image (PNG, SVG or PDF, by its extension) with matplotlib:
    /// throughput against each swept dimension, one line per setting, min–max of the runs.
    /// The interpreter is $GPUFILE_PYTHON, else python3 (`python -m gpufile` sets it to its own).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// How rates print: decimal (GB/s, the default), binary (GiB/s, as gdsio prints) or both.
    #[arg(long, default_value = "decimal", value_name = "UNITS")]
    pub(crate) units: Units,
}

#[derive(Clone)]
struct Row {
    op: String,
    memory: String,
    cache: String,
    size: usize,
    threads: usize,
    task_size: usize,
    compat_mode: String,
    path: IoPath,
    seconds: f64,
    runs_s: Vec<f64>,
    verified: bool,
}

impl Row {
    /// docs/json.md's `bench` result.
    fn to_json(&self) -> serde_json::Value {
        json!({
            "op": self.op,
            "memory": self.memory,
            "cache": self.cache,
            "size": self.size,
            "threads": self.threads,
            "task_size": self.task_size,
            "compat_mode": self.compat_mode,
            "path": schema::path(&self.path),
            "seconds": self.seconds,
            "seconds_per_run": self.runs_s,
            "throughput_gb_per_s": units::gb_per_s(self.size as u64, self.seconds),
            "verified": self.verified,
        })
    }
}

/// xorshift bytes: cheap, and no two 4 KiB blocks alike.
fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Makes `path` cold: its pages leave the page cache (no privileges needed).
fn drop_caches(path: &Path) -> CliResult {
    let f = std::fs::File::open(path)?;
    gpufile::__private::pagecache::drop_file_page_cache(f.as_raw_fd(), path, 0, 0, true)?;
    Ok(())
}

/// The benchmark's data file. A user's `--file` is only read: it must be a regular file of at
/// least `size` bytes (a symlink to one is read). gpufile writes only a file it makes: `--file`
/// with `--create` when nothing is at the path yet (not even a dangling symlink), or its own
/// default file, which must be a regular file (never a symlink) or absent. A file is made under
/// a temporary name in the same folder (O_EXCL, removed on an error or an interrupt), then
/// renamed into place, so no byte goes through a symlink and no half-written file is left.
fn ensure_file(
    path: &Path,
    size: usize,
    own: bool,
    create: bool,
    interrupts: &Interrupts,
) -> Result<Vec<u8>, CliError> {
    let os = |op| move |e: std::io::Error| CliError::os(op, path, &e);
    let refuse = |kind: &str, message: String| CliError::new(kind, message).with_path(path);
    if let Ok(l) = std::fs::symlink_metadata(path) {
        if l.file_type().is_symlink() && (own || std::fs::metadata(path).is_err()) {
            let target = std::fs::read_link(path).unwrap_or_default();
            let (rule, way_out) = match own {
                true => ("makes its own data file here", "give --file"),
                false => (
                    "makes a --create file only where nothing is",
                    "name another --file",
                ),
            };
            return Err(refuse(
                "symlink",
                format!(
                    "{} is a symbolic link (to {}): bench {rule}, and never writes through a \
                     link; remove it or {way_out}",
                    path.display(),
                    target.display(),
                ),
            ));
        }
    }
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            return Err(refuse(
                "not-a-regular-file",
                format!(
                    "{}: not a regular file; bench reads regular files only",
                    path.display()
                ),
            ))
        }
        Ok(m) if m.len() as usize >= size => {
            let mut data = vec![0u8; size];
            let mut open = std::fs::OpenOptions::new();
            if own {
                // Checked above; a link put there since is not followed.
                open.custom_flags(libc::O_NOFOLLOW);
            }
            let f = open.read(true).open(path).map_err(os("open"))?;
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut data, 0).map_err(os("read"))?;
            return Ok(data);
        }
        Ok(m) if !own => {
            return Err(refuse(
                "unexpected-eof",
                format!(
                    "{} has {}, fewer than the largest --sizes ({}); bench never \
                     modifies a file it did not make: give a larger file or smaller --sizes",
                    path.display(),
                    units::count(m.len(), "byte", "bytes"),
                    units::size(size as u64)
                ),
            ))
        }
        Ok(_) => {}
        Err(e) if !own && !create => {
            let mut err = CliError::os("open", path, &e);
            err.message += &format!(
                "; add --create to let bench make it ({})",
                units::size(size as u64)
            );
            return Err(err);
        }
        Err(_) => {}
    }
    let mut data = vec![0u8; size];
    fill(&mut data, 0x9e37_79b9_7f4a_7c15);
    eprintln!(
        "gpufile bench: writing {} to {}",
        units::size(size as u64),
        path.display()
    );
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    // The permissions `std::fs::write` would give (0o666 less the umask), not a temporary
    // file's 0o600: the data file stays after bench.
    let mut made = tempfile::Builder::new()
        .prefix(".gpufile-bench-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| CliError::os("create a file in", dir, &e))?;
    for chunk in data.chunks(16 << 20) {
        interrupts.check()?;
        made.write_all(chunk).map_err(os("write"))?;
    }
    interrupts.check()?;
    // Its own file replaces an older, smaller one (a rename replaces a link put there since,
    // never its target); a --create file takes the name only if nothing has it.
    let placed = match own {
        true => made.persist(path),
        false => made.persist_noclobber(path),
    };
    placed.map_err(|e| match e.error.kind() {
        std::io::ErrorKind::AlreadyExists => refuse(
            "os",
            format!(
                "{} appeared while bench was making it; bench never replaces a file it did \
                 not make",
                path.display()
            ),
        ),
        _ => os("rename a new file to")(e.error),
    })?;
    Ok(data)
}

enum Buf {
    Host(Vec<u8>),
    Device(DeviceBuffer),
}

impl Buf {
    fn new(memory: Memory, size: usize) -> gpufile::Result<Self> {
        Ok(match memory {
            Memory::Host => Buf::Host(vec![0u8; size]),
            Memory::Device => Buf::Device(DeviceBuffer::new(size, 0)?),
        })
    }

    fn load(&mut self, data: &[u8]) -> gpufile::Result<()> {
        match self {
            Buf::Host(v) => v.copy_from_slice(data),
            Buf::Device(d) => d.copy_from_host(0, data)?,
        }
        Ok(())
    }

    fn clear(&mut self) -> gpufile::Result<()> {
        match self {
            Buf::Host(v) => v.fill(0),
            Buf::Device(d) => d.fill(0)?,
        }
        Ok(())
    }

    fn equals(&self, data: &[u8]) -> gpufile::Result<bool> {
        Ok(match self {
            Buf::Host(v) => v[..] == *data,
            Buf::Device(d) => {
                let mut v = vec![0u8; d.len()];
                d.copy_to_host(0, &mut v)?;
                v[..] == *data
            }
        })
    }

    /// Moves the buffer to or from `f`; on a signal, the request's tasks not yet started are
    /// cancelled and the running ones waited for (they use the buffer), then `Ok(None)`.
    fn transfer(
        &mut self,
        f: &FileHandle,
        write: bool,
        s: &Settings,
        interrupts: &Interrupts,
    ) -> gpufile::Result<Option<usize>> {
        let buffer = match self {
            Buf::Host(v) => Buffer::host(v),
            Buf::Device(d) => Buffer::Device {
                addr: d.addr(),
                len: d.len(),
            },
        };
        let req = match write {
            true => Request::write(buffer, 0),
            false => Request::read(buffer, 0),
        };
        // SAFETY: the buffer is borrowed until the future is waited on, within this call
        // (an interrupted one too).
        let fut = unsafe { Engine::global()?.submit(&f.endpoint(req.direction), req, s) }?;
        loop {
            if let Some(r) = fut.wait_timeout(Duration::from_millis(50)) {
                return r.map(Some);
            }
            if interrupts.caught().is_some() {
                fut.cancel();
                let _ = fut.wait();
                return Ok(None);
            }
        }
    }
}

pub(crate) fn run(args: &BenchArgs, units: Units) -> CliResult {
    let sizes: Vec<usize> = args
        .sizes
        .iter()
        .map(|s| {
            let n = parse_size_arg("sizes", s)?;
            usize::try_from(n).map_err(|_| CliError::invalid(format!("--sizes {s}: too large")))
        })
        .collect::<Result<_, _>>()?;
    if let Some(zero) = args.sizes.iter().zip(&sizes).find(|(_, n)| **n == 0) {
        return Err(CliError::invalid(format!(
            "--sizes {}: a transfer of 0 bytes measures nothing; sizes are at least 1 byte",
            zero.0
        )));
    }
    // Before the sweep: a missing matplotlib, or an image that cannot be written, should cost
    // seconds, not the whole run.
    if let Some(image) = &args.plot {
        check_plot_target(image)?;
        check_plotting()?;
    }
    let task_sizes: Vec<String> = args.task_sizes.clone();
    let memories: Vec<Memory> = if args.memory.is_empty() {
        vec![if gpufile::device_count().unwrap_or(0) > 0 {
            Memory::Device
        } else {
            Memory::Host
        }]
    } else {
        args.memory
            .iter()
            .map(|m| match m.as_str() {
                "host" => Ok(Memory::Host),
                "device" | "gpu" => Ok(Memory::Device),
                other => Err(CliError::invalid(format!(
                    "--memory {other:?}: expected host or device"
                ))),
            })
            .collect::<Result<_, _>>()?
    };
    for op in &args.ops {
        if op != "read" && op != "write" {
            return Err(format!("--ops {op:?}: expected read or write").into());
        }
    }
    for c in &args.cache {
        if c != "hot" && c != "cold" {
            return Err(format!("--cache {c:?}: expected hot or cold").into());
        }
    }
    if args.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    // Every combination's settings are checked before a file is made: a bad --threads or
    // --task-sizes leaves the folder as it was.
    let engine = Engine::global()?;
    for threads in &args.threads {
        for task in &args.task_sizes {
            for compat in &args.compat_modes {
                combination_settings(&engine, *threads, task, compat)?;
            }
        }
    }
    let own = args.file.is_none();
    let file = args
        .file
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("gpufile-bench.bin"));
    let max = sizes.iter().copied().max().unwrap_or(0);
    // From here on a Ctrl-C stops the sweep and removes the files it was making.
    let interrupts = Interrupts::catch()?;
    let reference = ensure_file(&file, max, own, args.create, &interrupts)?;
    // Writes go to a file bench makes itself (never an existing one) and removes afterwards.
    let scratch = if args.ops.iter().any(|o| o == "write") {
        let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
        let t = tempfile::Builder::new()
            .prefix(".gpufile-bench-write-")
            .tempfile_in(dir.unwrap_or(Path::new(".")))?;
        Some(t.into_temp_path())
    } else {
        None
    };

    let combos: Vec<_> = args
        .ops
        .iter()
        .flat_map(|op| args.cache.iter().map(move |c| (op.clone(), c.clone())))
        .flat_map(|(op, c)| memories.iter().map(move |m| (op.clone(), c.clone(), *m)))
        .flat_map(|t| sizes.iter().map(move |s| (t.clone(), *s)))
        .flat_map(|t| args.threads.iter().map(move |th| (t.clone(), *th)))
        .flat_map(|t| task_sizes.iter().map(move |ts| (t.clone(), ts.clone())))
        .flat_map(|t| {
            args.compat_modes
                .iter()
                .map(move |cm| (t.clone(), cm.clone()))
        })
        .collect();
    let bar = indicatif::ProgressBar::new((combos.len() * args.runs) as u64);
    if args.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut rows = Vec::new();
    let result = (|| -> CliResult {
        for (((((op, cache, memory), size), threads), task), compat) in combos {
            let settings = combination_settings(&engine, threads, &task, &compat)?;
            let write = op == "write";
            let data = &reference[..size];
            let mut buf = Buf::new(memory, size)?;
            let target: &Path = match (&scratch, write) {
                (Some(s), true) => s,
                _ => &file,
            };
            let path = FileHandle::open(&file, "r")?.io_path(memory, size, &settings)?;
            let mut times = Vec::with_capacity(args.runs);
            let mut verified = true;
            for _ in 0..args.runs {
                if write {
                    buf.load(data)?;
                } else {
                    buf.clear()?;
                }
                interrupts.check()?;
                if cache == "cold" {
                    drop_caches(&file)?;
                }
                let f = FileHandle::open(target, if write { "w" } else { "r" })?;
                let start = Instant::now();
                let n = buf.transfer(&f, write, &settings, &interrupts)?;
                times.push(start.elapsed().as_secs_f64());
                let Some(n) = n else {
                    return interrupts.check();
                };
                drop(f);
                verified &= n == size
                    && if write {
                        std::fs::read(target)? == data
                    } else {
                        buf.equals(data)?
                    };
                bar.inc(1);
            }
            if !verified {
                return Err(CliError::new(
                    "verification-failed",
                    format!(
                        "{op} of {} ({memory:?}, {}): data differ",
                        units::size(size as u64),
                        units::count(threads as u64, "thread", "threads")
                    ),
                )
                .with_path(target));
            }
            let med = median(&times);
            rows.push(Row {
                op,
                memory: format!("{memory:?}").to_lowercase(),
                cache,
                size,
                threads,
                task_size: settings.task_size,
                compat_mode: settings.compat_mode.name().into(),
                path,
                seconds: med,
                runs_s: times,
                verified,
            });
        }
        Ok(())
    })();
    bar.finish_and_clear();
    drop(scratch); // removes the write file
    result?;

    let results: Vec<_> = rows.iter().map(Row::to_json).collect();
    // Drawn before anything is printed: with --json, one object carries the results and what
    // became of the plot.
    let plotted = args
        .plot
        .as_deref()
        .map(|image| plot(&results, image, units, args.json));
    let plot_error = plotted.and_then(Result::err);
    if args.json {
        let written = args.plot.as_ref().filter(|_| plot_error.is_none());
        let error = plot_error
            .as_ref()
            .map(|e| e.to_json(Some("bench"))["error"].clone());
        emit_json(&schema::envelope(
            "bench",
            json!({
                "file": file,
                "runs_per_case": args.runs,
                "results": results,
                "plot": written,
                "error": error,
            }),
        ));
    } else {
        out(&table(&rows, args.runs, units));
        if let (Some(image), None) = (&args.plot, &plot_error) {
            out(&format!("plot written to {}\n", image.display()));
        }
    }
    match plot_error {
        None => Ok(()),
        // The JSON above carries the error already; the message still goes to stderr.
        Some(e) => Err(e.in_output(args.json)),
    }
}

/// The table of `rows`, with the statistic named.
fn table(rows: &[Row], runs: usize, units: Units) -> String {
    let mut t = format!(
        "{:<6} {:<7} {:<5} {:>10} {:>7} {:>10} {:<6} {:<14} {:>24}\n",
        "op", "memory", "cache", "size", "threads", "task", "compat", "path", "throughput"
    );
    for r in rows {
        t += &format!(
            "{:<6} {:<7} {:<5} {:>10} {:>7} {:>10} {:<6} {:<14} {:>24}\n",
            r.op,
            r.memory,
            r.cache,
            units::size(r.size as u64),
            r.threads,
            units::size(r.task_size as u64),
            r.compat_mode,
            r.path.backend.to_string(),
            units::rate(r.size as u64, r.seconds, units)
        );
    }
    t + &format!(
        "throughput: {}; every transfer verified byte for byte\n",
        statistic(runs)
    )
}

/// The median of `times`; for an even count, the mean of the middle two. The one statistic
/// bench reports: the table's throughput, JSON's `seconds` and the plot's line all come from it.
fn median(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n % 2 {
        1 => sorted[n / 2],
        _ if n == 0 => 0.0,
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The statistic's name for `runs`, as the table and the plot say it.
fn statistic(runs: usize) -> String {
    match runs {
        1 => "one run".to_owned(),
        n if n % 2 == 1 => format!("the median of {n} runs"),
        n => format!("the median of {n} runs, the mean of the middle two run times"),
    }
}

/// One combination's settings: they travel with its requests, and the defaults stay.
fn combination_settings(
    engine: &Engine,
    threads: usize,
    task: &str,
    compat: &str,
) -> Result<Settings, CliError> {
    let threads_text = threads.to_string();
    Ok(engine.settings_with(&[
        (Name::NumThreads, Input::Text(&threads_text)),
        (Name::TaskSize, Input::Text(task)),
        (Name::CompatMode, Input::Text(compat)),
    ])?)
}

/// The plotting script, inside the binary so that the standalone `gpufile` plots too.
const PLOT: &str = include_str!("plot.py");

/// The interpreter that draws plots: `$GPUFILE_PYTHON` (set by `python -m gpufile` and the
/// `gpufile` script to their own interpreter), else `python3` from PATH.
fn python() -> OsString {
    std::env::var_os("GPUFILE_PYTHON")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// Fails fast where the interpreter or matplotlib is missing.
fn check_plotting() -> CliResult {
    let py = python();
    let status = std::process::Command::new(&py)
        .args(["-c", "import matplotlib"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| {
            CliError::new(
                "plot-unavailable",
                format!(
                    "--plot runs {} (set GPUFILE_PYTHON to choose another): {e}",
                    py.to_string_lossy()
                ),
            )
        })?;
    if !status.success() {
        return Err(CliError::new(
            "plot-unavailable",
            format!(
                "--plot needs matplotlib in {}: pip install matplotlib (or set GPUFILE_PYTHON \
                 to an interpreter that has it)",
                py.to_string_lossy()
            ),
        ));
    }
    Ok(())
}

fn plot(results: &[serde_json::Value], image: &Path, units: Units, quiet: bool) -> CliResult {
    let runs = results
        .first()
        .and_then(|r| r["seconds_per_run"].as_array())
        .map_or(0, Vec::len);
    let mut child = std::process::Command::new(python())
        .args(["-c", PLOT])
        .arg(image)
        .arg(units.to_string())
        .arg(statistic(runs))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| CliError::new("plot-unavailable", format!("--plot: {}", os_text(&e))))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(serde_json::to_string(results)?.as_bytes())?;
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(
            CliError::new("plot-failed", format!("--plot failed ({status})")).with_path(image),
        );
    }
    if quiet {
        eprintln!("gpufile bench: plot written to {}", image.display());
    }
    Ok(())
}

/// `--plot`'s image, before the sweep: its extension names a format matplotlib writes, and a
/// file can be made (or written) at its path; one made to find out is removed.
fn check_plot_target(image: &Path) -> CliResult {
    let ext = image
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if !matches!(ext.as_deref(), Some("png" | "svg" | "pdf")) {
        return Err(CliError::invalid(format!(
            "--plot {}: the image's extension says its format: .png, .svg or .pdf",
            image.display()
        )));
    }
    let existed = std::fs::symlink_metadata(image).is_ok();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(image)
        .map_err(|e| {
            let mut err = CliError::os("open", image, &e);
            err.message = format!("--plot: {}", err.message);
            err
        })?;
    if !existed {
        let _ = std::fs::remove_file(image);
    }
    Ok(())
}
