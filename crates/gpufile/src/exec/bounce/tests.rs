//! The read pipeline on CPU: a [`CopyQueue`] that behaves as a stream (copies run later, in
//! order, when a slot's event or the whole queue is waited for) over host memory standing in
//! for the GPU's, a real file as the source.

use super::*;
use std::cell::RefCell;
use std::io::Write;
use std::time::Duration;

use crate::future::IoFuture;
use crate::plan::TaskSplit;
use crate::source::LocalFile;

/// A call the pipeline made on its queue (copy offsets relative to the destination start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Wait(usize),
    /// To the device.
    Copy {
        at: usize,
        len: usize,
    },
    /// From the device.
    CopyOut {
        at: usize,
        len: usize,
    },
    Mark(usize),
    Drain,
}

struct HostQueue {
    /// The "device" memory.
    base: u64,
    ops: RefCell<Vec<Op>>,
    /// Copies queued (dst, src, len); those from `ran` on have not run yet.
    queued: RefCell<Vec<(*mut u8, *const u8, usize)>>,
    /// Per slot: how many queued copies its last mark covers.
    marks: RefCell<[usize; 2]>,
    /// Copies run so far (index into the queue's history).
    ran: RefCell<usize>,
    /// The call (by index in `ops`) that fails, if any.
    fail_at: Option<usize>,
}

impl HostQueue {
    fn new(device: *mut u8, fail_at: Option<usize>) -> Self {
        HostQueue {
            base: device as u64,
            ops: RefCell::new(Vec::new()),
            queued: RefCell::new(Vec::new()),
            marks: RefCell::new([0, 0]),
            ran: RefCell::new(0),
            fail_at,
        }
    }

    fn log(&self, op: Op) -> Result<()> {
        let mut ops = self.ops.borrow_mut();
        ops.push(op);
        match self.fail_at == Some(ops.len() - 1) {
            true => Err(Error::InvalidArgument(format!("{op:?} failed"))),
            false => Ok(()),
        }
    }

    /// Runs the queued copies up to the `upto`-th, in order, as a stream would.
    fn run_until(&self, upto: usize) {
        let queued = self.queued.borrow();
        let mut ran = self.ran.borrow_mut();
        while *ran < upto.min(queued.len()) {
            let (dst, src, len) = queued[*ran];
            // SAFETY: a slot buffer and the test's "device" vector, both alive and at least
            // `len` bytes long; the pipeline leaves the slot alone until this copy has run
            // (what the byte checks test).
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
            *ran += 1;
        }
    }

    fn ops(&self) -> Vec<Op> {
        self.ops.borrow().clone()
    }
}

impl CopyQueue for HostQueue {
    fn wait_slot(&self, slot: usize) -> Result<()> {
        self.log(Op::Wait(slot))?;
        self.run_until(self.marks.borrow()[slot]);
        Ok(())
    }

    unsafe fn copy_to_device(&self, dst: u64, src: *const u8, len: usize) -> Result<()> {
        let at = (dst - self.base) as usize;
        self.log(Op::Copy { at, len })?;
        self.queued.borrow_mut().push((dst as *mut u8, src, len));
        Ok(())
    }

    unsafe fn copy_to_host(&self, dst: *mut u8, src: u64, len: usize) -> Result<()> {
        let at = (src - self.base) as usize;
        self.log(Op::CopyOut { at, len })?;
        self.queued.borrow_mut().push((dst, src as *const u8, len));
        Ok(())
    }

    fn mark_slot(&self, slot: usize) -> Result<()> {
        self.log(Op::Mark(slot))?;
        self.marks.borrow_mut()[slot] = self.queued.borrow().len();
        Ok(())
    }

    fn drain(&self) -> Result<()> {
        let r = self.log(Op::Drain);
        self.run_until(usize::MAX);
        r
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn file_with(data: &[u8]) -> (tempfile::NamedTempFile, LocalFile) {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(data).unwrap();
    let local = LocalFile::new(
        std::fs::File::open(f.path()).unwrap(),
        f.path().into(),
        true,
        false,
    );
    (f, local)
}

struct Outcome {
    result: Result<usize>,
    ops: Vec<Op>,
    device: Vec<u8>,
}

/// Reads `len` bytes at `offset` of `src` with tasks of `task_size` and slots of `bounce`
/// bytes through one pipeline run; checks every task is reported exactly once.
fn read(
    src: &LocalFile,
    offset: u64,
    len: usize,
    task_size: usize,
    bounce: usize,
    fail_at: Option<usize>,
    cancel: bool,
) -> Outcome {
    let tasks = Tasks::new(TaskSplit::new(offset, len, task_size), 1);
    // One task more than the request has: done only once the test counts it, so a task
    // reported twice shows as a future done too early.
    let done = Completion::new(tasks.count() + 1, |_| {});
    if cancel {
        done.cancel();
    }
    let mut device = vec![0u8; len];
    let mut slots = [vec![0u8; bounce], vec![0u8; bounce]];
    let queue = HostQueue::new(device.as_mut_ptr(), fail_at);
    let call = IoContext {
        progress: done.progress(),
        direct: false,
        direct_uncached: false,
        stop: done.stop_flag(),
    };
    let mut lease = Lease::default();
    if let Some(first) = tasks.next(&mut lease) {
        let chunks = Chunks {
            bounce,
            whole_tasks: false,
        };
        let pipeline = ReadPipeline::new(
            &queue,
            [slots[0].as_mut_ptr(), slots[1].as_mut_ptr()],
            chunks,
            queue.base,
            None,
            call,
            &done,
        );
        pipeline.run(src, first, &tasks, &mut lease);
    }
    let fut = IoFuture::pending(Arc::clone(&done));
    assert!(!fut.is_done(), "a task was reported twice");
    done.finish_task(Ok(0));
    let result = fut
        .wait_timeout(Duration::from_secs(10))
        .expect("a task was never reported");
    let ops = queue.ops();
    drop(queue);
    Outcome {
        result,
        ops,
        device,
    }
}

#[test]
fn bytes_arrive_whole_for_awkward_sizes() {
    let data = pattern(50_000);
    let (_f, src) = file_with(&data);
    for (offset, len, task_size, bounce) in [
        (0, 50_000, 4 << 20, 4096),
        (0, 50_000, 199, 4096),
        (13, 49_000, 4096, 4096),
        (1, 1, 1, 4096),
        (0, 50_000, 10_000, 1),
        (4095, 20_001, 5_000, 3_000),
        (0, 50_000, 50_000, 4097),
    ] {
        let out = read(&src, offset, len, task_size, bounce, None, false);
        let at = offset as usize;
        assert_eq!(
            out.result.unwrap(),
            len,
            "{offset} {len} {task_size} {bounce}"
        );
        assert!(
            out.device == data[at..at + len],
            "bytes differ for {offset} {len} {task_size} {bounce}"
        );
    }
}

#[test]
fn slots_alternate_and_a_task_waits_for_its_last_copy_after_the_next_read() {
    let data = pattern(12_288);
    let (_f, src) = file_with(&data);
    // Two tasks of 8 KiB and 4 KiB, chunks of 4 KiB.
    let out = read(&src, 0, 12_288, 8192, 4096, None, false);
    assert_eq!(out.result.unwrap(), 12_288);
    use Op::*;
    assert_eq!(
        out.ops,
        [
            // Task 0, chunk 0 through slot 0: wait for the slot, (read), copy, mark.
            Wait(0),
            Copy { at: 0, len: 4096 },
            Mark(0),
            // Chunk 1 through slot 1.
            Wait(1),
            Copy {
                at: 4096,
                len: 4096
            },
            Mark(1),
            // Task 1: its read into slot 0 runs while task 0's last copy may still run;
            // then task 0 is reported once slot 1's copy is done.
            Wait(0),
            Wait(1),
            Copy {
                at: 8192,
                len: 4096
            },
            Mark(0),
            // The run ends: drained before task 1 is reported.
            Drain,
        ]
    );
    assert!(out.device == data);
}

#[test]
fn a_failed_read_drains_reports_the_error_and_skips_the_rest() {
    let data = pattern(10_000);
    let (_f, src) = file_with(&data);
    // 16 KiB asked of a 10,000-byte file: task 2 (8192..12288) meets the end.
    let out = read(&src, 0, 16_384, 4096, 4096, None, false);
    match out.result.unwrap_err() {
        Error::UnexpectedEof { offset, .. } => assert_eq!(offset, 10_000),
        e => panic!("{e:?}"),
    }
    use Op::*;
    let tail = &out.ops[out.ops.len() - 4..];
    // Task 2's slot was waited for, its read failed: drain, report task 1, drain at the end.
    assert_eq!(tail, [Wait(0), Drain, Wait(1), Drain], "{:?}", out.ops);
    assert!(out.device[..8192] == data[..8192]);
}

#[test]
fn a_failed_copy_fails_the_request_after_draining() {
    let data = pattern(16_384);
    let (_f, src) = file_with(&data);
    // Call 5 is the second task's copy.
    let out = read(&src, 0, 16_384, 4096, 4096, Some(5), false);
    let e = out.result.unwrap_err();
    assert!(e.to_string().contains("Copy"), "{e}");
    use Op::*;
    assert_eq!(
        out.ops,
        [
            Wait(0),
            Copy { at: 0, len: 4096 },
            Mark(0),
            Wait(1),
            Wait(0), // task 0 reported before the failing copy
            Copy {
                at: 4096,
                len: 4096
            },
            Drain,
            Drain,
        ]
    );
}

#[test]
fn a_failed_drain_at_the_end_fails_the_last_task() {
    let data = pattern(4096);
    let (_f, src) = file_with(&data);
    let out = read(&src, 0, 4096, 4096, 4096, Some(3), false);
    assert!(
        out.result.unwrap_err().to_string().contains("Drain"),
        "{:?}",
        out.ops
    );
}

#[test]
fn a_stopped_request_reads_nothing() {
    let data = pattern(16_384);
    let (_f, src) = file_with(&data);
    let out = read(&src, 0, 16_384, 4096, 4096, None, true);
    assert!(
        matches!(out.result, Err(Error::Cancelled)),
        "{:?}",
        out.result
    );
    assert_eq!(out.ops, [Op::Drain]);
    assert!(out.device.iter().all(|b| *b == 0));
}

/// Writes `data` (standing in for device memory) at `offset` of `path` with tasks of
/// `task_size` and slots of `bounce` bytes through one pipeline run; checks every task is
/// reported exactly once.
fn write(
    data: &[u8],
    sink: &LocalFile,
    offset: u64,
    task_size: usize,
    bounce: usize,
    fail_at: Option<usize>,
) -> (Result<usize>, Vec<Op>) {
    let tasks = Tasks::new(TaskSplit::new(offset, data.len(), task_size), 1);
    let done = Completion::new(tasks.count() + 1, |_| {});
    let mut slots = [vec![0u8; bounce], vec![0u8; bounce]];
    let queue = HostQueue::new(data.as_ptr().cast_mut(), fail_at);
    let chunks = Chunks {
        bounce,
        whole_tasks: false,
    };
    let pipeline = WritePipeline {
        queue: &queue,
        slots: [slots[0].as_mut_ptr(), slots[1].as_mut_ptr()],
        chunks,
        src: queue.base,
        call: IoContext {
            progress: done.progress(),
            direct: false,
            direct_uncached: false,
            stop: done.stop_flag(),
        },
        done: &done,
    };
    let mut lease = Lease::default();
    if let Some(first) = tasks.next(&mut lease) {
        pipeline.run(sink, first, &tasks, &mut lease);
    }
    let fut = IoFuture::pending(Arc::clone(&done));
    assert!(!fut.is_done(), "a task was reported twice");
    done.finish_task(Ok(0));
    let result = fut
        .wait_timeout(Duration::from_secs(10))
        .expect("a task was never reported");
    (result, queue.ops())
}

fn writable(path: &std::path::Path) -> LocalFile {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    LocalFile::new(file, path.into(), true, true)
}

#[test]
fn written_bytes_arrive_whole_for_awkward_sizes() {
    let data = pattern(50_000);
    for (offset, task_size, bounce) in [
        (0, 4 << 20, 4096),
        (0, 199, 4096),
        (13, 4096, 4096),
        (4095, 5_000, 3_000),
        (1, 10_000, 1),
    ] {
        let f = tempfile::NamedTempFile::new().unwrap();
        let sink = writable(f.path());
        let (r, _) = write(&data, &sink, offset, task_size, bounce, None);
        assert_eq!(r.unwrap(), data.len());
        let back = std::fs::read(f.path()).unwrap();
        assert!(
            back[offset as usize..] == data[..],
            "bytes differ for {offset} {task_size} {bounce}"
        );
    }
}

#[test]
fn a_write_copies_the_next_chunk_while_it_writes_one() {
    let data = pattern(12_288);
    let f = tempfile::NamedTempFile::new().unwrap();
    let (r, ops) = write(&data, &writable(f.path()), 0, 12_288, 4096, None);
    assert_eq!(r.unwrap(), 12_288);
    use Op::*;
    assert_eq!(
        ops,
        [
            CopyOut { at: 0, len: 4096 },
            Mark(0),
            CopyOut {
                at: 4096,
                len: 4096
            },
            Mark(1),
            Wait(0), // then chunk 0 is written, while chunk 1 is copied
            CopyOut {
                at: 8192,
                len: 4096
            },
            Mark(0),
            Wait(1),
            Wait(0),
        ]
    );
    assert!(std::fs::read(f.path()).unwrap() == data);
}

#[test]
fn a_failed_write_drains_and_skips_the_rest() {
    let data = pattern(16_384);
    let f = tempfile::NamedTempFile::new().unwrap();
    // Opened read-only: every write fails with EBADF.
    let sink = LocalFile::new(
        std::fs::File::open(f.path()).unwrap(),
        f.path().into(),
        true,
        false,
    );
    let (r, ops) = write(&data, &sink, 0, 4096, 4096, None);
    match r.unwrap_err() {
        Error::Os { errno, .. } => assert_eq!(errno, libc::EBADF),
        e => panic!("{e:?}"),
    }
    use Op::*;
    assert_eq!(
        ops,
        [CopyOut { at: 0, len: 4096 }, Mark(0), Wait(0), Drain],
        "the first task fails, the others never start"
    );
}

#[test]
fn a_failed_copy_from_the_device_fails_the_write() {
    let data = pattern(8192);
    let f = tempfile::NamedTempFile::new().unwrap();
    let (r, ops) = write(&data, &writable(f.path()), 0, 8192, 4096, Some(2));
    assert!(r.unwrap_err().to_string().contains("CopyOut"), "{ops:?}");
    assert_eq!(ops.last(), Some(&Op::Drain));
    assert!(
        std::fs::read(f.path()).unwrap().is_empty(),
        "nothing written"
    );
}
