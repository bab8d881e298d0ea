//! Remote objects opened for writing (`gpufile.RemoteFile.open*(..., mode="w")`): conversion,
//! GIL release and exception mapping over `gpufile_remote::RemoteWriter`.

use std::sync::Arc;

use gpufile::StopFlag;
use gpufile::{Direction, Engine};
use gpufile_remote::RemoteWriter;
use pyo3::prelude::*;

use crate::buffer::BufferView;
use crate::errors::open_err;
use crate::errors::to_py;
use crate::future::NativeFuture;
use crate::request::{self, Args};
use crate::stoppable::{run_stoppable, Ended};

/// A remote object open for writing (the engine under `gpufile.RemoteFile` in mode "w").
#[pyclass(frozen, module = "gpufile._native")]
pub(crate) struct NativeRemoteWriter {
    writer: Arc<RemoteWriter>,
}

impl NativeRemoteWriter {
    pub(crate) fn new(writer: RemoteWriter) -> Self {
        NativeRemoteWriter {
            writer: Arc::new(writer),
        }
    }
}

#[pymethods]
impl NativeRemoteWriter {
    /// The object's size so far (the end of the last range written).
    fn nbytes(&self) -> u64 {
        self.writer.nbytes()
    }

    fn remote_endpoint_type(&self) -> u32 {
        self.writer.remote_endpoint_type() as u32
    }

    fn url(&self) -> String {
        self.writer.url().to_owned()
    }

    /// Where an S3 object's credentials come from (never the credentials); else None.
    fn credentials_source(&self) -> Option<&'static str> {
        self.writer.credentials_source()
    }

    /// The size of every part but the last (S3), else None.
    fn part_size(&self) -> Option<u64> {
        self.writer.part_size()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.writer.closed()
    }

    /// Requests sent, retries made and bytes sent so far.
    fn stats(&self) -> (u64, u64, u64) {
        let s = self.writer.stats();
        (s.requests, s.retries, s.bytes)
    }

    /// Starts a write of `size` bytes (default: the buffer) of `buf` (host or GPU memory) at
    /// `file_offset`: refused before any byte moves where it overlaps an earlier write.
    #[pyo3(signature = (buf, size=None, file_offset=None, task_size=None))]
    fn pwrite(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        file_offset: Option<&Bound<'_, PyAny>>,
        task_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeFuture> {
        let py = slf.py();
        let writer = Arc::clone(&slf.get().writer);
        let view = BufferView::for_request(buf, false)?;
        let len = view.request_len(size)?;
        let args = Args {
            dir: Direction::Write,
            len,
            buf_offset: 0,
            file_offset: ("file_offset", file_offset),
            task_size,
            caller_waits: false,
        };
        // Parts are the tasks, unless the caller chose a task size (the plan reads the part size
        // from the writer).
        let req = request::build(&view, args)?;
        let started = py.detach(move || {
            let settings = Engine::global()?.shared_settings();
            // SAFETY: the returned future holds `view` (the buffer export or the device array)
            // until the request is done.
            unsafe { writer.submit(req, &settings) }
        });
        let fut = crate::notices::after(py, started).map_err(to_py)?;
        let owners = vec![buf.clone().unbind(), slf.clone().into_any().unbind()];
        Ok(NativeFuture::new(fut, view, owners))
    }

    /// Makes the object (the caller has waited for its writes); aborts it on failure. Ctrl-C
    /// stops it however long the server stalls (KeyboardInterrupt, noting what the server may
    /// hold).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let writer = Arc::clone(&self.writer);
        let made = "close() had made the object before the interrupt took effect";
        close_stoppable(py, made, move |stop| writer.close_with_stop(Some(stop)))
    }

    /// Ends the writer without making the object (S3: AbortMultipartUpload); Ctrl-C stops it
    /// as it does a close.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        let writer = Arc::clone(&self.writer);
        let ended = "abort() had ended the upload before the interrupt took effect";
        close_stoppable(py, ended, move |stop| writer.abort_with_stop(Some(stop)))
    }

    fn __str__(&self) -> String {
        self.writer.url().to_owned()
    }
}

/// Runs `work` (a writer's close or abort) so that Ctrl-C ends it (a blocking call could not
/// see Ctrl-C before its last request gave up: `http_timeout` times `http_max_attempts`): on a
/// signal, the exception (KeyboardInterrupt) is raised with a note of what `work` said, or
/// `done` where it finished all the same.
fn close_stoppable(
    py: Python<'_>,
    done: &str,
    work: impl FnOnce(&StopFlag) -> gpufile::Result<()> + Send + 'static,
) -> PyResult<()> {
    match run_stoppable(py, "remote-close", work)? {
        Ended::Done(r) => r.map_err(to_py),
        Ended::Interrupted(interrupt, late) => {
            let note = match late {
                Some(Ok(())) => done.to_owned(),
                Some(Err(e)) => e.to_string(),
                None => "the thread of the close panicked".to_owned(),
            };
            let _ = interrupt.value(py).call_method1("add_note", (note,));
            Err(interrupt)
        }
    }
}

/// Writes a safetensors file to `writer` (a remote object open for writing, nothing written
/// yet): the header, then every tensor's bytes at its offset, as one batch of requests from
/// each buffer's own memory (host or device); the writes tile the object, so that `close()`
/// then makes it. `tensors` are (name, dtype, logical shape, buffer). The file's size.
#[pyfunction]
#[pyo3(signature = (writer, tensors, metadata=None))]
fn write_safetensors_remote(
    py: Python<'_>,
    writer: &Bound<'_, NativeRemoteWriter>,
    tensors: Vec<(String, String, Vec<u64>, Bound<'_, PyAny>)>,
    metadata: Option<std::collections::BTreeMap<String, String>>,
) -> PyResult<u64> {
    let _notices = crate::notices::OnReturn(py);
    use gpufile::__private::safetensors::plan_save;
    let w = Arc::clone(&writer.get().writer);
    let mut views = Vec::with_capacity(tensors.len());
    let mut rows = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, buf) in tensors {
        let view = BufferView::for_request(&buf, false)?;
        rows.push(((name, dtype, shape), view.len() as u64));
        views.push(view);
    }
    let specs = crate::safetensors_save::specs(rows)?;
    let plan = plan_save(std::path::Path::new(w.url()), &specs, metadata.as_ref())
        .map_err(crate::safetensors::to_py)?;
    let mut header = plan.header.clone();
    let sink: Arc<dyn gpufile::source::Sink> = w.clone();
    let endpoint = gpufile::source::Endpoint::Write(sink);
    let head = gpufile::Buffer::Host {
        ptr: header.as_mut_ptr(),
        len: header.len(),
    };
    let mut batch = vec![(endpoint.clone(), gpufile::Request::write(head, 0))];
    for (v, &off) in views.iter().zip(&plan.offsets) {
        if v.len() > 0 {
            let req = v.request(Direction::Write, 0, v.len(), off);
            batch.push((endpoint.clone(), req));
        }
    }
    let fut = py
        .detach(move || -> gpufile::Result<gpufile::IoFuture> {
            let engine = Engine::global()?;
            let settings = engine.shared_settings();
            // SAFETY: `views` hold every buffer's export (host) or array object (device), and
            // `header` its bytes, until the wait below has seen every request end.
            unsafe { engine.submit_batch(&batch, &settings) }
        })
        .map_err(to_py)?;
    let result = crate::future::wait_interruptibly(py, &fut);
    drop(views);
    drop(header);
    result?;
    Ok(plan.file_size)
}

/// Saves a Hugging Face checkpoint under the URL `prefix` (GIL released; Ctrl-C stops it):
/// `tensors` as `write_safetensors_remote` takes them, `sizes` each one's size for sharding,
/// `max_shard_size` in bytes. Every shard is made, then the index
/// (`gpufile_remote::save_checkpoint`). The weight map ((tensor, file) in the order of the
/// tensors).
#[pyfunction]
#[pyo3(signature = (prefix, tensors, sizes, max_shard_size, metadata=None))]
fn save_checkpoint_url(
    py: Python<'_>,
    prefix: String,
    tensors: Vec<(String, String, Vec<u64>, Bound<'_, PyAny>)>,
    sizes: Vec<u64>,
    max_shard_size: u64,
    metadata: Option<std::collections::BTreeMap<String, String>>,
) -> PyResult<Vec<(String, String)>> {
    let _notices = crate::notices::OnReturn(py);
    use gpufile::safetensors::SaveOptions;
    use gpufile_remote::SaveCheckpointError;
    let saved = crate::safetensors_save::save_interruptibly(
        py,
        tensors,
        |rows, stop, engine, settings| {
            let options = SaveOptions {
                max_shard_size,
                metadata: metadata.as_ref(),
                durable: false,
                sizes: Some(&sizes),
                stop: Some(stop),
            };
            // SAFETY: `save_interruptibly` holds every row's buffer until this returns.
            unsafe { gpufile_remote::save_checkpoint(&prefix, rows, &options, engine, settings) }
        },
    )?;
    match saved {
        Ok(index) => Ok(index.weight_map),
        Err(SaveCheckpointError::Format(e)) => Err(crate::safetensors::to_py(e)),
        Err(SaveCheckpointError::Open(e)) => Err(open_err(e)),
        Err(SaveCheckpointError::Io(e)) => Err(to_py(e)),
    }
}

/// Adds the remote-writer class to `gpufile._native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeRemoteWriter>()?;
    m.add_function(wrap_pyfunction!(save_checkpoint_url, m)?)?;
    m.add_function(wrap_pyfunction!(write_safetensors_remote, m)?)
}
