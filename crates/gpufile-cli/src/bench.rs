//! `gpufile bench`: a gdsio-like sweep. Every combination of sizes, threads, task sizes, compat
//! modes, operations, cache states and memories runs `--runs` times; every read is checked
//! against the file's bytes and every write by reading the written file back; the median is
//! reported in a table (or JSON), and `--plot` draws it with matplotlib where installed.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use gpufile::config::{Input, Name, Settings};
use gpufile::cuda::DeviceBuffer;
use gpufile::{Buffer, Engine, FileHandle, Memory, Request};

use crate::{out, parse_size_arg, CliResult};

#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// The file to read: an existing regular file at least as large as the largest size, never
    /// modified. Without it, gpufile makes (and reuses) its own file `gpufile-bench.bin` in the
    /// temporary folder.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Make `--file` (pseudo-random bytes) when it does not exist yet. An existing file is
    /// never overwritten.
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
    /// Runs per combination (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Draw the results into this PNG (needs python3 with matplotlib).
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(serde::Serialize, Clone)]
struct Row {
    op: String,
    memory: String,
    cache: String,
    size: usize,
    threads: usize,
    task_size: usize,
    compat_mode: String,
    path: String,
    gb_per_s: f64,
    runs_s: Vec<f64>,
    verified: bool,
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
fn drop_caches(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let f = std::fs::File::open(path)?;
    gpufile::pagecache::drop_file_page_cache(f.as_raw_fd(), path, 0, 0, true)?;
    Ok(())
}

/// The benchmark's data file. A user's `--file` is only read: it must be a regular file of at
/// least `size` bytes. gpufile writes only a file it makes: `--file` with `--create` when the path
/// does not exist yet, or its own default file.
fn ensure_file(
    path: &Path,
    size: usize,
    own: bool,
    create: bool,
) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            return Err(format!(
                "{}: not a regular file; bench reads regular files only",
                path.display()
            )
            .into())
        }
        Ok(m) if m.len() as usize >= size => {
            let mut data = vec![0u8; size];
            let f = std::fs::File::open(path)?;
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut data, 0)?;
            return Ok(data);
        }
        Ok(m) if !own => {
            return Err(format!(
                "{} has {} bytes, fewer than the largest --sizes ({size}); bench never \
                 modifies a file it did not make: give a larger file or smaller --sizes",
                path.display(),
                m.len()
            )
            .into())
        }
        Ok(_) => {}
        Err(_) if !own && !create => {
            return Err(format!(
                "{} does not exist; add --create to let bench make it ({size} bytes)",
                path.display()
            )
            .into())
        }
        Err(_) => {}
    }
    let mut data = vec![0u8; size];
    fill(&mut data, 0x9e37_79b9_7f4a_7c15);
    eprintln!("gpufile bench: writing {size} bytes to {}", path.display());
    std::fs::write(path, &data)?;
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

    fn transfer(&mut self, f: &FileHandle, write: bool, s: &Settings) -> gpufile::Result<usize> {
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
        // SAFETY: the buffer is borrowed until the future is waited on, within this call.
        unsafe { f.submit(req, Some(s)) }?.wait()
    }
}

pub(crate) fn run(args: &BenchArgs) -> CliResult {
    let sizes: Vec<usize> = args
        .sizes
        .iter()
        .map(|s| parse_size_arg("sizes", s).map(|n| n as usize))
        .collect::<Result<_, _>>()?;
    let task_sizes: Vec<String> = args.task_sizes.clone();
    let memories: Vec<Memory> = if args.memory.is_empty() {
        vec![if gpufile::cuda::device_count().unwrap_or(0) > 0 {
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
                other => Err(format!("--memory {other:?}: expected host or device")),
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
    let own = args.file.is_none();
    let file = args
        .file
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("gpufile-bench.bin"));
    let max = sizes.iter().copied().max().unwrap_or(0);
    let reference = ensure_file(&file, max, own, args.create)?;
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
    let engine = Engine::global()?;
    let mut rows = Vec::new();
    let result = (|| -> CliResult {
        for (((((op, cache, memory), size), threads), task), compat) in combos {
            let threads_text = threads.to_string();
            // Each combination's settings travel with its requests; the defaults stay.
            let settings = engine.settings_with(&[
                (Name::NumThreads, Input::Text(&threads_text)),
                (Name::TaskSize, Input::Text(&task)),
                (Name::CompatMode, Input::Text(&compat)),
            ])?;
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
                if cache == "cold" {
                    drop_caches(&file)?;
                }
                let f = FileHandle::open(target, if write { "w" } else { "r" })?;
                let start = Instant::now();
                let n = buf.transfer(&f, write, &settings)?;
                times.push(start.elapsed().as_secs_f64());
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
                return Err(format!(
                    "{op} of {size} bytes ({memory:?}, {threads} threads): data differ"
                )
                .into());
            }
            let mut sorted = times.clone();
            sorted.sort_by(f64::total_cmp);
            let med = sorted[sorted.len() / 2];
            rows.push(Row {
                op,
                memory: format!("{memory:?}").to_lowercase(),
                cache,
                size,
                threads,
                task_size: settings.task_size,
                compat_mode: settings.compat_mode.name().into(),
                path: path.backend.to_string(),
                gb_per_s: if med > 0.0 {
                    size as f64 / med / 1e9
                } else {
                    0.0
                },
                runs_s: times,
                verified,
            });
        }
        Ok(())
    })();
    bar.finish_and_clear();
    drop(scratch); // removes the write file
    result?;

    if args.json {
        out(&format!("{}\n", serde_json::to_string_pretty(&rows)?));
    } else {
        let mut t = format!(
            "{:<6} {:<7} {:<5} {:>12} {:>7} {:>10} {:<6} {:<14} {:>8}\n",
            "op", "memory", "cache", "size", "threads", "task", "compat", "path", "GB/s"
        );
        for r in &rows {
            t += &format!(
                "{:<6} {:<7} {:<5} {:>12} {:>7} {:>10} {:<6} {:<14} {:>8.2}\n",
                r.op,
                r.memory,
                r.cache,
                r.size,
                r.threads,
                r.task_size,
                r.compat_mode,
                r.path,
                r.gb_per_s
            );
        }
        t += &format!(
            "medians of {} runs; every transfer verified byte for byte\n",
            args.runs
        );
        out(&t);
    }
    if let Some(png) = &args.plot {
        plot(&rows, png)?;
    }
    Ok(())
}

const PLOT: &str = r##"
import json, sys
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("--plot needs matplotlib: pip install matplotlib")
rows = json.load(sys.stdin)
labels = [f"{r['op']} {r['memory']} {r['cache']}\n{r['size'] >> 20} MiB {r['threads']} thr {r['compat_mode']}" for r in rows]
fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 4.5))
ax.bar(range(len(rows)), [r["gb_per_s"] for r in rows], color="#4c72b0")
ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
ax.set_ylabel("GB/s (median)")
ax.set_title("gpufile bench")
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=120)
"##;

fn plot(rows: &[Row], png: &Path) -> CliResult {
    use std::io::Write;
    let mut child = std::process::Command::new("python3")
        .args(["-c", PLOT])
        .arg(png)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("--plot runs python3 with matplotlib: {e}"))?;
    if let Some(stdin) = child.stdin.as_mut() {
        stdin.write_all(serde_json::to_string(rows)?.as_bytes())?;
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("--plot failed ({status})").into());
    }
    out(&format!("plot written to {}\n", png.display()));
    Ok(())
}
