//! Many requests started as one: `gpufile.read_batch`/`write_batch` (one request per entry,
//! one future for all) and `BatchHandle.submit` (one ranges request per file, buffer and
//! direction, a future each). Every request is checked and planned before any starts
//! ([`Engine::submit_batch`], [`Engine::submit_each`]), so a refused one moves no byte.

use std::collections::HashMap;
use std::path::PathBuf;

use gpufile::{Direction, Engine, FileHandle, IoFuture, PathReport};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::buffer::BufferView;
use crate::errors::{to_py, PathArg};
use crate::file::{NativeBatchFuture, NativeFile, NativeFuture};
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
    Ok(NativeBatchFuture::new(fut.map_err(to_py)?, views, owners))
}

/// One group of `BatchHandle.submit`: the file, the buffer, whether it writes, and the file
/// offsets, sizes and buffer offsets of its operations.
type Group<'py> = (
    Bound<'py, NativeFile>,
    Bound<'py, PyAny>,
    bool,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Option<Bound<'py, PyAny>>,
);

/// `BatchHandle.submit`'s requests: `groups` of `(NativeFile, buf, write, file_offsets, sizes,
/// buf_offsets)`, each a `read_ranges`/`write_ranges` request, started once every one is
/// checked and planned; a future (with its report) for each, in order.
#[pyfunction]
pub(crate) fn submit_ranges(
    py: Python<'_>,
    groups: &Bound<'_, PyAny>,
) -> PyResult<Vec<NativeFuture>> {
    let mut batch = Vec::new();
    let mut held = Vec::new();
    for group in groups.try_iter()? {
        let group = group?;
        let (file, buf, write, offsets, sizes, bufs): Group<'_> = group.extract()?;
        let dir = if write {
            Direction::Write
        } else {
            Direction::Read
        };
        let handle = file.get().handle()?;
        let ranges = crate::ranges::ranges_arg(&offsets, &sizes, bufs.as_ref())?;
        let view = BufferView::for_request(&buf, !write)?;
        batch.push((
            handle.endpoint(dir),
            crate::ranges::request(&view, dir, ranges),
        ));
        held.push((view, vec![buf.unbind(), file.into_any().unbind()]));
    }
    let started = py.detach(move || -> gpufile::Result<Vec<(IoFuture, PathReport)>> {
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        // SAFETY: each future made below holds its buffer's view until its request is done.
        unsafe { engine.submit_each(&batch, &settings) }
    });
    Ok(started
        .map_err(to_py)?
        .into_iter()
        .zip(held)
        .map(|((fut, report), (view, owners))| {
            NativeFuture::new(fut, view, owners).with_report(report)
        })
        .collect())
}
