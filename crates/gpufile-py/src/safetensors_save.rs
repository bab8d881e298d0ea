//! Bindings of the save side of `gpufile::safetensors`: headers built as the reference
//! serializer builds them, tensors written by the engine straight from their memory, and files
//! published whole (`gpufile::__private::publish`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use gpufile::__private::safetensors::{plan_save, submit_files, FileToWrite, SaveTensor};
use gpufile::safetensors::{
    parse_size, save_checkpoint as core_save_checkpoint, save_file as core_save_file, Dtype,
    FileOptions, SaveError, SaveOptions, TensorRow as CoreRow,
};
use gpufile::{Direction, Engine};

use crate::buffer::BufferView;
use crate::errors::{PathArg, SafetensorError};
use crate::file::NativeFile;
use crate::future::wait_interruptibly;
use crate::safetensors::{to_py, TensorRow};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A tensor to save as Python describes it: (name, dtype name, logical shape).
pub(crate) type SpecRow = (String, String, Vec<u64>);

/// The core's description of `rows` with their byte lengths, or `SafetensorError` for an
/// unknown dtype.
pub(crate) fn specs(rows: Vec<(SpecRow, u64)>) -> PyResult<Vec<SaveTensor>> {
    rows.into_iter()
        .map(|((name, dtype, shape), len)| {
            let dtype = Dtype::parse(&dtype).ok_or_else(|| {
                SafetensorError::new_err(format!("tensor {name:?}: unknown dtype {dtype:?}"))
            })?;
            Ok(SaveTensor {
                name,
                dtype,
                shape,
                len,
            })
        })
        .collect()
}

/// A file parsed from memory: its `__metadata__` and its tensors.
type ParsedFile = (Option<BTreeMap<String, String>>, Vec<TensorRow>);

/// A whole safetensors file held in memory, validated by the core's reader (`Header::from_bytes`,
/// the rules every file read obeys): its `__metadata__` and its tensors in offset order, each a
/// row as `SafetensorsCheckpoint.tensors` gives them (file 0; offsets into `data`). For
/// `safetensors.deserialize` and `load(bytes)`: the package slices `data` by these rows.
#[pyfunction]
fn safetensors_parse(data: &[u8]) -> PyResult<ParsedFile> {
    let h = gpufile::safetensors::Header::from_bytes(std::path::Path::new("bytes"), data)
        .map_err(to_py)?;
    let rows = h
        .tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                0,
                t.dtype.name(),
                t.shape.clone(),
                h.data_start + t.start,
                t.len(),
            )
        })
        .collect();
    Ok((h.metadata, rows))
}

/// The header of a file holding `tensors` ((name, dtype, shape, nbytes)) and `metadata`:
/// (header bytes, each tensor's file offset, file size).
#[pyfunction]
#[pyo3(signature = (tensors, metadata=None, path=None))]
fn safetensors_header(
    py: Python<'_>,
    tensors: Vec<(String, String, Vec<u64>, u64)>,
    metadata: Option<BTreeMap<String, String>>,
    path: Option<PathArg>,
) -> PyResult<(Py<PyBytes>, Vec<u64>, u64)> {
    let rows = tensors
        .into_iter()
        .map(|(n, d, s, len)| ((n, d, s), len))
        .collect();
    let specs = specs(rows)?;
    let path = path.map(|p| p.0).unwrap_or_default();
    let plan = plan_save(&path, &specs, metadata.as_ref()).map_err(to_py)?;
    Ok((
        PyBytes::new(py, &plan.header).unbind(),
        plan.offsets,
        plan.file_size,
    ))
}

/// A tensor to write as Python gives it: (name, dtype name, logical shape, buffer).
type SaveRow<'py> = (String, String, Vec<u64>, Bound<'py, PyAny>);

/// A file to write: the open file, its tensors and its metadata.
type SaveFile<'py> = (
    Bound<'py, NativeFile>,
    Vec<SaveRow<'py>>,
    Option<BTreeMap<String, String>>,
);

/// Writes a safetensors file into `file` (an open, empty `NativeFile`): the header, then every
/// tensor's bytes at its offset, all as one batch of requests, from each buffer's own memory
/// (host or device). `tensors` are (name, dtype, logical shape, buffer). The file's size.
#[pyfunction]
#[pyo3(signature = (file, tensors, metadata=None))]
fn write_safetensors(
    py: Python<'_>,
    file: Bound<'_, NativeFile>,
    tensors: Vec<SaveRow<'_>>,
    metadata: Option<BTreeMap<String, String>>,
) -> PyResult<u64> {
    let sizes = write_safetensors_files(py, vec![(file, tensors, metadata)])?;
    Ok(sizes[0])
}

/// The core's rows of `tensors`, with the views that hold their memory (keep them until every
/// request made from the rows has ended).
pub(crate) fn tensor_rows(tensors: Vec<SaveRow<'_>>) -> PyResult<(Vec<CoreRow>, Vec<BufferView>)> {
    let mut views = Vec::with_capacity(tensors.len());
    let mut rows = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, buf) in tensors {
        let view = BufferView::for_request(&buf, false)?;
        let dtype = Dtype::parse(&dtype).ok_or_else(|| {
            SafetensorError::new_err(format!("tensor {name:?}: unknown dtype {dtype:?}"))
        })?;
        // The request for the whole buffer carries what the view knows (the driver's answer,
        // the producer's stream); the rows' requests take it from there.
        let whole = view.request(Direction::Write, 0, view.len(), 0);
        rows.push(CoreRow {
            name,
            dtype,
            shape,
            buffer: whole.buffer,
            pointer_info: whole.pointer_info,
            after: whole.after,
        });
        views.push(view);
    }
    Ok((rows, views))
}

pub(crate) fn save_error(e: SaveError) -> PyErr {
    match e {
        SaveError::Format(e) => to_py(e),
        SaveError::Io(e) => crate::errors::to_py(e),
        // The step's own exception, marked: Python's note then says the checkpoint is published.
        SaveError::Committed(e) => {
            let err = crate::errors::to_py(e);
            Python::attach(|py| {
                let _ = err.value(py).setattr("gpufile_published", true);
            });
            err
        }
    }
}

/// Writes several safetensors files (`(file, tensors, metadata)` each, as `write_safetensors`)
/// as one batch, their writes interleaved (`gpufile::__private::safetensors::
/// submit_files`); their sizes.
#[pyfunction]
fn write_safetensors_files(py: Python<'_>, files: Vec<SaveFile<'_>>) -> PyResult<Vec<u64>> {
    let mut views = Vec::new();
    let mut per_file = Vec::with_capacity(files.len());
    for (file, tensors, metadata) in files {
        let handle = file.get().handle()?;
        let (rows, v) = tensor_rows(tensors)?;
        views.extend(v);
        per_file.push((handle, rows, metadata));
    }
    // One engine and one snapshot of the settings: the pieces are cut with the task size the
    // batch then runs with.
    let engine = Engine::global().map_err(crate::errors::to_py)?;
    let settings = engine.shared_settings();
    let submitted = py.detach(|| {
        let files: Vec<FileToWrite<'_>> = per_file
            .iter()
            .map(|(handle, rows, metadata)| FileToWrite {
                file: handle,
                tensors: rows.iter().collect(),
                metadata: metadata.as_ref(),
            })
            .collect();
        // SAFETY: `views` hold every buffer's export (host) or array object (device) until
        // the wait below has seen every request end.
        unsafe { submit_files(&engine, &settings, &files) }
    });
    let (sizes, fut) = submitted.map_err(save_error)?;
    let result = wait_interruptibly(py, &fut);
    drop(views);
    result?;
    Ok(sizes)
}

/// Saves one safetensors file at `path`, crash-safe (GIL released; Ctrl-C stops it, nothing
/// published): `tensors` as `write_safetensors` takes them, written under a temporary name and
/// renamed over `path` (`gpufile::safetensors::save_file`). The file's
/// size.
#[pyfunction]
#[pyo3(signature = (path, tensors, metadata=None, durable=true))]
fn save_file(
    py: Python<'_>,
    path: PathArg,
    tensors: Vec<SaveRow<'_>>,
    metadata: Option<BTreeMap<String, String>>,
    durable: bool,
) -> PyResult<u64> {
    let _notices = crate::notices::OnReturn(py);
    let saved = save_interruptibly(py, tensors, |rows, stop, engine, settings| {
        let options = FileOptions {
            metadata: metadata.as_ref(),
            durable,
            stop: Some(stop),
        };
        // SAFETY: `save_interruptibly` holds every row's buffer until this returns.
        unsafe { core_save_file(&path.0, rows, &options, engine, settings) }
    })?;
    saved.map_err(save_error)
}

/// `max_shard_size`: a positive int (bytes) or a str read as every size is (`"5GB"` as
/// huggingface_hub reads it, `"5GiB"`, `"5 GiB"`:
/// `gpufile::safetensors::parse_size`).
#[pyfunction]
fn parse_shard_size(size: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(text) = size.extract::<String>() {
        return parse_size(&text).map_err(PyValueError::new_err);
    }
    let n: i128 = size.extract()?;
    if n <= 0 {
        return Err(PyValueError::new_err(format!(
            "max_shard_size must be positive, got {n}"
        )));
    }
    u64::try_from(n).map_err(|_| PyValueError::new_err(format!("max_shard_size {n} is too large")))
}

/// Runs `save` over `tensors` (as `write_safetensors` takes them) with the GIL released and
/// Ctrl-C stopping it: `save` gets the rows, the stop function, the engine and its settings.
/// A signal seen meanwhile is raised once the core has cancelled and cleaned up; otherwise
/// the save's own outcome comes back.
///
/// `save` may treat every row's memory as valid until it returns: the buffers' exports (host)
/// or array objects (device) are held here until then.
pub(crate) fn save_interruptibly<T, E: Send>(
    py: Python<'_>,
    tensors: Vec<SaveRow<'_>>,
    save: impl FnOnce(
            &[CoreRow],
            &(dyn Fn() -> bool + Sync),
            &Engine,
            &gpufile::Settings,
        ) -> std::result::Result<T, E>
        + Send,
) -> PyResult<std::result::Result<T, E>>
where
    T: Send,
{
    let (rows, views) = tensor_rows(tensors)?;
    let engine = Engine::global().map_err(crate::errors::to_py)?;
    let settings = engine.shared_settings();
    let interrupt = Mutex::new(None);
    let stop = signal_stop(&interrupt);
    let saved = py.detach(|| save(&rows, &stop, &engine, &settings));
    drop(views);
    if let Some(e) = interrupt.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    Ok(saved)
}

/// The stop function of a save that runs with the GIL released
/// (`gpufile::safetensors::SaveOptions::stop`): Ctrl-C stops it.
/// The signal is seen with the GIL taken back briefly and kept in `interrupt`, to be raised
/// once the core has cancelled and cleaned up.
pub(crate) fn signal_stop(interrupt: &Mutex<Option<PyErr>>) -> impl Fn() -> bool + Sync + '_ {
    move || {
        Python::attach(|py| match py.check_signals() {
            Ok(()) => false,
            Err(e) => {
                *interrupt.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                true
            }
        })
    }
}

/// Saves a Hugging Face checkpoint into the local directory `directory` (GIL released):
/// `tensors` as `write_safetensors` takes them, `sizes` each one's size for sharding,
/// `max_shard_size` in bytes. The weight map ((tensor, file) in the order of the tensors)
/// (`gpufile::safetensors::save_checkpoint`).
#[pyfunction]
#[pyo3(signature = (directory, tensors, sizes, max_shard_size, metadata=None, durable=true))]
fn save_checkpoint(
    py: Python<'_>,
    directory: PathArg,
    tensors: Vec<SaveRow<'_>>,
    sizes: Vec<u64>,
    max_shard_size: u64,
    metadata: Option<BTreeMap<String, String>>,
    durable: bool,
) -> PyResult<Vec<(String, String)>> {
    let _notices = crate::notices::OnReturn(py);
    let saved = save_interruptibly(py, tensors, |rows, stop, engine, settings| {
        let options = SaveOptions {
            max_shard_size,
            metadata: metadata.as_ref(),
            durable,
            sizes: Some(&sizes),
            stop: Some(stop),
        };
        // SAFETY: `save_interruptibly` holds every row's buffer until this returns.
        unsafe { core_save_checkpoint(&directory.0, rows, &options, engine, settings) }
    })?;
    Ok(saved.map_err(save_error)?.weight_map)
}

/// A file written under a temporary name and published by renaming it over its final name
/// (`gpufile::__private::publish::PendingFile`); dropped unpublished, its temporary is removed.
#[pyclass(frozen, module = "gpufile._native")]
struct PendingFile {
    inner: Mutex<gpufile::__private::publish::PendingFile>,
    file: Py<NativeFile>,
    /// Running while the file is written for a durable publish (`start_write_behind`).
    write_behind: Mutex<Option<gpufile::__private::publish::WriteBehind>>,
}

impl PendingFile {
    fn lock(&self) -> std::sync::MutexGuard<'_, gpufile::__private::publish::PendingFile> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the write-behind (waits for its thread: call with the GIL released).
    fn stop_write_behind(&self) {
        let running = self
            .write_behind
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(running);
    }
}

#[pymethods]
impl PendingFile {
    /// Creates the temporary file for `path` (GIL released).
    #[new]
    fn new(py: Python<'_>, path: PathArg) -> PyResult<Self> {
        let pending = py
            .detach(|| gpufile::__private::publish::PendingFile::create(&path.0))
            .map_err(crate::errors::to_py)?;
        let file = Py::new(py, NativeFile::from_handle(pending.handle().clone()))?;
        Ok(PendingFile {
            inner: Mutex::new(pending),
            file,
            write_behind: Mutex::new(None),
        })
    }

    /// Has the disk write the file's pages while it is written, until `publish` or `discard`
    /// (`gpufile::__private::publish::PendingFile::write_behind`): for a durable save, so that its final
    /// `fsync` finds little left to write. Idempotent.
    fn start_write_behind(&self) {
        let mut running = self.write_behind.lock().unwrap_or_else(|e| e.into_inner());
        if running.is_none() {
            *running = Some(self.lock().write_behind());
        }
    }

    /// The file to write through (a `NativeFile`; errors name the final path).
    #[getter]
    fn file(&self, py: Python<'_>) -> Py<NativeFile> {
        self.file.clone_ref(py)
    }

    /// The final path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.lock().path().to_owned()
    }

    /// The temporary path.
    #[getter]
    fn temp_path(&self) -> PathBuf {
        self.lock().temp_path().to_owned()
    }

    /// `fsync` of the file (its bytes on the disk, still under the temporary name); stops the
    /// write-behind first.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            self.stop_write_behind();
            self.lock().sync()
        })
        .map_err(crate::errors::to_py)
    }

    /// Publishes under the final name (`durable`: fsync file and directory); `keep_temp`
    /// keeps the temporary name as a second name until `discard()`. Closes the file.
    #[pyo3(signature = (durable=true, keep_temp=false))]
    fn publish(&self, py: Python<'_>, durable: bool, keep_temp: bool) -> PyResult<()> {
        py.detach(|| {
            self.stop_write_behind();
            self.lock().publish(durable, keep_temp)
        })
        .map_err(crate::errors::to_py)?;
        self.file.get().close();
        Ok(())
    }

    /// Removes the temporary name (idempotent); closes the file.
    fn discard(&self, py: Python<'_>) -> PyResult<()> {
        self.file.get().close();
        py.detach(|| {
            self.stop_write_behind();
            self.lock().discard()
        })
        .map_err(crate::errors::to_py)
    }
}

/// `fsync` of a directory (its names created, renamed or removed become durable).
#[pyfunction]
fn sync_dir(py: Python<'_>, path: PathArg) -> PyResult<()> {
    py.detach(|| gpufile::__private::publish::sync_dir(&path.0))
        .map_err(crate::errors::to_py)
}

/// Whether a file name is one of gpufile's temporary names (`gpufile::__private::publish`).
#[pyfunction]
fn is_temporary_name(name: PathBuf) -> bool {
    gpufile::__private::publish::is_temporary(name.as_os_str())
}

/// The commit lock of a directory (`gpufile::__private::publish::DirLock`): held from the constructor
/// (which waits for it, GIL released) until `release()` or the end of a `with` block.
#[pyclass(frozen, module = "gpufile._native")]
struct DirLock {
    held: Mutex<Option<gpufile::__private::publish::DirLock>>,
}

#[pymethods]
impl DirLock {
    #[new]
    fn new(py: Python<'_>, path: PathArg) -> PyResult<Self> {
        let held = py
            .detach(|| gpufile::__private::publish::DirLock::acquire(&path.0))
            .map_err(crate::errors::to_py)?;
        Ok(DirLock {
            held: Mutex::new(Some(held)),
        })
    }

    /// Lets the lock go (idempotent).
    fn release(&self, py: Python<'_>) {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner()).take();
        py.detach(move || drop(held));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: &Bound<'_, PyAny>,
        _value: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> bool {
        self.release(py);
        false
    }
}

/// Removes the temporaries of `directory` that no save will publish (written by a process of
/// this host that is gone, unlocked, not in `keep`); returns how many
/// (`gpufile::__private::publish::remove_stale_temporaries`). Call it holding the directory's `DirLock`.
#[pyfunction]
fn remove_stale_temporaries(
    py: Python<'_>,
    directory: PathArg,
    keep: Vec<PathBuf>,
) -> PyResult<usize> {
    let keep = keep.into_iter().map(PathBuf::into_os_string).collect();
    py.detach(|| gpufile::__private::publish::remove_stale_temporaries(&directory.0, &keep))
        .map_err(crate::errors::to_py)
}

/// The real path of `file`, which must lie inside `directory` by the rule of a checkpoint
/// directory's files (`gpufile::__private::safetensors::resolve_inside`): `SafetensorError`
/// where a symlink leads out of it, `OSError` where it cannot be resolved.
#[pyfunction]
fn resolve_inside(py: Python<'_>, directory: PathArg, file: PathArg) -> PyResult<PathBuf> {
    py.detach(|| gpufile::__private::safetensors::resolve_inside(&directory.0, &file.0))
        .map_err(to_py)
}

/// Adds the save side's classes and functions to `gpufile._native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PendingFile>()?;
    m.add_class::<DirLock>()?;
    m.add_function(wrap_pyfunction!(remove_stale_temporaries, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_inside, m)?)?;
    m.add_function(wrap_pyfunction!(safetensors_header, m)?)?;
    m.add_function(wrap_pyfunction!(safetensors_parse, m)?)?;
    m.add_function(wrap_pyfunction!(write_safetensors, m)?)?;
    m.add_function(wrap_pyfunction!(write_safetensors_files, m)?)?;
    m.add_function(wrap_pyfunction!(save_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(save_file, m)?)?;
    m.add_function(wrap_pyfunction!(parse_shard_size, m)?)?;
    m.add_function(wrap_pyfunction!(sync_dir, m)?)?;
    m.add_function(wrap_pyfunction!(is_temporary_name, m)?)?;
    Ok(())
}
