//! Buffer intake: the buffer protocol (NumPy, bytearray, memoryview), `__cuda_array_interface__`
//! (CuPy, PyTorch, Numba; its `stream` is waited for) and DLPack (JAX and others).

use gpufile::{Buffer, Memory};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::dlpack;
use crate::errors::{to_py, type_name, uint_arg};

/// A caller's buffer, held (and so kept alive, and for host buffers unresizable) for as long as
/// this value lives.
pub(crate) enum BufferView {
    /// Exported through the buffer protocol.
    Host(PyUntypedBuffer),
    /// Described by `__cuda_array_interface__` or DLPack; the object (and the DLPack capsule)
    /// is held.
    Device {
        addr: u64,
        len: usize,
        _owner: Vec<Py<PyAny>>,
    },
}

/// Byte size of one item of a `__cuda_array_interface__` typestr such as "<f4" or "|u1".
pub(crate) fn typestr_itemsize(typestr: &str) -> Option<usize> {
    typestr.get(2..)?.parse().ok().filter(|n| *n > 0)
}

/// Waits (GIL released) for the work queued on stream `handle`, in the context owning `addr`.
pub(crate) fn wait_for_stream(py: Python<'_>, addr: u64, handle: u64) -> PyResult<()> {
    py.detach(|| -> gpufile::Result<()> {
        let info = gpufile::cuda::classify(addr)?;
        let ctx = match info.context {
            Some(c) => c,
            None => gpufile::cuda::primary_context(info.device.unwrap_or(0))?,
        };
        gpufile::cuda::synchronize_stream(handle, ctx)
    })
    .map_err(to_py)
}

impl BufferView {
    pub(crate) fn new(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        if let Ok(cai) = obj.getattr("__cuda_array_interface__") {
            return Self::from_cai(obj, &cai, writable);
        }
        let buf = match PyUntypedBuffer::get(obj) {
            Ok(buf) => buf,
            Err(_) => {
                if let Some(t) = dlpack::take(obj)? {
                    if t.len > 0 {
                        wait_for_stream(obj.py(), t.addr, 1)?;
                    }
                    let owner = vec![obj.clone().unbind(), t.capsule];
                    return Ok(BufferView::Device {
                        addr: t.addr,
                        len: t.len,
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
        if buf.format().to_bytes().contains(&b'O') {
            return Err(PyTypeError::new_err(format!(
                "unsupported dtype: {} holds Python object pointers, not data",
                type_name(obj)
            )));
        }
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "buffer must be C-contiguous (got a strided view; numpy.ascontiguousarray makes a copy)",
            ));
        }
        if writable && buf.readonly() {
            return Err(PyTypeError::new_err(format!(
                "the destination {} is read-only",
                type_name(obj)
            )));
        }
        Ok(BufferView::Host(buf))
    }

    /// CUDA Array Interface v2/v3: data, shape, typestr, strides (None or C order), stream.
    fn from_cai(obj: &Bound<'_, PyAny>, cai: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
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
            return Err(PyTypeError::new_err(format!(
                "the destination {} is read-only",
                type_name(obj)
            )));
        }
        // v3: work queued on `stream` must finish before gpufile touches the data.
        if let Ok(stream) = cai.get_item("stream") {
            if !stream.is_none() && len > 0 {
                let handle: u64 = stream.extract().map_err(|_| bad("stream"))?;
                if handle == 0 {
                    return Err(bad("stream 0 is not allowed (CUDA Array Interface v3)"));
                }
                wait_for_stream(obj.py(), addr, handle)?;
            }
        }
        Ok(BufferView::Device {
            addr,
            len,
            _owner: vec![obj.clone().unbind()],
        })
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            BufferView::Host(b) => b.len_bytes(),
            BufferView::Device { len, .. } => *len,
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

    pub(crate) fn memory(&self) -> Memory {
        match self {
            BufferView::Host(_) => Memory::Host,
            BufferView::Device { .. } => Memory::Device,
        }
    }

    /// `len` bytes at `offset` into the buffer, as the core's raw description (the view must
    /// outlive every request made with it).
    pub(crate) fn buffer(&self, offset: usize, len: usize) -> Buffer {
        match self {
            BufferView::Host(b) => Buffer::Host {
                ptr: (b.buf_ptr() as *mut u8).wrapping_add(offset),
                len,
            },
            BufferView::Device { addr, .. } => Buffer::Device {
                addr: addr + offset as u64,
                len,
            },
        }
    }
}
