//! DLPack intake (`__dlpack__` / `__dlpack_device__`): JAX, PyTorch, CuPy and others.
//!
//! The capsule is held, not consumed: while gpufile holds it, the producer's tensor stays alive;
//! when it is dropped, the capsule's own destructor calls the tensor's deleter, as the DLPack
//! protocol provides for capsules a consumer did not take over.

use std::ffi::{c_void, CStr};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

/// `kDLCUDA`.
const KDL_CUDA: i32 = 2;
/// `kDLCUDAHost` (pinned host memory).
const KDL_CUDA_HOST: i32 = 3;
/// `kDLCUDAManaged`.
const KDL_CUDA_MANAGED: i32 = 13;

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// A GPU tensor received through DLPack: its first byte's address and its size.
pub(crate) struct DlpackTensor {
    pub addr: u64,
    pub len: usize,
    /// The capsule; dropping it lets the producer free the tensor.
    pub capsule: Py<PyAny>,
}

/// Takes `obj`'s DLPack export if it is a CUDA (device, managed or pinned) tensor; `Ok(None)`
/// where `obj` has no `__dlpack__`.
pub(crate) fn take(obj: &Bound<'_, PyAny>) -> PyResult<Option<DlpackTensor>> {
    if !obj.hasattr("__dlpack__")? || !obj.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    let (device_type, _id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    if ![KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED].contains(&device_type) {
        return Err(PyTypeError::new_err(format!(
            "DLPack device type {device_type} is not CUDA memory and the object has no buffer \
             protocol"
        )));
    }
    // stream=1: the producer makes the data ready on the legacy default stream, which the
    // caller then synchronises before any transfer.
    let kwargs = pyo3::types::PyDict::new(obj.py());
    kwargs.set_item("stream", 1)?;
    let capsule = obj.call_method("__dlpack__", (), Some(&kwargs))?;
    const NAME: &CStr = c"dltensor";
    // SAFETY: `capsule` is a live Python object; PyCapsule_GetPointer checks its type and name
    // and returns NULL (with an exception set) otherwise.
    let ptr = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), NAME.as_ptr()) };
    if ptr.is_null() {
        return Err(PyErr::take(obj.py()).unwrap_or_else(|| {
            PyTypeError::new_err("__dlpack__ did not return a \"dltensor\" capsule")
        }));
    }
    // SAFETY: a "dltensor" capsule holds a DLManagedTensor that stays valid while the capsule
    // lives (we hold it); shape and strides point to `ndim` entries (strides may be NULL).
    let (addr, len, contiguous) = unsafe {
        let t = &(*(ptr as *const DLManagedTensor)).dl_tensor;
        let ndim = usize::try_from(t.ndim).map_err(|_| PyValueError::new_err("negative ndim"))?;
        let shape = if ndim == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(t.shape, ndim)
        };
        let itemsize = (usize::from(t.dtype.bits) * usize::from(t.dtype.lanes)).div_ceil(8);
        let items = shape
            .iter()
            .try_fold(1usize, |acc, d| acc.checked_mul(usize::try_from(*d).ok()?));
        let len = items
            .and_then(|n| n.checked_mul(itemsize))
            .ok_or_else(|| PyValueError::new_err("DLPack tensor size overflows"))?;
        let mut contiguous = true;
        if !t.strides.is_null() && ndim > 0 {
            let strides = std::slice::from_raw_parts(t.strides, ndim);
            let mut expect = 1i64;
            for (d, s) in shape.iter().zip(strides).rev() {
                if *d > 1 && *s != expect {
                    contiguous = false;
                }
                expect = expect.saturating_mul(*d);
            }
        }
        (t.data as u64 + t.byte_offset, len, contiguous)
    };
    if !contiguous && len > 0 {
        return Err(PyValueError::new_err("DLPack tensor must be C-contiguous"));
    }
    Ok(Some(DlpackTensor {
        addr,
        len,
        capsule: capsule.unbind(),
    }))
}
