//! GPU memory ⇄ a file registered with cuFile: one `cuFileRead`/`cuFileWrite` per task (cuFile
//! may split it further by cufile.json), with the buffer's context current.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::cuda::{self, Context};
use crate::cufile::{self, RegisteredFile};
use crate::error::{Error, Result};
use crate::exec::{Executor, Lease, Tasks};
use crate::future::Completion;
use crate::plan::Task;
use crate::request::Direction;

/// The cuFile executor of one request.
pub struct CufileExec {
    /// The registered file.
    pub registered: Arc<RegisteredFile>,
    /// Read or write.
    pub direction: Direction,
    /// The context owning the buffer.
    pub ctx: Context,
    /// Start of the allocation holding the buffer (cuFile addresses buffers by base + offset).
    pub base: u64,
    /// Offset of the caller's range in that allocation.
    pub offset_in_allocation: u64,
    /// The file, for errors.
    pub path: PathBuf,
}

impl Executor for CufileExec {
    fn run(&self, tasks: &Tasks, done: &Completion) {
        let guard = cuda::ContextGuard::push(self.ctx);
        let mut lease = Lease::default();
        while let Some(task) = tasks.next(&mut lease) {
            if done.stopped() {
                done.finish_task(Ok(0));
                break;
            }
            let r = match &guard {
                Ok(_) => self.task(task, done),
                Err(e) => Err(e.clone()),
            };
            done.finish_task(r);
        }
        tasks.skip_rest(&mut lease, done);
    }
}

impl CufileExec {
    fn task(&self, task: Task, done: &Completion) -> Result<usize> {
        let is_read = self.direction == Direction::Read;
        let mut moved = 0usize;
        while moved < task.len {
            let bo = self.offset_in_allocation + (task.buf_offset + moved) as u64;
            let fo = task.file_offset + moved as u64;
            let n = task.len - moved;
            // SAFETY: the range lies in the caller's device allocation (checked when the request
            // was made), which stays valid until the request completes.
            let ret = unsafe {
                match is_read {
                    true => self.registered.read(self.base, bo, n, fo),
                    false => self.registered.write(self.base, bo, n, fo),
                }
            };
            match ret {
                r if r > 0 => {
                    moved += r as usize;
                    done.progress().fetch_add(r as u64, Ordering::Relaxed);
                }
                // The file shrank after the size check: where the read stopped, and its size now.
                0 if is_read => {
                    return Err(Error::UnexpectedEof {
                        path: self.path.clone(),
                        offset: fo,
                        len: n,
                        file_size: crate::posix::size_now(self.registered.fd()).unwrap_or(fo),
                    })
                }
                r => {
                    let call = if is_read { "cuFileRead" } else { "cuFileWrite" };
                    return Err(cufile::io_error(r.min(-1), call));
                }
            }
        }
        Ok(task.len)
    }
}
