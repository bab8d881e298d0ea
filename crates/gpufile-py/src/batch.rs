//! Many requests started as one: `gpufile.read_batch`/`write_batch` (one request per entry,
//! one future for all) and `BatchHandle.submit` (the core's batch: one ranges request per file,
//! buffer and direction, a future each). Every request is checked and planned before any starts
//! ([`Engine::submit_batch`], [`batch::submit`]), so a refused one moves no byte.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use gpufile::__private::batch::{self, Op, OpBuffer, Submission};
use gpufile::source::Endpoint;
use gpufile::{Direction, Engine, FileHandle, IoFuture};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::buffer::BufferView;
use crate::errors::{to_py, PathArg};
use crate::file::NativeFile;
use crate::future::{Held, NativeBatchFuture, NativeFuture};
use crate::request::{self, Args};

/// Many files as one stream of requests (`gpufile.read_batch` / `write_batch`): `entries` are
/// `(NativeFile or path, buf, size, file_offset)`; every request is checked and planned before
/// any starts, then all are queued back to back; one future for all of them. A path named by
/// several entries is opened once (a batch of many ranges of one file needs one descriptor).
#[pyfunction]
#[pyo3(signature = (entries, write=false))]
pub(crate) fn submit_batch(
    py: Python<'_>,
    entries: &Bound<'_, PyAny>,
    write: bool,
) -> PyResult<NativeBatchFuture> {
    let dir = if write {
        Direction::Write
    } else {
        Direction::Read
    };
    let flags = if write { "r+" } else { "r" };
    let mut batch = Vec::new();
    let mut views = Vec::new();
    let mut owners = Vec::new();
    let mut opened: HashMap<PathBuf, FileHandle> = HashMap::new();
    for (i, entry) in entries.try_iter()?.enumerate() {
        let entry = entry?;
        let bad = || {
            PyTypeError::new_err(format!(
                "batch entry {i} must be (file, buf, size, file_offset), got {}",
                crate::errors::type_name(&entry)
            ))
        };
        let items: Vec<Bound<'_, PyAny>> = entry
            .try_iter()
            .map_err(|_| bad())?
            .collect::<PyResult<_>>()?;
        let [file, buf, size, offset] = items.as_slice() else {
            return Err(bad());
        };
        let handle = match file.cast::<NativeFile>() {
            Ok(f) => f.get().handle()?,
            Err(_) => {
                let PathArg(path) = file.extract().map_err(|_| bad())?;
                match opened.get(&path) {
                    Some(h) => h.clone(),
                    None => {
                        let p = path.clone();
                        let h = py.detach(|| FileHandle::open(p, flags)).map_err(to_py)?;
                        opened.insert(path, h.clone());
                        h
                    }
                }
            }
        };
        let view = BufferView::for_request(buf, dir == Direction::Read)?;
        let args = Args {
            dir,
            len: view.request_len(Some(size))?,
            buf_offset: 0,
            file_offset: ("file_offset", Some(offset)),
            task_size: None,
            caller_waits: false,
        };
        batch.push((handle.endpoint(dir), request::build(&view, args)?));
        views.push(view);
        owners.push(buf.clone().unbind());
        owners.push(file.clone().unbind());
    }
    let fut = py.detach(move || -> gpufile::Result<IoFuture> {
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        // SAFETY: every buffer's view is held by the returned future until all requests are
        // done.
        unsafe { engine.submit_batch(&batch, &settings) }
    });
    let fut = crate::notices::after(py, fut).map_err(to_py)?;
    Ok(NativeBatchFuture::new(fut, views, owners))
}

/// `BatchHandle.submit`'s operations, as the core's batch takes them ([`batch::submit`]): the
/// operations on one file, one buffer and one direction are one request of many ranges, every
/// request checked and planned before any starts. Operation `i` is `sizes[i]` bytes at
/// `file_offsets[i]` of `files[file_index[i]]` and at `buf_offsets[i]` of
/// `buffers[buffer_index[i]]`, a write where `writes[i]`. A future (with its report) per
/// request, and each request's operations (in the order of its ranges).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn submit_ops(
    py: Python<'_>,
    files: Vec<Bound<'_, NativeFile>>,
    buffers: Vec<Bound<'_, PyAny>>,
    file_index: Vec<usize>,
    buffer_index: Vec<usize>,
    writes: Vec<bool>,
    file_offsets: &Bound<'_, PyAny>,
    sizes: &Bound<'_, PyAny>,
    buf_offsets: &Bound<'_, PyAny>,
) -> PyResult<(Vec<NativeFuture>, Vec<Vec<usize>>)> {
    let ranges = crate::ranges::ranges_arg(file_offsets, sizes, Some(buf_offsets))?;
    let ranges = ranges.as_slice();
    let n = ranges.len();
    if [file_index.len(), buffer_index.len(), writes.len()] != [n; 3] {
        return Err(PyValueError::new_err(format!(
            "{n} operations, but {} file indices, {} buffer indices and {} directions",
            file_index.len(),
            buffer_index.len(),
            writes.len()
        )));
    }
    let mut endpoints: HashMap<(usize, bool), Endpoint> = HashMap::new();
    let mut views: HashMap<(usize, bool), (Arc<BufferView>, OpBuffer)> = HashMap::new();
    for i in 0..n {
        let (f, b, w) = (file_index[i], buffer_index[i], writes[i]);
        let dir = if w { Direction::Write } else { Direction::Read };
        let (Some(file), Some(buf)) = (files.get(f), buffers.get(b)) else {
            return Err(PyValueError::new_err(format!(
                "operation {i} names file {f} and buffer {b} of {} and {}",
                files.len(),
                buffers.len()
            )));
        };
        if let Entry::Vacant(e) = endpoints.entry((f, w)) {
            e.insert(file.get().handle()?.endpoint(dir));
        }
        if let Entry::Vacant(e) = views.entry((b, w)) {
            let view = BufferView::for_request(buf, !w)?;
            let described = view.op_buffer();
            e.insert((Arc::new(view), described));
        }
    }
    let ops: Vec<Op<'_>> = (0..n)
        .map(|i| Op {
            endpoint: &endpoints[&(file_index[i], writes[i])],
            buffer: &views[&(buffer_index[i], writes[i])].1,
            file_offset: ranges[i].file_offset,
            buf_offset: ranges[i].buf_offset,
            size: ranges[i].len,
        })
        .collect();
    let submitted = py.detach(|| -> gpufile::Result<Submission> {
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        // SAFETY: each request's future made below holds the views of its operations' buffers
        // until it is done.
        unsafe { batch::submit(&engine, &ops, &settings) }
    });
    let submission = crate::notices::after(py, submitted).map_err(to_py)?;
    let mut members = Vec::new();
    let futures = submission
        .into_groups()
        .into_iter()
        .map(|g| {
            let mut held: Vec<(usize, bool)> = Vec::new();
            let mut owners: Vec<Py<PyAny>> = Vec::new();
            for &i in &g.ops {
                let key = (buffer_index[i], writes[i]);
                if !held.contains(&key) {
                    held.push(key);
                    owners.push(buffers[key.0].clone().unbind());
                }
            }
            let views = held.iter().map(|k| Arc::clone(&views[k].0)).collect();
            owners.push(files[file_index[g.ops[0]]].clone().into_any().unbind());
            let fut = NativeFuture::holding(g.future, Held::Shared { _views: views }, owners);
            members.push(g.ops);
            fut.with_report(g.report)
        })
        .collect();
    Ok((futures, members))
}

/// The order several files' writes go into one batch, under the process settings
/// (`gpufile::__private::batch::interleave`): `files` holds each file's writes' lengths in file order;
/// the pieces as `(file, write, at, len)`, indices into `files`.
#[pyfunction]
pub(crate) fn interleave(files: Vec<Vec<usize>>) -> PyResult<Vec<(usize, usize, usize, usize)>> {
    let settings = Engine::global().map_err(to_py)?.shared_settings();
    Ok(batch::interleave(&files, &settings)
        .into_iter()
        .map(|p| (p.file, p.write, p.at, p.len))
        .collect())
}
