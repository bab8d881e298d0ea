//! Buffer intake: the buffer protocol (NumPy, bytearray, memoryview), `__cuda_array_interface__`
//! (CuPy, PyTorch, Numba; its `stream` is waited for) and DLPack (JAX and others; CPU tensors,
//! such as PyTorch's, are host memory).

use std::ffi::CStr;

use gpufile::__private::batch::OpBuffer;
use gpufile::__private::cuda::{PointerInfo, StreamWait};
use gpufile::{Buffer, Direction, Memory, Request};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::dlpack;
use crate::errors::{to_py, type_name, uint_arg};

/// A caller's buffer, held (and so kept alive, and for host buffers unresizable) for as long as
/// this value lives.
pub(crate) enum BufferView {
    /// Exported through the buffer protocol.
    Host(HostBuffer),
    /// A DLPack host tensor, `kDLCPU` or pinned `kDLCUDAHost` (PyTorch CPU tensors, pinned or
    /// not, JAX on CPU, ...); the object and its capsule are held.
    HostDlpack {
        addr: u64,
        len: usize,
        _owner: Vec<Py<PyAny>>,
    },
    /// Described by `__cuda_array_interface__` or DLPack; the object (and the DLPack capsule)
    /// is held.
    Device {
        addr: u64,
        len: usize,
        /// The driver's answer for `addr` (asked once, when the view was made, for the stream
        /// wait; the engine reuses it). `None` for an empty array.
        info: Option<PointerInfo>,
        /// The producer's stream, not waited for yet: a request made with [`Self::request`]
        /// waits for the work queued on it until the submit (views made by
        /// [`BufferView::for_request`] only; such a request must be submitted before the
        /// thread gives the GIL back to Python code that could destroy the stream).
        after: Option<StreamWait>,
        _owner: Vec<Py<PyAny>>,
    },
}

/// A buffer-protocol export (`PyObject_GetBuffer`, strides and format asked for), released with
/// the GIL taken on drop.
///
/// PyO3's own export refuses what PEP 3118 allows: a 0-d export (no shape: NumPy scalars arrays,
/// 0-d memoryviews) and an export without strides (C-contiguous by definition: ctypes arrays and
/// structures). This one takes both and leaves contiguity to `PyBuffer_IsContiguous`.
pub(crate) struct HostBuffer(Box<ffi::Py_buffer>);

// SAFETY: the export pins the exporter's memory until released; the pointer fields are only read
// (and the release only happens with the GIL held), so the value may move between threads.
unsafe impl Send for HostBuffer {}
// SAFETY: as for Send; shared access only reads plain fields.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Exports `obj`'s buffer, or the exporter's own error (e.g. NumPy's "cannot include dtype
    /// 'M' in a buffer").
    pub(crate) fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut view = Box::new(ffi::Py_buffer::new());
        // SAFETY: `obj` is a live object and `view` a writable Py_buffer; on success the export
        // is released exactly once, in Drop; on failure nothing is held and an exception is set.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_FULL_RO) };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(HostBuffer(view))
    }

    /// The struct-module format of one item ("B" where the exporter gives none).
    pub(crate) fn format(&self) -> &CStr {
        if self.0.format.is_null() {
            c"B"
        } else {
            // SAFETY: a non-NULL format is a NUL-terminated string owned by the export.
            unsafe { CStr::from_ptr(self.0.format) }
        }
    }

    pub(crate) fn is_c_contiguous(&self) -> bool {
        // SAFETY: `self.0` is a live export (shape and strides may be NULL, which CPython handles).
        unsafe { ffi::PyBuffer_IsContiguous(&*self.0, b'C' as std::ffi::c_char) != 0 }
    }

    fn readonly(&self) -> bool {
        self.0.readonly != 0
    }

    /// The export's shape: empty for a 0-d export (or one without a shape, which is 1-d).
    pub(crate) fn shape(&self) -> Vec<isize> {
        let ndim = usize::try_from(self.0.ndim).unwrap_or(0);
        if self.0.shape.is_null() {
            return if ndim == 0 {
                Vec::new()
            } else {
                vec![self.0.len]
            };
        }
        // SAFETY: a non-NULL shape holds `ndim` entries owned by the live export.
        unsafe { std::slice::from_raw_parts(self.0.shape, ndim) }.to_vec()
    }

    /// Bytes of one item.
    pub(crate) fn itemsize(&self) -> usize {
        usize::try_from(self.0.itemsize).unwrap_or(0)
    }

    pub(crate) fn len_bytes(&self) -> usize {
        usize::try_from(self.0.len).unwrap_or(0)
    }

    pub(crate) fn buf_ptr(&self) -> *mut u8 {
        self.0.buf.cast()
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // Without an interpreter (finalised) the exporter is gone and there is nothing to release.
        let _ = Python::try_attach(|_| {
            // SAFETY: the export made in `get`, released once.
            unsafe { ffi::PyBuffer_Release(&mut *self.0) }
        });
    }
}

/// Whether a PEP 3118 / struct-module format string holds Python object pointers (`O`) anywhere:
/// at top level, in a `T{...}` struct, or under a repeat count or sub-array shape. Field names
/// (`:name:`) are skipped, so a field named "Offset" is data.
pub(crate) fn format_holds_objects(format: &[u8]) -> bool {
    let mut in_name = false;
    for &c in format {
        match (in_name, c) {
            (_, b':') => in_name = !in_name,
            (false, b'O') => return true,
            _ => {}
        }
    }
    false
}

/// Whether `obj` is immutable by its library's contract whatever its export says: JAX arrays
/// (`jax.Array`, jaxlib's array types) are never written in place, and their CUDA Array
/// Interface and legacy DLPack exports carry no read-only mark.
fn immutable_by_contract(obj: &Bound<'_, PyAny>) -> bool {
    obj.get_type().module().is_ok_and(|m| {
        m.to_string_lossy().split('.').next() == Some("jax")
            || m.to_string_lossy().starts_with("jaxlib")
    })
}

/// The error for a read into `obj`, which must not be written.
fn read_only(obj: &Bound<'_, PyAny>, why: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "the destination {} is read-only{why}",
        type_name(obj)
    ))
}

/// Byte size of one item of a `__cuda_array_interface__` typestr such as "<f4" or "|u1".
pub(crate) fn typestr_itemsize(typestr: &str) -> Option<usize> {
    typestr.get(2..)?.parse().ok().filter(|n| *n > 0)
}

/// The driver's classification of a device array's address (`None` for an empty array, whose
/// address may be anything): asked once per view, reused for the stream wait and the request.
fn classify(len: usize, addr: u64) -> PyResult<Option<PointerInfo>> {
    match len {
        0 => Ok(None),
        _ => gpufile::__private::cuda::classify(addr)
            .map(Some)
            .map_err(to_py),
    }
}

/// What a view does about the work its producer queued on the array's stream (CUDA Array
/// Interface v3 `stream`, DLPack's exchange on the legacy stream).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Producer {
    /// Waits for it before the view is made.
    Wait,
    /// Leaves it to the request made from the view ([`BufferView::request`]).
    Defer,
    /// Never touches the bytes: nothing to wait for.
    Ignore,
}

/// `cudaStreamPerThread` (CUDA Array Interface v3): a different stream on every thread.
const PER_THREAD_STREAM: u64 = 2;

/// The wait for stream `handle` in the context owning the memory `info` describes.
fn stream_wait(info: &PointerInfo, handle: u64) -> PyResult<StreamWait> {
    let ctx = match info.context {
        Some(c) => c,
        None => {
            gpufile::__private::cuda::primary_context(info.device.unwrap_or(0)).map_err(to_py)?
        }
    };
    Ok(StreamWait { handle, ctx })
}

/// Waits for the work queued on stream `handle` in the context owning the memory `info`
/// describes. An idle stream (`cuStreamQuery`, a cheap check made with the GIL held) needs no
/// wait; otherwise `cuStreamSynchronize` runs with the GIL released.
pub(crate) fn wait_for_stream(py: Python<'_>, info: &PointerInfo, handle: u64) -> PyResult<()> {
    let wait = stream_wait(info, handle)?;
    if gpufile::__private::cuda::stream_idle(handle, wait.ctx).map_err(to_py)? {
        return Ok(());
    }
    py.detach(|| gpufile::__private::cuda::synchronize_stream(handle, wait.ctx))
        .map_err(to_py)
}

/// Whether `obj`'s type is one of the host buffer types that never carry a CUDA Array Interface
/// and are not JAX's (`numpy.ndarray`, `bytearray`, `bytes`, `memoryview`, exactly): their
/// export can be taken at once. Looking for `__cuda_array_interface__` on them costs an
/// AttributeError made and dropped per request (measurable on small reads).
fn plain_host_buffer(obj: &Bound<'_, PyAny>) -> bool {
    static NDARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let py = obj.py();
    let ty = obj.get_type();
    let ptr = ty.as_ptr().cast::<ffi::PyTypeObject>();
    // Only the addresses of CPython's static type objects are taken (no read, no write).
    let builtin = [
        &raw mut ffi::PyByteArray_Type,
        &raw mut ffi::PyBytes_Type,
        &raw mut ffi::PyMemoryView_Type,
    ];
    if builtin.contains(&ptr) {
        return true;
    }
    let ndarray = match NDARRAY.get(py) {
        Some(t) => t,
        None => {
            // Never imports NumPy: an ndarray exists only once NumPy is in sys.modules.
            let found = py
                .import("sys")
                .and_then(|sys| sys.getattr("modules"))
                .and_then(|m| m.get_item("numpy"))
                .and_then(|np| np.getattr("ndarray"))
                .and_then(|t| Ok(t.cast_into::<PyType>()?.unbind()));
            match found {
                Ok(t) => NDARRAY.get_or_init(py, || t),
                Err(_) => return false,
            }
        }
    };
    ty.is(ndarray.bind(py))
}

impl BufferView {
    /// The view of `obj`, after waiting for the stream its producer names (CUDA Array Interface
    /// v3; DLPack): gpufile may touch the memory as soon as this returns.
    pub(crate) fn new(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        Self::make(obj, writable, Producer::Wait)
    }

    /// The view of `obj` for a call that looks at the memory's place, never at its bytes (which
    /// path a read would take, registering the allocation): the producer's stream is not waited
    /// for.
    pub(crate) fn describe(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::make(obj, false, Producer::Ignore)
    }

    /// The view of `obj` for requests made with [`Self::request`]: the wait for the producer's
    /// stream is left to the request (the engine marks the stream when the request is submitted,
    /// on this thread, and its workers wait for the mark), except for the per-thread default
    /// stream, which is waited for here.
    pub(crate) fn for_request(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        Self::make(obj, writable, Producer::Defer)
    }

    /// The view of `obj` for a stream-ordered request: the stream the caller names orders it,
    /// so the producer's stream is not waited for (nor marked).
    pub(crate) fn for_stream(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        Self::make(obj, writable, Producer::Ignore)
    }

    fn make(obj: &Bound<'_, PyAny>, writable: bool, producer: Producer) -> PyResult<Self> {
        if !plain_host_buffer(obj) {
            if writable && immutable_by_contract(obj) {
                return Err(read_only(obj, " (JAX arrays are immutable)"));
            }
            if let Ok(cai) = obj.getattr("__cuda_array_interface__") {
                return Self::from_cai(obj, &cai, writable, producer);
            }
        }
        // SAFETY: `obj` is a live object; the call only reads its type's slots.
        let has_buffer = unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } != 0;
        let buf = match has_buffer {
            true => HostBuffer::get(obj).map_err(|e| {
                // The exporter's own reason (a datetime dtype, a released memoryview) is the
                // cause the caller needs; gpufile says which argument it was about.
                let err = PyTypeError::new_err(format!(
                    "{} cannot be used as a buffer: {}",
                    type_name(obj),
                    e.value(obj.py())
                ));
                err.set_cause(obj.py(), Some(e));
                err
            })?,
            false => {
                if let Some(t) = dlpack::take(obj, writable)? {
                    if t.host {
                        return Ok(BufferView::HostDlpack {
                            addr: t.addr,
                            len: t.len,
                            _owner: vec![obj.clone().unbind(), t.capsule],
                        });
                    }
                    let info = classify(t.len, t.addr)?;
                    if let (Some(info), false) = (&info, producer == Producer::Ignore) {
                        wait_for_stream(obj.py(), info, 1)?;
                    }
                    let owner = vec![obj.clone().unbind(), t.capsule];
                    return Ok(BufferView::Device {
                        addr: t.addr,
                        len: t.len,
                        info,
                        after: None,
                        _owner: owner,
                    });
                }
                return Err(PyTypeError::new_err(format!(
                    "expected a buffer (NumPy array, bytearray, memoryview) or a CUDA array \
                     (__cuda_array_interface__ or __dlpack__), got {}",
                    type_name(obj)
                )));
            }
        };
        if format_holds_objects(buf.format().to_bytes()) {
            return Err(PyTypeError::new_err(format!(
                "unsupported dtype: {} holds Python object pointers, not data (format {:?})",
                type_name(obj),
                buf.format().to_string_lossy()
            )));
        }
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "buffer must be C-contiguous (got a strided view; numpy.ascontiguousarray makes a copy)",
            ));
        }
        if writable && buf.readonly() {
            return Err(read_only(obj, ""));
        }
        Ok(BufferView::Host(buf))
    }

    /// CUDA Array Interface v2/v3: data, shape, typestr, strides (None or C order), stream.
    fn from_cai(
        obj: &Bound<'_, PyAny>,
        cai: &Bound<'_, PyAny>,
        writable: bool,
        producer: Producer,
    ) -> PyResult<Self> {
        let bad = |what: &str| {
            PyValueError::new_err(format!(
                "{}.__cuda_array_interface__ is malformed: {what}",
                type_name(obj)
            ))
        };
        let (addr, readonly): (u64, bool) = cai
            .get_item("data")
            .and_then(|d| d.extract())
            .map_err(|_| bad("data"))?;
        let shape: Vec<usize> = cai
            .get_item("shape")
            .and_then(|d| d.extract())
            .map_err(|_| bad("shape"))?;
        let typestr: String = cai
            .get_item("typestr")
            .and_then(|d| d.extract())
            .map_err(|_| bad("typestr"))?;
        let itemsize = typestr_itemsize(&typestr).ok_or_else(|| bad("typestr"))?;
        if typestr.as_bytes().get(1) == Some(&b'O') {
            return Err(PyTypeError::new_err(
                "unsupported dtype: object arrays hold pointers",
            ));
        }
        let strides: Option<Vec<isize>> = match cai.get_item("strides") {
            Ok(s) if !s.is_none() => Some(s.extract().map_err(|_| bad("strides"))?),
            _ => None,
        };
        let items = shape.iter().try_fold(1usize, |acc, d| acc.checked_mul(*d));
        let len = items
            .and_then(|n| n.checked_mul(itemsize))
            .ok_or_else(|| bad("shape"))?;
        if let Some(strides) = strides.filter(|_| len > 0) {
            let mut expect = itemsize as isize;
            for (dim, stride) in shape.iter().zip(&strides).rev() {
                if *dim > 1 && *stride != expect {
                    return Err(PyValueError::new_err(format!(
                        "device array must be C-contiguous (shape {shape:?}, strides {strides:?})"
                    )));
                }
                expect *= *dim as isize;
            }
        }
        if writable && readonly {
            return Err(read_only(obj, ""));
        }
        let info = classify(len, addr)?;
        // v3: work queued on `stream` must finish before gpufile touches the data.
        let mut after = None;
        if let (Ok(stream), Some(info)) = (cai.get_item("stream"), &info) {
            if !stream.is_none() {
                let handle: u64 = stream.extract().map_err(|_| bad("stream"))?;
                if handle == 0 {
                    return Err(bad("stream 0 is not allowed (CUDA Array Interface v3)"));
                }
                match producer {
                    Producer::Ignore => {}
                    Producer::Defer if handle != PER_THREAD_STREAM => {
                        after = Some(stream_wait(info, handle)?)
                    }
                    _ => wait_for_stream(obj.py(), info, handle)?,
                }
            }
        }
        Ok(BufferView::Device {
            addr,
            len,
            info,
            after,
            _owner: vec![obj.clone().unbind()],
        })
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            BufferView::Host(b) => b.len_bytes(),
            BufferView::HostDlpack { len, .. } | BufferView::Device { len, .. } => *len,
        }
    }

    /// The byte count of a request: `size` (default: the whole buffer), at most the buffer.
    pub(crate) fn request_len(&self, size: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let n = uint_arg("size", size, Some(self.len() as u64))?.unwrap_or(0);
        if n > self.len() as u64 {
            return Err(PyValueError::new_err(format!(
                "size {n} is larger than the buffer ({} bytes)",
                self.len()
            )));
        }
        Ok(n as usize)
    }

    /// A request for `len` bytes at `offset` into the buffer and `file_offset` in the file,
    /// carrying what the view knows: the driver's answer for its address and the producer's
    /// stream still to wait for (the view must outlive the request).
    pub(crate) fn request(
        &self,
        direction: Direction,
        offset: usize,
        len: usize,
        file_offset: u64,
    ) -> Request {
        let req = match direction {
            Direction::Read => Request::read(self.buffer(offset, len), file_offset),
            Direction::Write => Request::write(self.buffer(offset, len), file_offset),
        };
        self.carry(req)
    }

    /// `req` (on this view's memory) with what the view knows: the driver's answer for a device
    /// address and the producer's stream still to wait for.
    pub(crate) fn carry(&self, req: Request) -> Request {
        match self {
            BufferView::Host(_) | BufferView::HostDlpack { .. } => req,
            BufferView::Device { info, after, .. } => req.pointer_info(*info).after(*after),
        }
    }

    /// The whole buffer as the core's batch takes it, with what the view knows (as
    /// [`Self::carry`] gives a request).
    pub(crate) fn op_buffer(&self) -> OpBuffer {
        let mut b = OpBuffer::new(self.buffer(0, self.len()));
        if let BufferView::Device { info, after, .. } = self {
            b.pointer_info = *info;
            b.after = *after;
        }
        b
    }

    pub(crate) fn memory(&self) -> Memory {
        match self {
            BufferView::Host(_) | BufferView::HostDlpack { .. } => Memory::Host,
            BufferView::Device { .. } => Memory::Device,
        }
    }

    /// `len` bytes at `offset` into the buffer, as the core's raw description (the view must
    /// outlive every request made with it).
    pub(crate) fn buffer(&self, offset: usize, len: usize) -> Buffer {
        match self {
            BufferView::Host(b) => Buffer::Host {
                ptr: b.buf_ptr().wrapping_add(offset),
                len,
            },
            BufferView::HostDlpack { addr, .. } => Buffer::Host {
                ptr: (*addr as usize as *mut u8).wrapping_add(offset),
                len,
            },
            BufferView::Device { addr, .. } => Buffer::Device {
                addr: addr + offset as u64,
                len,
            },
        }
    }
}
