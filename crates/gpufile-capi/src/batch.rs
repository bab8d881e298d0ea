//! Many reads and writes submitted as one (KvikIO's `BatchHandle::submit`): the core's
//! [`gpufile_core::__private::batch::submit`] groups them by file, buffer and direction, one request of many
//! ranges per group, and checks every group before any byte moves; C gets a future per group.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use gpufile_core::__private::batch::{self, Op, OpBuffer};
use gpufile_core::source::Endpoint;
use gpufile_core::Engine;

use crate::error::{guard, CallError};
use crate::{
    buffer, direction_of, file_of, give_future, gpufile_file, gpufile_future, gpufile_io_options,
    gpufile_status, out_arg, put, settings_for,
};

/// One operation of `gpufile_batch_submit` (KvikIO's `BatchOp`): `size` bytes at
/// `file_offset` in `file` and at `buf_offset` in the buffer at `buf` (host or device memory).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpufile_batch_op {
    /// The file.
    pub file: *const gpufile_file,
    /// The buffer's start: operations naming the same `buf` share one buffer, which reaches as
    /// far as the furthest of them.
    pub buf: *mut c_void,
    /// Offset in the file.
    pub file_offset: u64,
    /// Offset in the buffer.
    pub buf_offset: usize,
    /// Bytes.
    pub size: usize,
    /// 0: a read into the buffer; 1: a write of it.
    pub is_write: c_int,
}

/// Starts the `nops` operations at `ops` as one submission: the operations on one file
/// handle, one buffer (`buf`) and one direction become one request of many ranges (a group),
/// and every group is checked and planned before any starts, so a refused operation (a read
/// past the end of its file, a handle not open for the direction, reads whose destinations
/// overlap, writes to the same bytes of one file whatever their buffers and handles, a NULL
/// file or buffer) is the error here and no byte moves. `opts` may be NULL (the
/// settings; a `task_size` is the largest piece a worker moves, small operations are still
/// gathered several to a task).
///
/// On success `*out_ngroups` is the number of groups, `out_futures[0..*out_ngroups]` their
/// futures (free each with `gpufile_future_free`) and `out_group[i]` the index of operation
/// `i`'s group; groups are numbered in the order of their first operation (an error naming
/// "requests a and b of the batch" names groups, one naming "operations a and b" names
/// operations). An operation's outcome is its group's: once
/// the group's future is done without error each of its operations moved its `size` bytes;
/// a group's error (with its errno) is every one of its operations'. On error nothing is stored.
///
/// # Safety
/// `ops` is null or valid for reads of `nops` operations (read during the call only); each
/// operation's buffer is valid from `buf` to its furthest operation's end (writable for a
/// read) until its group's future is done, and not used otherwise meanwhile; `out_futures`
/// and `out_group` are null or valid for writes of `nops` elements; `out_ngroups` is null or
/// valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_batch_submit(
    ops: *const gpufile_batch_op,
    nops: usize,
    opts: *const gpufile_io_options,
    out_futures: *mut *mut gpufile_future,
    out_group: *mut usize,
    out_ngroups: *mut usize,
) -> gpufile_status {
    guard(|| {
        out_arg(out_ngroups, "out_ngroups")?;
        if nops == 0 {
            // SAFETY: checked non-null; the caller's contract.
            unsafe { put(out_ngroups, 0) };
            return Ok(());
        }
        if ops.is_null() {
            return Err(CallError::bad(format!("ops is NULL (nops {nops})")));
        }
        out_arg(out_futures, "out_futures")?;
        out_arg(out_group, "out_group")?;
        if nops > isize::MAX as usize / std::mem::size_of::<gpufile_batch_op>() {
            return Err(CallError::bad(format!(
                "nops {nops} is past the address space"
            )));
        }
        // SAFETY: non-null and valid for `nops` elements by the caller's contract.
        let list = unsafe { std::slice::from_raw_parts(ops, nops) };
        // SAFETY: the caller's contract.
        let (settings, task_size) = unsafe { settings_for(opts)? };
        let settings = match task_size {
            Some(t) => Arc::new(gpufile_core::Settings {
                task_size: t,
                ..(*settings).clone()
            }),
            None => settings,
        };
        let (endpoints, buffers) = sides(list)?;
        let batch_ops: Vec<Op<'_>> = list
            .iter()
            .map(|op| Op {
                endpoint: &endpoints[&(op.file as usize, op.is_write)],
                buffer: &buffers[&(op.buf as usize)],
                file_offset: op.file_offset,
                buf_offset: op.buf_offset,
                size: op.size,
            })
            .collect();
        let engine = Engine::global()?;
        // SAFETY: each buffer reaches to its furthest operation's end and stays valid until its
        // group's future is done, by the caller's contract.
        let submission = unsafe { batch::submit(&engine, &batch_ops, &settings) }?;
        for i in 0..nops {
            // SAFETY: `out_group` is valid for `nops` elements by the caller's contract.
            unsafe { put(out_group.add(i), submission.group_of(i)) };
        }
        let groups = submission.into_groups();
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out_ngroups, groups.len()) };
        for (g, group) in groups.into_iter().enumerate() {
            // SAFETY: at most `nops` groups; `out_futures` is valid for `nops` elements.
            unsafe { give_future(group.future, out_futures.add(g)) };
        }
        Ok(())
    })
}

/// The endpoints (by file handle and `is_write`) and the buffers (by start) of `ops`, each
/// buffer reaching to its furthest operation's end; an error names the first bad operation.
#[allow(clippy::type_complexity)]
fn sides(
    ops: &[gpufile_batch_op],
) -> Result<(HashMap<(usize, c_int), Endpoint>, HashMap<usize, OpBuffer>), CallError> {
    let mut endpoints = HashMap::new();
    let mut reach: HashMap<usize, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let at = |e: CallError| e.prefixed(&format!("ops[{i}]: "));
        let dir = direction_of(op.is_write).map_err(at)?;
        if let Entry::Vacant(e) = endpoints.entry((op.file as usize, op.is_write)) {
            e.insert(file_of(op.file).map_err(at)?.endpoint(dir));
        }
        if op.buf.is_null() {
            return Err(at(CallError::bad("buf is NULL")));
        }
        let end = op.buf_offset.checked_add(op.size).ok_or_else(|| {
            at(CallError::bad(format!(
                "buf_offset {} + size {} overflows",
                op.buf_offset, op.size
            )))
        })?;
        let furthest = reach.entry(op.buf as usize).or_insert(0);
        *furthest = (*furthest).max(end);
    }
    let mut buffers = HashMap::with_capacity(reach.len());
    for (start, len) in reach {
        let (buffer, info) = buffer(start as *mut c_void, len)?;
        let mut b = OpBuffer::new(buffer);
        b.pointer_info = info;
        buffers.insert(start, b);
    }
    Ok((endpoints, buffers))
}
