//! Bindings of `gpufile::safetensors`: validated headers, read plans, selection, sharding and
//! loading into the caller's buffers (the core's `load`: the package allocates, the core
//! selects and reads). The save side is `safetensors_save`, which builds on this one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use gpufile::safetensors::{
    submit_parts, Checkpoint, Files, FormatError, LoadError, PlanOptions, Sharding, Span, Split,
    Target,
};
use gpufile::source::Source;
use gpufile::Engine;

use crate::buffer::BufferView;
use crate::errors::PathArg;
use crate::future::wait_interruptibly;
use pyo3::exceptions::{PyIndexError, PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::remote::NativeRemoteFile;

use crate::errors::SafetensorError;

/// A format error as Python raises it: the class from its kind in the error table
/// (`kinds::python_class`: an OS error's by errno, `KeyError` for a name the checkpoint lacks,
/// `SafetensorError` for a file that breaks the format); an OS error's arguments are
/// `OSError`'s own (errno, text, path).
pub(crate) fn to_py(e: FormatError) -> PyErr {
    let class = crate::kinds::python_class(e.kind());
    let text = e.to_string();
    let errno = e.errno().unwrap_or(0);
    Python::attach(|py| {
        let args = match e {
            FormatError::Io { path, source } => match source.raw_os_error() {
                Some(errno) => (
                    errno,
                    gpufile::__private::error::os_message(errno),
                    path.to_string_lossy().into_owned(),
                )
                    .into_pyobject(py),
                None => PyTuple::new(py, [text]),
            },
            FormatError::NotSeekable { path, what } => (
                errno,
                format!(
                    "is {what}: safetensors files are read at offsets, which {what} does not have"
                ),
                path.to_string_lossy().into_owned(),
            )
                .into_pyobject(py),
            _ => PyTuple::new(py, [text]),
        };
        crate::errors::raise(py, class, args)
    })
}

/// A tensor as Python sees it: (name, file index, dtype, shape, absolute file offset, bytes).
pub(crate) type TensorRow = (String, usize, &'static str, Vec<u64>, u64, u64);

/// A read plan: (destination bytes, ranges as (file, offset, len, dest), each tensor's dest).
type PlanRows = (u64, Vec<(usize, u64, u64, u64)>, Vec<u64>);

/// One dimension's part as Python gives it: (start, count, step).
type SpanRow = (u64, u64, u64);

/// A plan of parts: (destination bytes, each tensor's dest, each tensor's shape as read).
type PartPlan = (u64, Vec<u64>, Vec<Vec<u64>>);

fn core_parts(parts: Vec<Option<Vec<SpanRow>>>) -> Vec<Option<Vec<Span>>> {
    parts
        .into_iter()
        .map(|p| {
            p.map(|spans| {
                spans
                    .into_iter()
                    .map(|(start, count, step)| Span { start, count, step })
                    .collect()
            })
        })
        .collect()
}

/// One or more safetensors files with validated headers.
#[pyclass(frozen, module = "gpufile._native")]
struct SafetensorsCheckpoint {
    inner: Checkpoint,
    /// Where the files' bytes are: local files (opened by each load), or the remote objects
    /// opened with their headers.
    files: Files,
}

#[pymethods]
impl SafetensorsCheckpoint {
    /// Opens a file, a `*.safetensors.index.json` or a directory; reads every header (GIL
    /// released).
    #[staticmethod]
    fn open(py: Python<'_>, path: PathArg) -> PyResult<Self> {
        let inner = py.detach(|| Checkpoint::open(&path.0)).map_err(to_py)?;
        Ok(SafetensorsCheckpoint {
            inner,
            files: Files::Local,
        })
    }

    /// Opens a checkpoint by URL (`s3://`, `gs://`, `http(s)://`, WebHDFS): a file, an index or
    /// a prefix holding one; every header read with a small ranged request (GIL released).
    /// Returns the checkpoint and its files, opened for reading, in file order.
    #[staticmethod]
    fn open_url(py: Python<'_>, url: String) -> PyResult<(Self, Vec<NativeRemoteFile>)> {
        let opened = py.detach(|| gpufile_remote::open_checkpoint(&url));
        match opened {
            Ok(rc) => {
                let sources = rc
                    .files
                    .iter()
                    .map(|f| f.clone() as Arc<dyn Source>)
                    .collect();
                let files = rc
                    .files
                    .into_iter()
                    .map(NativeRemoteFile::from_arc)
                    .collect();
                Ok((
                    SafetensorsCheckpoint {
                        inner: rc.checkpoint,
                        files: Files::Sources(sources),
                    },
                    files,
                ))
            }
            Err(gpufile_remote::CheckpointError::Format(e)) => Err(to_py(e)),
            Err(gpufile_remote::CheckpointError::Remote(e)) => Err(crate::errors::open_err(e)),
        }
    }

    /// Checks that the file opened for file `file`'s data (its `st_dev`, `st_ino`) is the one
    /// whose header was read: `SafetensorError` where it was replaced since.
    fn check_file(&self, file: usize, dev: u64, ino: u64) -> PyResult<()> {
        let header =
            self.inner.files.get(file).ok_or_else(|| {
                PyIndexError::new_err(format!("file index {file} is out of range"))
            })?;
        header.check_identity(dev, ino).map_err(to_py)
    }

    /// The files, in the order `file` indices refer to.
    fn files(&self) -> Vec<PathBuf> {
        self.inner.files.iter().map(|h| h.path.clone()).collect()
    }

    /// `__metadata__` of file `file`, or None.
    fn metadata(&self, file: usize) -> PyResult<Option<BTreeMap<String, String>>> {
        let h = self
            .inner
            .files
            .get(file)
            .ok_or_else(|| PyValueError::new_err(format!("no file {file}")))?;
        Ok(h.metadata.clone())
    }

    /// Every tensor, by file then offset.
    fn tensors(&self) -> Vec<TensorRow> {
        let ck = &self.inner;
        ck.entries
            .iter()
            .map(|e| {
                let t = ck.info(e);
                let offset = ck.files[e.file].data_start + t.start;
                (
                    t.name.clone(),
                    e.file,
                    t.dtype.name(),
                    t.shape.clone(),
                    offset,
                    t.len(),
                )
            })
            .collect()
    }

    /// Plans reading tensors `selection` (indices into `tensors()`) into one allocation.
    #[pyo3(signature = (selection, align=gpufile::safetensors::DEFAULT_ALIGN, coalesce=true))]
    fn plan(&self, selection: Vec<usize>, align: u64, coalesce: bool) -> PyResult<PlanRows> {
        let plan = self
            .inner
            .plan(&selection, PlanOptions { align, coalesce })
            .map_err(to_py)?;
        let ranges = plan
            .ranges
            .iter()
            .map(|r| (r.file, r.offset, r.len, r.dest))
            .collect();
        Ok((plan.total, ranges, plan.dests))
    }

    /// Plans reading tensors `selection` in part (`parts[i]` the block of `selection[i]` as
    /// (start, count, step) per dimension, or None: whole) into one allocation: (destination
    /// bytes, each tensor's dest, each tensor's shape as read).
    fn plan_parts(
        &self,
        selection: Vec<usize>,
        parts: Vec<Option<Vec<SpanRow>>>,
    ) -> PyResult<PartPlan> {
        let plan = self
            .inner
            .plan_parts(&selection, &core_parts(parts), PlanOptions::default())
            .map_err(to_py)?;
        Ok((plan.total, plan.dests, plan.shapes))
    }

    /// The block of each tensor of `selection` rank `rank` of `world_size` reads by `rules`
    /// ((name pattern, split word or dimension as text), the core's `Sharding`), or None where
    /// it reads the tensor whole; `ValueError` for a bad sharding, before anything is read.
    fn shard_parts(
        &self,
        selection: Vec<usize>,
        rules: Vec<(String, String)>,
        rank: u64,
        world_size: u64,
    ) -> PyResult<Vec<Option<Vec<SpanRow>>>> {
        let rules = rules
            .into_iter()
            .map(|(p, w)| Split::parse(&w).map(|s| (p, s)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(to_py)?;
        let sharding = Sharding::new(rank, world_size, rules).map_err(to_py)?;
        let parts = self
            .inner
            .shard_parts(&selection, &sharding)
            .map_err(to_py)?;
        Ok(parts
            .into_iter()
            .map(|p| p.map(|spans| spans.iter().map(|s| (s.start, s.count, s.step)).collect()))
            .collect())
    }

    /// Index into `tensors()` of the tensor `name`; `KeyError` naming the checkpoint if absent.
    fn find(&self, name: &str) -> PyResult<usize> {
        self.inner.find(name).map_err(to_py)
    }

    /// Indices into `tensors()` of the tensors selected, in checkpoint order, by the core's
    /// rule (`Checkpoint::select`): `patterns` (names, or a prefix followed by `*`; `KeyError`
    /// naming every pattern that matches nothing; an empty list: none), or `keep(name) ->
    /// bool`; neither: all.
    #[pyo3(signature = (patterns=None, keep=None))]
    fn select(
        &self,
        py: Python<'_>,
        patterns: Option<Vec<String>>,
        keep: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Vec<usize>> {
        let ck = &self.inner;
        let Some(keep) = keep else {
            return match patterns {
                // An empty list selects nothing (no list selects all).
                Some(p) if p.is_empty() => Ok(Vec::new()),
                p => ck
                    .select(&p.unwrap_or_default())
                    .map_err(|e| select_error(py, e)),
            };
        };
        let mut failed = None;
        let chosen = ck.select_where(|name| {
            if failed.is_some() {
                return false;
            }
            match keep.call1((name,)).and_then(|v| v.is_truthy()) {
                Ok(k) => k,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(chosen),
        }
    }

    /// Loads tensors into the caller's buffers: `targets` as (selection, buffer), the buffer
    /// (host or device memory, as `CuFile.pread` takes one; `None` where the selection holds no
    /// byte) laid out as `plan(selection)` says, or with `parts` (one list per target, as
    /// `plan_parts` takes it) as `plan_parts` says. Every range of every file is read as one
    /// batch (the core's `submit_parts`, GIL released); Ctrl-C stops the wait. The bytes read.
    #[pyo3(signature = (targets, parts=None))]
    fn load(
        &self,
        py: Python<'_>,
        targets: Vec<(Vec<usize>, Option<Bound<'_, PyAny>>)>,
        parts: Option<Vec<Vec<Option<Vec<SpanRow>>>>>,
    ) -> PyResult<usize> {
        let parts: Vec<_> = parts
            .unwrap_or_default()
            .into_iter()
            .map(core_parts)
            .collect();
        let mut views = Vec::with_capacity(targets.len());
        let mut core = Vec::with_capacity(targets.len());
        for (selection, buf) in targets {
            let buffer = match buf {
                Some(b) => {
                    let view = BufferView::for_request(&b, true)?;
                    let whole = view.op_buffer();
                    views.push(view);
                    Some(whole)
                }
                None => None,
            };
            core.push(Target { selection, buffer });
        }
        let engine = Engine::global().map_err(crate::errors::to_py)?;
        let settings = engine.shared_settings();
        let submitted = py.detach(|| {
            // SAFETY: `views` hold every buffer's export (host) or array object (device)
            // until the wait below has seen every request end.
            unsafe { submit_parts(&engine, &settings, &self.inner, &self.files, &core, &parts) }
        });
        let submitted = submitted.map_err(|e| match e {
            LoadError::Format(e) => to_py(e),
            LoadError::Io(e) => crate::errors::to_py(e),
            e => SafetensorError::new_err(e.to_string()),
        })?;
        let result = wait_interruptibly(py, &submitted.future);
        drop(views);
        result
    }
}

/// A selection's error: `KeyError` in Python's words for patterns that match nothing
/// (`'a'`, not `"a"`), else as [`to_py`].
fn select_error(py: Python<'_>, e: FormatError) -> PyErr {
    let FormatError::NoMatch { path, missing } = e else {
        return to_py(e);
    };
    let quote = |s: &str| {
        pyo3::types::PyString::new(py, s)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| format!("{s:?}"))
    };
    let parts: Vec<String> = missing
        .iter()
        .map(|p| match p.strip_suffix('*') {
            Some(prefix) => format!("no tensor name starts with {}", quote(prefix)),
            None => format!("no tensor named {}", quote(p)),
        })
        .collect();
    PyKeyError::new_err(format!("{}: {}", path.display(), parts.join("; ")))
}

/// Adds the safetensors classes to `gpufile._native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SafetensorError", m.py().get_type::<SafetensorError>())?;
    m.add_class::<SafetensorsCheckpoint>()?;
    Ok(())
}
