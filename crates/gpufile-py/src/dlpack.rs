//! DLPack intake (`__dlpack__` / `__dlpack_device__`): JAX, PyTorch, CuPy and others, GPU
//! tensors and CPU ones (`kDLCPU`, or pinned `kDLCUDAHost`: a PyTorch CPU tensor has no buffer
//! protocol). The device is asked first: only device memory gets a `stream`.
//!
//! The capsule is held, not consumed: while gpufile holds it, the producer's tensor stays alive;
//! when it is dropped, the capsule's own destructor calls the tensor's deleter, as the DLPack
//! protocol provides for capsules a consumer did not take over.
//!
//! DLPack 1.0 is asked for first (`max_version=(1, 0)`): its versioned capsule carries flags, so a
//! read-only tensor (or a copy the producer made) is refused as a read's destination. A producer
//! older than the keyword gets the legacy call, whose capsule says nothing about mutability.

use std::ffi::{c_void, CStr};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

/// `kDLCPU` (host memory that CUDA need not know: no CUDA call is made for it).
const KDL_CPU: i32 = 1;
/// `kDLCUDA`.
const KDL_CUDA: i32 = 2;
/// `kDLCUDAHost` (pinned host memory: PyTorch's `pin_memory=True` CPU tensors).
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

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const FLAG_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`.
const FLAG_IS_COPIED: u64 = 1 << 1;

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

/// DLPack 1.0's managed tensor (capsule name "dltensor_versioned").
#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// A tensor received through DLPack: its first byte's address and its size.
pub(crate) struct DlpackTensor {
    pub addr: u64,
    pub len: usize,
    /// Host memory (`kDLCPU`, or pinned `kDLCUDAHost`): read and written by the CPU in place.
    pub host: bool,
    /// The capsule; dropping it lets the producer free the tensor.
    pub capsule: Py<PyAny>,
}

/// Calls `__dlpack__(stream=..., max_version=(1, 0))`, or the legacy `__dlpack__(stream=...)`
/// where the producer does not know `max_version` (a TypeError); `host`: the device (asked
/// first, with `__dlpack_device__`) is host memory, pinned or not.
fn export<'py>(obj: &Bound<'py, PyAny>, host: bool) -> PyResult<Bound<'py, PyAny>> {
    // stream=1 for device memory (kDLCUDA, kDLCUDAManaged): the producer makes the data ready
    // on the legacy default stream, which the caller then synchronises before any transfer.
    // Host memory (kDLCPU, and kDLCUDAHost: a pinned PyTorch CPU tensor) has no stream, and the
    // protocol asks for None there (NumPy refuses any other value, PyTorch asserts it).
    let kwargs = pyo3::types::PyDict::new(obj.py());
    kwargs.set_item("stream", if host { None } else { Some(1) })?;
    kwargs.set_item("max_version", (1, 0))?;
    match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Err(e) if e.is_instance_of::<PyTypeError>(obj.py()) => {
            kwargs.del_item("max_version")?;
            obj.call_method("__dlpack__", (), Some(&kwargs))
        }
        r => r,
    }
}

/// Takes `obj`'s DLPack export if it is a CUDA (device, managed or pinned) or CPU tensor;
/// `Ok(None)` where `obj` has no `__dlpack__`. With `writable`, a tensor its producer marks
/// read-only (or exported as a copy) is refused.
pub(crate) fn take(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Option<DlpackTensor>> {
    if !obj.hasattr("__dlpack__")? || !obj.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    let (device_type, _id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    if ![KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED].contains(&device_type) {
        return Err(PyTypeError::new_err(format!(
            "DLPack device type {device_type} is neither CPU nor CUDA memory (gpufile reads \
             kDLCPU, kDLCUDA, kDLCUDAHost and kDLCUDAManaged)"
        )));
    }
    // Pinned host memory is host memory: read and written in place by the CPU like any other.
    let host = device_type == KDL_CPU || device_type == KDL_CUDA_HOST;
    let capsule = export(obj, host)?;
    const VERSIONED: &CStr = c"dltensor_versioned";
    const LEGACY: &CStr = c"dltensor";
    // SAFETY: `capsule` is a live Python object; PyCapsule_IsValid only checks type and name.
    let versioned = unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), VERSIONED.as_ptr()) } == 1;
    let name = if versioned { VERSIONED } else { LEGACY };
    // SAFETY: as above; PyCapsule_GetPointer returns NULL (with an exception set) on a mismatch.
    let ptr = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
    if ptr.is_null() {
        return Err(PyErr::take(obj.py()).unwrap_or_else(|| {
            PyTypeError::new_err("__dlpack__ did not return a \"dltensor\" capsule")
        }));
    }
    let tensor: *const DLTensor = if versioned {
        // SAFETY: a "dltensor_versioned" capsule holds a DLManagedTensorVersioned that stays
        // valid while the capsule lives (we hold it); its version and flags lead the struct.
        let m = unsafe { &*(ptr as *const DLManagedTensorVersioned) };
        if m.version.major != 1 {
            return Err(PyTypeError::new_err(format!(
                "DLPack {}.{} is not supported (gpufile reads DLPack 1.x)",
                m.version.major, m.version.minor
            )));
        }
        if writable && m.flags & FLAG_READ_ONLY != 0 {
            return Err(PyTypeError::new_err(format!(
                "the destination {} is read-only (its DLPack export says so)",
                crate::errors::type_name(obj)
            )));
        }
        if writable && m.flags & FLAG_IS_COPIED != 0 {
            return Err(PyTypeError::new_err(format!(
                "the destination {} was exported as a copy (DLPack IS_COPIED): data read into \
                 it would not reach the array",
                crate::errors::type_name(obj)
            )));
        }
        &m.dl_tensor
    } else {
        // SAFETY: a "dltensor" capsule holds a DLManagedTensor, valid while the capsule lives.
        unsafe { &(*(ptr as *const DLManagedTensor)).dl_tensor }
    };
    // SAFETY: `tensor` points into the held capsule's tensor; shape and strides point to `ndim`
    // entries (strides may be NULL).
    let (addr, len, contiguous) = unsafe {
        let t = &*tensor;
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
        host,
        capsule: capsule.unbind(),
    }))
}
