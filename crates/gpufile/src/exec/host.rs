//! Host memory ⇄ a source or sink: each task reads or writes its own range of the caller's
//! buffer in place.

use crate::exec::{Endpoint, Executor, Lease, Tasks};
use crate::future::Completion;
use crate::request::SendPtr;
use crate::source::IoContext;

/// The host executor of one request.
pub struct HostExec {
    /// The file side.
    pub endpoint: Endpoint,
    /// The caller's buffer.
    pub ptr: SendPtr,
    /// Direct I/O asked for.
    pub direct: bool,
    /// Direct I/O asked for where the range is not cached.
    pub direct_uncached: bool,
}

impl Executor for HostExec {
    fn run(&self, tasks: &Tasks, done: &Completion) {
        let mut lease = Lease::default();
        while let Some(task) = tasks.next(&mut lease) {
            if done.stopped() {
                done.finish_task(Ok(0));
                tasks.skip_rest(&mut lease, done);
                return;
            }
            let call = IoContext {
                progress: done.progress(),
                direct: self.direct,
                direct_uncached: self.direct_uncached,
                stop: done.stop_flag(),
            };
            let p = self.ptr.at(task.buf_offset);
            let r = match &self.endpoint {
                Endpoint::Read(src) => {
                    // SAFETY: each task owns the disjoint range [buf_offset, +len) of the caller's
                    // buffer, valid and unshared until the request completes (`Engine::submit`).
                    let dst = unsafe { std::slice::from_raw_parts_mut(p, task.len) };
                    src.read_at(dst, task.file_offset, call)
                }
                Endpoint::Write(sink) => {
                    // SAFETY: as above; a write only reads its range.
                    let src = unsafe { std::slice::from_raw_parts(p, task.len) };
                    sink.write_at(src, task.file_offset, call)
                }
            };
            done.finish_task(r.map(|()| task.len));
        }
    }
}
