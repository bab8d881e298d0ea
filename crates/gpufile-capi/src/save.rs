//! Saving from C: `gpufile_save_file` (one safetensors file) and `gpufile_save_checkpoint` (a
//! Hugging Face sharded checkpoint), over the core's `gpufile::safetensors::save_file`
//! and `gpufile::safetensors::save_checkpoint`.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use gpufile_core::safetensors::{
    parse_size, save_checkpoint, save_file, Dtype, FileOptions, SaveError, SaveOptions, TensorRow,
};
use gpufile_core::{Buffer, Engine};

use crate::error::{guard, CallError};
use crate::gpufile_status;

/// One tensor to save: its name, safetensors dtype (`"F32"`, `"BF16"`, ...), logical shape,
/// and its `size` bytes (C order) at `data`, host or device memory (NULL where `size` is 0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpufile_tensor {
    /// NUL-terminated UTF-8 name.
    pub name: *const c_char,
    /// NUL-terminated dtype name.
    pub dtype: *const c_char,
    /// `ndim` dimensions (NULL where `ndim` is 0: a scalar).
    pub shape: *const u64,
    /// Number of dimensions.
    pub ndim: usize,
    /// The tensor's bytes.
    pub data: *const c_void,
    /// Their count.
    pub size: usize,
}

/// # Safety
/// `p` is null or NUL-terminated.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, CallError> {
    if p.is_null() {
        return Err(CallError::bad(format!("{what} is NULL")));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| CallError::bad(format!("{what} is not UTF-8")))
}

/// # Safety
/// `t` holds pointers as [`gpufile_tensor`] describes them.
unsafe fn row(t: &gpufile_tensor, i: usize) -> Result<TensorRow, CallError> {
    // SAFETY: the caller's contract.
    let name = unsafe { text(t.name, &format!("tensors[{i}].name")) }?.to_owned();
    // SAFETY: the caller's contract.
    let dtype_name = unsafe { text(t.dtype, &format!("tensors[{i}].dtype")) }?;
    let dtype = Dtype::parse(dtype_name)
        .ok_or_else(|| CallError::bad(format!("tensor {name:?}: unknown dtype {dtype_name:?}")))?;
    let shape = match t.ndim {
        0 => Vec::new(),
        _ if t.shape.is_null() => {
            return Err(CallError::bad(format!("tensor {name:?}: shape is NULL")))
        }
        // SAFETY: non-null, `ndim` elements by the caller's contract.
        n => unsafe { std::slice::from_raw_parts(t.shape, n) }.to_vec(),
    };
    let (buffer, pointer_info) = match t.size {
        0 => (
            Buffer::Host {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
            },
            None,
        ),
        n => crate::buffer(t.data.cast_mut(), n)
            .map_err(|e| e.prefixed(&format!("tensor {name:?}: ")))?,
    };
    Ok(TensorRow {
        name,
        dtype,
        shape,
        buffer,
        pointer_info,
        after: None,
    })
}

/// # Safety
/// `tensors` is valid for `n` elements (NULL where `n` is 0), each as [`gpufile_tensor`]
/// describes.
unsafe fn rows(tensors: *const gpufile_tensor, n: usize) -> Result<Vec<TensorRow>, CallError> {
    let tensors = match n {
        0 => &[][..],
        _ if tensors.is_null() => return Err(CallError::bad("tensors is NULL")),
        // SAFETY: non-null, `n` elements by the caller's contract.
        _ => unsafe { std::slice::from_raw_parts(tensors, n) },
    };
    tensors
        .iter()
        .enumerate()
        // SAFETY: the caller's contract.
        .map(|(i, t)| unsafe { row(t, i) })
        .collect()
}

/// The metadata of `metadata` (NULL: none; else key, value, key, value, ..., NULL).
///
/// # Safety
/// `metadata` is null or a NULL-terminated array of NUL-terminated strings.
unsafe fn pairs(
    metadata: *const *const c_char,
) -> Result<Option<BTreeMap<String, String>>, CallError> {
    if metadata.is_null() {
        return Ok(None);
    }
    let mut meta = BTreeMap::new();
    let mut at = metadata;
    loop {
        // SAFETY: NULL-terminated array by the caller's contract.
        let key = unsafe { *at };
        if key.is_null() {
            return Ok(Some(meta));
        }
        // SAFETY: as above: the value's slot exists (it may be the terminator).
        let value = unsafe { *at.add(1) };
        if value.is_null() {
            return Err(CallError::bad(
                "metadata has a key without a value (key, value pairs, then NULL)",
            ));
        }
        // SAFETY: NUL-terminated strings by the caller's contract.
        let (k, v) = unsafe {
            (
                text(key, "a metadata key")?,
                text(value, "a metadata value")?,
            )
        };
        meta.insert(k.to_owned(), v.to_owned());
        // SAFETY: past the pair, still in the array (its terminator at the latest).
        at = unsafe { at.add(2) };
    }
}

/// The C error of a save of `what` (a file, a directory): a refused tensor is a bad argument;
/// an I/O error is named by `what` where its message does not name it already.
fn save_failed(e: SaveError, what: &str, doing: &str) -> CallError {
    match e {
        SaveError::Format(e) => e.into(),
        SaveError::Committed(e) => CallError::from(e)
            .suffixed(" (the new checkpoint is published: the directory loads as it)"),
        SaveError::Io(e) => {
            let named = e.to_string().contains(what);
            let e = CallError::from(e);
            match named {
                true => e,
                false => e.prefixed(&format!("{doing} {what}: ")),
            }
        }
    }
}

/// Saves `n` tensors as one safetensors file at `path`, as `gpufile.safetensors.save_file`
/// does (docs/checkpoints.md): the header as the `safetensors` package builds it (metadata keys
/// sorted), every tensor's bytes written from its own memory (host or device) as one batch,
/// under a temporary name in `path`'s directory, then renamed over `path`. `metadata`: NULL
/// (no `__metadata__`), or key, value, key, value, ..., NULL (strings). `durable` non-zero:
/// file and directory synced (survives a power loss). `path` holds its old file or the new one
/// at every moment. A refused tensor (unknown dtype, a size its shape does not make, a name
/// given twice) is `GPUFILE_BAD_ARGUMENT` and changes nothing; on any error no temporary is
/// left.
///
/// # Safety
/// `path` is NUL-terminated; `tensors` is valid for `n` elements (NULL where `n` is 0), each
/// as [`gpufile_tensor`] describes, its memory unchanged until the call returns; `metadata` is
/// null or a NULL-terminated array of NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn gpufile_save_file(
    path: *const c_char,
    tensors: *const gpufile_tensor,
    n: usize,
    metadata: *const *const c_char,
    durable: c_int,
) -> gpufile_status {
    guard(|| {
        if path.is_null() {
            return Err(CallError::bad("path is NULL"));
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let path = Path::new(OsStr::from_bytes(
            unsafe { CStr::from_ptr(path) }.to_bytes(),
        ));
        // SAFETY: the caller's contract.
        let rows = unsafe { rows(tensors, n) }?;
        // SAFETY: the caller's contract.
        let meta = unsafe { pairs(metadata) }?;
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        let options = FileOptions {
            metadata: meta.as_ref(),
            durable: durable != 0,
            stop: None,
        };
        // SAFETY: the caller keeps every tensor's memory valid until this call returns.
        match unsafe { save_file(path, &rows, &options, &engine, &settings) } {
            Ok(_) => Ok(()),
            Err(e) => Err(save_failed(e, &path.display().to_string(), "saving")),
        }
    })
}

/// Saves `n` tensors as a Hugging Face checkpoint in the directory `dir` (created where
/// missing): `model.safetensors`, or shards `model-0000k-of-0000n.safetensors` of at most
/// `max_shard_size` each (`"5GB"`, `"500MB"`, or bytes as `"1000000"`; NULL: `"5GB"`) filled as
/// `huggingface_hub.split_torch_state_dict_into_shards` fills them, and the index
/// `model.safetensors.index.json`, as `gpufile.safetensors.save_checkpoint` writes them.
/// `metadata`: NULL, or key, value, key, value, ..., NULL (strings): in the index and in a
/// single file. `durable` non-zero: files and directory synced (survives a power loss). The
/// directory holds the old checkpoint or the new one at every moment; what the old one had and
/// the new one has not is removed; other files stay. On an error no temporary is left.
///
/// # Safety
/// `dir` is NUL-terminated; `tensors` is valid for `n` elements (NULL where `n` is 0), each as
/// [`gpufile_tensor`] describes, its memory unchanged until the call returns;
/// `max_shard_size` is null or NUL-terminated; `metadata` is null or a NULL-terminated array
/// of NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn gpufile_save_checkpoint(
    dir: *const c_char,
    tensors: *const gpufile_tensor,
    n: usize,
    max_shard_size: *const c_char,
    metadata: *const *const c_char,
    durable: c_int,
) -> gpufile_status {
    guard(|| {
        if dir.is_null() {
            return Err(CallError::bad("dir is NULL"));
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let dir = Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(dir) }.to_bytes()));
        // SAFETY: the caller's contract.
        let rows = unsafe { rows(tensors, n) }?;
        let limit = match max_shard_size.is_null() {
            true => "5GB",
            // SAFETY: the caller's contract.
            false => unsafe { text(max_shard_size, "max_shard_size") }?,
        };
        let limit = parse_size(limit).map_err(CallError::bad)?;
        // SAFETY: the caller's contract.
        let meta = unsafe { pairs(metadata) }?;
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        let options = SaveOptions {
            max_shard_size: limit,
            metadata: meta.as_ref(),
            durable: durable != 0,
            sizes: None,
            stop: None,
        };
        // SAFETY: the caller keeps every tensor's memory valid until this call returns.
        match unsafe { save_checkpoint(dir, &rows, &options, &engine, &settings) } {
            Ok(_) => Ok(()),
            Err(e) => Err(save_failed(
                e,
                &dir.display().to_string(),
                "saving a checkpoint in",
            )),
        }
    })
}
