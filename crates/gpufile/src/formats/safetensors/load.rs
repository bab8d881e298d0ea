//! Loading a checkpoint, the one way every binding does it: which tensors ([`Checkpoint::select`]
//! for names and `prefix*` patterns, [`Checkpoint::select_where`] for a predicate), then every
//! byte range of every file, into the caller's memory, as one [`Engine::submit_batch`]
//! ([`submit_load`]). The CLI, the Python package and the C ABI all call these, so the same
//! load is the same requests, the same tasks, from each.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Checkpoint, FormatError, PlanOptions, ReadPlan, Span};
use crate::batch::OpBuffer;
use crate::config::Settings;
use crate::engine::Engine;
use crate::file::FileHandle;
use crate::future::IoFuture;
use crate::request::{Buffer, Direction, Ranges, Request};
use crate::source::{Endpoint, Source};

/// Where a checkpoint's files are read from.
#[derive(Clone)]
pub enum Files {
    /// The local files of [`Checkpoint::files`], opened by the load (each checked to be the file
    /// whose header was read).
    Local,
    /// One source per file, in the order of [`Checkpoint::files`] (remote objects opened with
    /// their headers, say).
    Sources(Vec<Arc<dyn Source>>),
}

/// One destination allocation and the tensors it receives, laid out as
/// [`Checkpoint::plan`] (with [`PlanOptions::default`]) lays out `selection`.
#[derive(Clone, Debug)]
pub struct Target {
    /// Indices into [`Checkpoint::entries`].
    pub selection: Vec<usize>,
    /// The allocation (at least the plan's `total` bytes); `None` where the selection holds no
    /// byte to read (only empty tensors).
    pub buffer: Option<OpBuffer>,
}

/// Why a load was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The checkpoint, a file of it, or the selection.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The engine refused a request (a buffer too small, a bad device address, ...).
    #[error(transparent)]
    Io(#[from] crate::Error),
}

/// A load in flight: the future (its value: the bytes read), and each target's plan (where
/// each of its tensors lands, in the order of its selection).
pub struct Submitted {
    /// Ends when every range has been read.
    pub future: IoFuture,
    /// One per target, in order.
    pub plans: Vec<ReadPlan>,
    /// Read requests submitted (ranges adjacent in a file and in memory are one).
    requests: usize,
}

impl Submitted {
    /// Bytes the load reads.
    pub fn bytes(&self) -> u64 {
        self.plans.iter().map(ReadPlan::bytes).sum()
    }

    /// Read requests.
    pub fn requests(&self) -> usize {
        self.requests
    }
}

impl Checkpoint {
    /// The tensors `patterns` name (indices into [`Checkpoint::entries`], each once, in
    /// checkpoint order): each pattern a tensor name, or a prefix followed by `*` (every tensor
    /// whose name starts with it). No pattern selects every tensor. A pattern that matches
    /// nothing is [`FormatError::NoMatch`] naming every such pattern; an empty one is
    /// [`FormatError::InvalidOptions`].
    pub fn select<S: AsRef<str>>(&self, patterns: &[S]) -> Result<Vec<usize>, FormatError> {
        if patterns.is_empty() {
            return Ok((0..self.entries.len()).collect());
        }
        let mut chosen = BTreeSet::new();
        let mut missing = Vec::new();
        for pattern in patterns.iter().map(|p| p.as_ref()) {
            if pattern.is_empty() {
                return Err(FormatError::InvalidOptions("an empty tensor name".into()));
            }
            let found = match pattern.strip_suffix('*') {
                Some(prefix) => {
                    let all = self.select_where(|name| name.starts_with(prefix));
                    let any = !all.is_empty();
                    chosen.extend(all);
                    any
                }
                None => match self.find(pattern) {
                    Ok(i) => {
                        chosen.insert(i);
                        true
                    }
                    Err(_) => false,
                },
            };
            if !found {
                missing.push(pattern.to_owned());
            }
        }
        if !missing.is_empty() {
            return Err(FormatError::NoMatch {
                path: self.path.clone(),
                missing,
            });
        }
        Ok(chosen.into_iter().collect())
    }

    /// The tensors whose name `keep` accepts, in checkpoint order.
    pub fn select_where(&self, mut keep: impl FnMut(&str) -> bool) -> Vec<usize> {
        (0..self.entries.len())
            .filter(|&i| keep(&self.info(&self.entries[i]).name))
            .collect()
    }
}

/// One range of a file into one target's buffer, at `buf_offset`.
struct Piece {
    file: usize,
    offset: u64,
    len: usize,
    target: usize,
    buf_offset: usize,
}

/// Whether `next` lands right after `run` in memory that one request may cover: the same
/// target, or host memory, or one device allocation (the driver's answer for both names the
/// same base) with no producer stream to wait for.
fn contiguous(targets: &[Target], run: &Piece, next: &Piece) -> bool {
    let (Some(a), Some(b)) = (&targets[run.target].buffer, &targets[next.target].buffer) else {
        return false;
    };
    let end = run.buf_offset + run.len;
    if run.target == next.target {
        return end == next.buf_offset;
    }
    match (a.buffer, b.buffer) {
        (Buffer::Host { ptr: pa, .. }, Buffer::Host { ptr: pb, .. }) => {
            (pa as usize).checked_add(end) == (pb as usize).checked_add(next.buf_offset)
        }
        (Buffer::Device { addr: da, .. }, Buffer::Device { addr: db, .. }) => {
            let same_allocation = match (a.pointer_info, b.pointer_info) {
                (Some(x), Some(y)) => x.base == y.base && x.device == y.device,
                _ => false,
            };
            same_allocation
                && a.after.is_none()
                && b.after.is_none()
                && da.checked_add(end as u64) == db.checked_add(next.buf_offset as u64)
        }
        _ => false,
    }
}

/// `len` bytes of `buffer` at `offset` (inside it: the caller checked).
fn sub(buffer: Buffer, offset: usize, len: usize) -> Buffer {
    match buffer {
        Buffer::Host { ptr, .. } => Buffer::Host {
            ptr: ptr.wrapping_add(offset),
            len,
        },
        Buffer::Device { addr, .. } => Buffer::Device {
            addr: addr + offset as u64,
            len,
        },
    }
}

/// Starts reading every target's tensors of `checkpoint` from `files` into its buffer, as one
/// [`Engine::submit_batch`] over every file: each target planned by [`Checkpoint::plan`] (its
/// ranges at their offsets in its buffer); ranges adjacent both in a file and in memory (one
/// target's, or targets laid out back to back: host memory, or one device allocation) are one
/// request; each local file is opened once and checked to be the file whose header was read
/// ([`FormatError::Replaced`] otherwise). Nothing is read when the load is refused (a buffer
/// shorter than its plan's `total`, say).
///
/// # Safety
/// As for [`Engine::submit`], for every target's buffer: valid, and neither read nor written by
/// anyone else, until the returned future is done.
pub unsafe fn submit_load(
    engine: &Engine,
    settings: &Settings,
    checkpoint: &Checkpoint,
    files: &Files,
    targets: &[Target],
) -> Result<Submitted, LoadError> {
    // SAFETY: the caller's contract.
    unsafe { submit_parts(engine, settings, checkpoint, files, targets, &[]) }
}

/// [`submit_load`] with parts of tensors: `parts[t]` for target `t` (none: every target's
/// tensors whole) as [`Checkpoint::plan_parts`] takes them, each target laid out as that plan
/// says. A part in several ranges (a column block, a strided slice) is one request of its
/// ranges ([`Request::read_ranges`]) straight into its place in the target.
///
/// # Safety
/// As for [`submit_load`].
pub unsafe fn submit_parts(
    engine: &Engine,
    settings: &Settings,
    checkpoint: &Checkpoint,
    files: &Files,
    targets: &[Target],
    parts: &[Vec<Option<Vec<Span>>>],
) -> Result<Submitted, LoadError> {
    if !parts.is_empty() && parts.len() != targets.len() {
        return Err(FormatError::InvalidOptions(format!(
            "parts for {} targets, given {} targets",
            parts.len(),
            targets.len()
        ))
        .into());
    }
    if let Files::Sources(s) = files {
        if s.len() != checkpoint.files.len() {
            return Err(FormatError::InvalidOptions(format!(
                "{} sources for {} files",
                s.len(),
                checkpoint.files.len()
            ))
            .into());
        }
    }
    let mut plans = Vec::with_capacity(targets.len());
    let mut pieces = Vec::new();
    for (t, target) in targets.iter().enumerate() {
        let part = parts.get(t).map_or(&[][..], Vec::as_slice);
        let plan = checkpoint.plan_parts(&target.selection, part, PlanOptions::default())?;
        let room = target.buffer.map_or(0, |b| b.buffer.len() as u64);
        if (!plan.ranges.is_empty() || !plan.gathers.is_empty()) && room < plan.total {
            let names: Vec<&str> = target
                .selection
                .iter()
                .take(3)
                .map(|&i| checkpoint.info(&checkpoint.entries[i]).name.as_str())
                .collect();
            return Err(FormatError::InvalidOptions(format!(
                "a buffer of {room} bytes for tensors {names:?}{} taking {} bytes",
                if target.selection.len() > 3 {
                    ", ..."
                } else {
                    ""
                },
                plan.total
            ))
            .into());
        }
        // In range: every range ends within `plan.total`, at most the buffer's length.
        pieces.extend(plan.ranges.iter().map(|r| Piece {
            file: r.file,
            offset: r.offset,
            len: r.len as usize,
            target: t,
            buf_offset: r.dest as usize,
        }));
        plans.push(plan);
    }
    pieces.sort_by_key(|p| (p.file, p.offset));
    let mut runs: Vec<Piece> = Vec::with_capacity(pieces.len());
    for p in pieces {
        match runs.last_mut() {
            Some(run)
                if run.file == p.file
                    && run.offset + run.len as u64 == p.offset
                    && contiguous(targets, run, &p) =>
            {
                run.len += p.len
            }
            _ => runs.push(p),
        }
    }
    let mut endpoints: Vec<Option<Endpoint>> = vec![None; checkpoint.files.len()];
    let mut endpoint = |file: usize| -> Result<Endpoint, LoadError> {
        if let Some(e) = &endpoints[file] {
            return Ok(e.clone());
        }
        let e = match files {
            Files::Sources(s) => Endpoint::Read(s[file].clone()),
            Files::Local => {
                let header = &checkpoint.files[file];
                let f = FileHandle::open(&header.path, "r")?;
                header.check_same_file(f.local().file())?;
                f.endpoint(Direction::Read)
            }
        };
        endpoints[file] = Some(e.clone());
        Ok(e)
    };
    let mut batch = Vec::with_capacity(runs.len());
    for run in &runs {
        let Some(dest) = targets[run.target].buffer else {
            unreachable!("a target with ranges has a buffer (checked above)")
        };
        let req = Request::read(sub(dest.buffer, run.buf_offset, run.len), run.offset)
            .pointer_info(dest.pointer_info)
            .after(dest.after);
        batch.push((endpoint(run.file)?, req));
    }
    let mut gathers = 0;
    for (plan, target) in plans.iter().zip(targets) {
        for g in &plan.gathers {
            let Some(dest) = target.buffer else {
                unreachable!("a target with ranges has a buffer (checked above)")
            };
            // In range: the part ends within the plan's total, at most the buffer's length.
            let part = sub(dest.buffer, g.dest as usize, g.bytes as usize);
            let req = Request::read_ranges(part, Ranges::Many(g.ranges.clone().into()))
                .pointer_info(dest.pointer_info)
                .after(dest.after);
            batch.push((endpoint(g.file)?, req));
            gathers += 1;
        }
    }
    // SAFETY: the caller's contract for every target's buffer; every request's memory is
    // inside its target's buffer, or spans targets laid out back to back (`contiguous`); a
    // gather's ranges lie inside its part (`block_read` packs them from 0 to its bytes).
    let future = unsafe { engine.submit_batch(&batch, settings) }?;
    Ok(Submitted {
        future,
        plans,
        requests: runs.len() + gathers,
    })
}
