//! GPU memory ⇄ a file registered with cuFile: one `cuFileRead`/`cuFileWrite` per task (cuFile
//! may split it further by cufile.json), with the buffer's context current.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::cuda::{self, Context};
use crate::cufile::RegisteredFile;
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
        let direction = self.direction;
        let io = |chunk: Chunk| {
            let bo = self.offset_in_allocation + chunk.buf_offset as u64;
            // SAFETY: the range lies in the caller's device allocation (checked when the request
            // was made), which stays valid until the request completes.
            unsafe {
                match direction {
                    Direction::Read => {
                        self.registered
                            .read(self.base, bo, chunk.len, chunk.file_offset)
                    }
                    Direction::Write => {
                        self.registered
                            .write(self.base, bo, chunk.len, chunk.file_offset)
                    }
                }
            }
        };
        // The file shrank after the size check: where the read stopped, and its size now.
        let eof = |offset: u64, len: usize| Error::UnexpectedEof {
            path: self.path.clone(),
            offset,
            len,
            file_size: crate::posix::size_now(self.registered.fd()).unwrap_or(offset),
        };
        transfer(task, direction, done.progress(), io, eof)
    }
}

/// What is left of a task: one `cuFileRead`/`cuFileWrite` call's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chunk {
    /// Offset in the caller's buffer.
    buf_offset: usize,
    /// Offset in the file.
    file_offset: u64,
    /// Bytes asked for.
    len: usize,
}

/// Moves `task` by calling `io` for what is left until it is all moved: cuFile may move fewer
/// bytes than asked (a partial count), so each call asks for the rest and each count adds to
/// `progress`. A read that moves nothing ends at the end of the file (`eof(offset, len)` of
/// what is left); a write that moves nothing is an error, as is any error of `io`.
fn transfer(
    task: Task,
    direction: Direction,
    progress: &AtomicU64,
    mut io: impl FnMut(Chunk) -> Result<usize>,
    eof: impl FnOnce(u64, usize) -> Error,
) -> Result<usize> {
    let mut moved = 0usize;
    while moved < task.len {
        let chunk = Chunk {
            buf_offset: task.buf_offset + moved,
            file_offset: task.file_offset + moved as u64,
            len: task.len - moved,
        };
        match io(chunk)? {
            0 if direction == Direction::Read => return Err(eof(chunk.file_offset, chunk.len)),
            0 => return Err(no_progress("cuFileWrite")),
            n => {
                // Never more than asked, whatever the library says.
                let n = n.min(chunk.len);
                moved += n;
                progress.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    Ok(task.len)
}

/// A write that moved no byte and gave no error: reported as `EIO`, so the request fails
/// instead of asking again forever.
fn no_progress(call: &'static str) -> Error {
    Error::Cufile {
        call,
        code: -libc::EIO,
        name: crate::error::os_message(libc::EIO),
        cuda_code: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn task(file_offset: u64, buf_offset: usize, len: usize) -> Task {
        Task {
            file_offset,
            buf_offset,
            len,
        }
    }

    fn eof(offset: u64, len: usize) -> Error {
        Error::UnexpectedEof {
            path: Path::new("f").into(),
            offset,
            len,
            file_size: 7,
        }
    }

    /// Runs `transfer` over `counts` (what each call returns, in turn); returns the result, the
    /// chunks asked for and the progress counted.
    fn run(
        t: Task,
        direction: Direction,
        counts: Vec<Result<usize>>,
    ) -> (Result<usize>, Vec<Chunk>, u64) {
        let progress = AtomicU64::new(0);
        let mut asked = Vec::new();
        let mut counts = counts.into_iter();
        let r = transfer(
            t,
            direction,
            &progress,
            |c| {
                asked.push(c);
                counts.next().expect("called more often than expected")
            },
            eof,
        );
        (r, asked, progress.load(Ordering::Relaxed))
    }

    #[test]
    fn one_call_moves_a_whole_task() {
        let (r, asked, progress) = run(task(100, 8, 4096), Direction::Read, vec![Ok(4096)]);
        assert_eq!(r.unwrap(), 4096);
        assert_eq!(
            asked,
            [Chunk {
                buf_offset: 8,
                file_offset: 100,
                len: 4096
            }]
        );
        assert_eq!(progress, 4096);
    }

    #[test]
    fn partial_counts_ask_again_for_the_rest() {
        for direction in [Direction::Read, Direction::Write] {
            let (r, asked, progress) = run(
                task(1000, 10, 10_000),
                direction,
                vec![Ok(4096), Ok(1), Ok(5903)],
            );
            assert_eq!(r.unwrap(), 10_000);
            let starts: Vec<_> = asked
                .iter()
                .map(|c| (c.file_offset, c.buf_offset, c.len))
                .collect();
            assert_eq!(
                starts,
                [(1000, 10, 10_000), (5096, 4106, 5904), (5097, 4107, 5903)]
            );
            assert_eq!(progress, 10_000);
        }
    }

    #[test]
    fn a_read_that_moves_nothing_is_the_end_of_the_file() {
        let (r, asked, progress) = run(task(0, 0, 100), Direction::Read, vec![Ok(30), Ok(0)]);
        match r.unwrap_err() {
            Error::UnexpectedEof {
                offset,
                len,
                file_size,
                ..
            } => assert_eq!((offset, len, file_size), (30, 70, 7)),
            e => panic!("{e:?}"),
        }
        assert_eq!(asked.len(), 2);
        assert_eq!(progress, 30, "the bytes moved before the end still count");
    }

    #[test]
    fn a_write_that_moves_nothing_fails_instead_of_spinning() {
        let (r, asked, _) = run(task(0, 0, 100), Direction::Write, vec![Ok(0)]);
        let e = r.unwrap_err();
        assert!(
            matches!(&e, Error::Cufile { call: "cuFileWrite", code, .. } if *code == -libc::EIO),
            "{e:?}"
        );
        assert_eq!(asked.len(), 1);
    }

    #[test]
    fn a_cufile_error_stops_the_task_with_its_code() {
        // What `RegisteredFile::read` gives for a return of -5030 (see the result layer).
        let failed = crate::cufile::result::io_result("cuFileRead", -5030, || 0);
        let (r, asked, progress) = run(task(0, 0, 8192), Direction::Read, vec![Ok(4096), failed]);
        let e = r.unwrap_err();
        assert!(e.to_string().contains("CU_FILE_INTERNAL_ERROR"), "{e}");
        assert_eq!(asked.len(), 2);
        assert_eq!(progress, 4096);
    }

    #[test]
    fn an_empty_task_calls_nothing() {
        let (r, asked, _) = run(task(5, 5, 0), Direction::Read, vec![]);
        assert_eq!(r.unwrap(), 0);
        assert!(asked.is_empty());
    }

    #[test]
    fn a_count_above_what_was_asked_moves_the_task_once() {
        let (r, _, progress) = run(task(0, 0, 10), Direction::Read, vec![Ok(64)]);
        assert_eq!(r.unwrap(), 10);
        assert_eq!(progress, 10);
    }
}
