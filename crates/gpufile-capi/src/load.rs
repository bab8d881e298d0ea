//! Loading from C: `gpufile_load_checkpoint`, a checkpoint's tensors into the caller's buffers
//! over the core's `formats::safetensors::load` (the selection and the one batch of requests
//! the CLI and the Python package make too).

use std::ffi::{c_char, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use gpufile_core::__private::batch::OpBuffer;
use gpufile_core::safetensors::{submit_load, Checkpoint, Files, LoadError, Target};
use gpufile_core::source::Source;
use gpufile_core::Engine;

use crate::error::{guard, CallError};
use crate::gpufile_status;

/// Where one tensor of a checkpoint is loaded: `size` bytes at `data`, host or device memory
/// (NULL where `size` is 0), exactly the tensor's byte length.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpufile_tensor_buffer {
    /// NUL-terminated UTF-8 name of the tensor.
    pub name: *const c_char,
    /// Where its bytes go.
    pub data: *mut c_void,
    /// Their count.
    pub size: usize,
}

/// The checkpoint at `path` (a file, an index, a directory, or a URL) and where its bytes are.
fn open(path: &str) -> Result<(Checkpoint, Files), CallError> {
    if !gpufile_remote::is_url(path) {
        let ck = Checkpoint::open(Path::new(OsStr::from_bytes(path.as_bytes())))
            .map_err(CallError::from)?;
        return Ok((ck, Files::Local));
    }
    match gpufile_remote::open_checkpoint(path) {
        Ok(rc) => {
            let sources = rc.files.into_iter().map(|f| f as Arc<dyn Source>).collect();
            Ok((rc.checkpoint, Files::Sources(sources)))
        }
        Err(gpufile_remote::CheckpointError::Format(e)) => Err(e.into()),
        Err(gpufile_remote::CheckpointError::Remote(e)) => Err(e.into()),
    }
}

/// Loads `n` tensors of the checkpoint at `path` into the caller's buffers, as
/// `gpufile load` and `gpufile.safetensors.load_checkpoint` load them (docs/checkpoints.md):
/// `path` a `.safetensors` file, a `model.safetensors.index.json`, a directory of shards, or
/// the URL of one (`s3://`, `gs://`, `http(s)://`); every header read and validated first,
/// then every byte range of every file read as one batch of requests. Tensors adjacent in a
/// file whose buffers are back to back in memory (host memory, or one device allocation) are
/// read as one request. Blocks until every byte is in place.
///
/// A name the checkpoint lacks, a name given twice, or a `size` other than the tensor's byte
/// length is `GPUFILE_BAD_ARGUMENT` (the message names the tensor) and reads nothing; a file
/// that breaks the format is `GPUFILE_BAD_ARGUMENT` naming the file and the tensor.
///
/// # Safety
/// `path` is NUL-terminated; `tensors` is valid for `n` elements (NULL where `n` is 0), each
/// as [`gpufile_tensor_buffer`] describes, its memory untouched by others until the call
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gpufile_load_checkpoint(
    path: *const c_char,
    tensors: *const gpufile_tensor_buffer,
    n: usize,
) -> gpufile_status {
    guard(|| {
        if path.is_null() {
            return Err(CallError::bad("path is NULL"));
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let path = unsafe { CStr::from_ptr(path) };
        let path = path
            .to_str()
            .map_err(|_| CallError::bad("path is not UTF-8"))?;
        let rows = match n {
            0 => &[][..],
            _ if tensors.is_null() => return Err(CallError::bad("tensors is NULL")),
            // SAFETY: non-null, `n` elements by the caller's contract.
            _ => unsafe { std::slice::from_raw_parts(tensors, n) },
        };
        let mut names = Vec::with_capacity(n);
        for (i, t) in rows.iter().enumerate() {
            if t.name.is_null() {
                return Err(CallError::bad(format!("tensors[{i}].name is NULL")));
            }
            // SAFETY: non-null and NUL-terminated by the caller's contract.
            let name = unsafe { CStr::from_ptr(t.name) }
                .to_str()
                .map_err(|_| CallError::bad(format!("tensors[{i}].name is not UTF-8")))?;
            if names.contains(&name) {
                return Err(CallError::bad(format!("tensor {name:?} is given twice")));
            }
            names.push(name);
        }
        let (checkpoint, files) = open(path)?;
        let selection = checkpoint.select(&names).map_err(CallError::from)?;
        let mut targets = Vec::with_capacity(n);
        for (t, name) in rows.iter().zip(&names) {
            let i = checkpoint.find(name).map_err(CallError::from)?;
            let want = checkpoint.info(&checkpoint.entries[i]).len();
            if t.size as u64 != want {
                return Err(CallError::bad(format!(
                    "tensor {name:?}: a buffer of {} bytes for a tensor of {want} bytes",
                    t.size
                )));
            }
            let buffer = match t.size {
                0 => None,
                size => {
                    let (buffer, pointer_info) = crate::buffer(t.data, size)
                        .map_err(|e| e.prefixed(&format!("tensor {name:?}: ")))?;
                    Some(OpBuffer {
                        buffer,
                        pointer_info,
                        after: None,
                    })
                }
            };
            targets.push(Target {
                selection: vec![i],
                buffer,
            });
        }
        debug_assert_eq!(selection.len(), targets.len());
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        // SAFETY: the caller keeps every buffer valid and untouched until this call returns,
        // which is after the wait below.
        let submitted = unsafe { submit_load(&engine, &settings, &checkpoint, &files, &targets) }
            .map_err(|e| match e {
            LoadError::Format(e) => e.into(),
            LoadError::Io(e) => e.into(),
            e => CallError::bad(e.to_string()),
        })?;
        submitted.future.wait()?;
        Ok(())
    })
}
