//! Bindings of `gpufile::formats::safetensors`: validated headers and read plans. The reading
//! itself is `python/gpufile/safetensors.py`'s, through `CuFile.pread`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpufile::formats::safetensors::{Checkpoint, FormatError, PlanOptions};

use crate::errors::PathArg;
use pyo3::exceptions::{PyIndexError, PyKeyError, PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::remote::NativeRemoteFile;

pyo3::create_exception!(
    gpufile,
    SafetensorError,
    PyValueError,
    "A safetensors file or checkpoint that does not follow the format; the message names the \
     file and the tensor."
);

/// Maps a format error: I/O → `OSError` (subclass by errno), an unknown tensor → `KeyError`,
/// everything else → `SafetensorError` (a `ValueError`).
fn to_py(e: FormatError) -> PyErr {
    let text = e.to_string();
    let errno = e.errno().unwrap_or(0);
    match e {
        FormatError::Io { path, source } => match source.raw_os_error() {
            Some(errno) => PyOSError::new_err((
                errno,
                gpufile::error::os_message(errno),
                path.to_string_lossy().into_owned(),
            )),
            None => PyOSError::new_err(text),
        },
        FormatError::NotSeekable { path, what } => PyOSError::new_err((
            errno,
            format!("is {what}: safetensors files are read at offsets, which {what} does not have"),
            path.to_string_lossy().into_owned(),
        )),
        FormatError::UnknownTensor { .. } => PyKeyError::new_err(text),
        FormatError::InvalidOptions(_) => PyValueError::new_err(text),
        _ => SafetensorError::new_err(text),
    }
}

/// A tensor as Python sees it: (name, file index, dtype, shape, absolute file offset, bytes).
type TensorRow = (String, usize, &'static str, Vec<u64>, u64, u64);

/// A read plan: (destination bytes, ranges as (file, offset, len, dest), each tensor's dest).
type PlanRows = (u64, Vec<(usize, u64, u64, u64)>, Vec<u64>);

/// One or more safetensors files with validated headers.
#[pyclass(frozen, module = "gpufile._native")]
struct SafetensorsCheckpoint {
    inner: Checkpoint,
}

#[pymethods]
impl SafetensorsCheckpoint {
    /// Opens a file, a `*.safetensors.index.json` or a directory; reads every header (GIL
    /// released).
    #[staticmethod]
    fn open(py: Python<'_>, path: PathArg) -> PyResult<Self> {
        let inner = py.detach(|| Checkpoint::open(&path.0)).map_err(to_py)?;
        Ok(SafetensorsCheckpoint { inner })
    }

    /// Opens a checkpoint by URL (`s3://`, `gs://`, `http(s)://`, WebHDFS): a file, an index or
    /// a prefix holding one; every header read with a small ranged request (GIL released).
    /// Returns the checkpoint and its files, opened for reading, in file order.
    #[staticmethod]
    fn open_url(py: Python<'_>, url: String) -> PyResult<(Self, Vec<NativeRemoteFile>)> {
        let opened = py.detach(|| gpufile_remote::open_checkpoint(&url));
        match opened {
            Ok(rc) => {
                let files = rc
                    .files
                    .into_iter()
                    .map(NativeRemoteFile::from_arc)
                    .collect();
                Ok((
                    SafetensorsCheckpoint {
                        inner: rc.checkpoint,
                    },
                    files,
                ))
            }
            Err(gpufile_remote::CheckpointError::Format(e)) => Err(to_py(e)),
            Err(gpufile_remote::CheckpointError::Remote(e)) => Err(match e {
                gpufile::Error::InvalidArgument(text) => {
                    pyo3::exceptions::PyRuntimeError::new_err(text)
                }
                other => crate::errors::to_py(other),
            }),
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
    #[pyo3(signature = (selection, align=gpufile::formats::safetensors::DEFAULT_ALIGN, coalesce=true))]
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

    /// Index into `tensors()` of the tensor `name`; `KeyError` naming the checkpoint if absent.
    fn find(&self, name: &str) -> PyResult<usize> {
        self.inner.find(name).map_err(to_py)
    }
}

/// Adds the safetensors classes to `gpufile._native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SafetensorError", m.py().get_type::<SafetensorError>())?;
    m.add_class::<SafetensorsCheckpoint>()?;
    Ok(())
}
