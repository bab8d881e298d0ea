use super::*;
use crate::exec::{Executor, Tasks};
use crate::future::Completion;
use crate::plan::TaskSplit;
use crate::request::{Buffer, Direction};
use crate::FileHandle;

/// A run that finishes every task and panics on the one at `at` (what a bug in an
/// executor does).
struct PanicAt(u64);

impl Executor for PanicAt {
    fn run(&self, tasks: &Tasks, done: &Completion) {
        let mut lease = crate::exec::Lease::default();
        while let Some(t) = tasks.next(&mut lease) {
            if done.stopped() {
                done.finish_task(Ok(0));
                tasks.skip_rest(&mut lease, done);
                return;
            }
            if t.file_offset == self.0 {
                panic!("injected at {}", t.file_offset);
            }
            done.finish_task(Ok(t.len));
        }
    }
}

/// A task that panics fails its request with `TaskPanicked`, on a worker, on the caller's
/// share and on the calling thread alone; the workers live on, so a normal multi-task read
/// on the same engine completes with the file's bytes (before, the dead workers left it
/// queued for ever).
#[test]
fn a_panicking_task_fails_its_request_and_later_requests_run() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::io::Write::write_all(&mut file, &data).unwrap();
    let engine = Engine::new(config::State::from_env(|_| None).unwrap());
    let h = FileHandle::open(file.path(), "r").unwrap();
    let settings = Settings {
        num_threads: 2,
        task_size: 256 << 10,
        ..engine.settings()
    };
    for (threads, share, at) in [
        (2, false, 0),
        (2, false, 3 << 16),
        (2, true, 0),
        (1, true, 0),
    ] {
        for _ in 0..5 {
            let split = TaskSplit::new(0, 1 << 20, 1 << 16);
            let runs = split.count().min(threads);
            let exec = Arc::new(PanicAt(at));
            let fut = engine
                .run(
                    exec,
                    split,
                    (crate::observe::Row::GpufilePosix, None, None),
                    threads,
                    runs,
                    share,
                )
                .unwrap();
            let r = fut.wait_timeout(Duration::from_secs(20));
            let e = r.expect("a request with a panicked task never ended");
            assert!(
                matches!(&e, Err(Error::TaskPanicked { message }) if message.contains("injected")),
                "{threads} {share}: {e:?}"
            );
            assert_eq!(engine.in_flight(), 0);
        }
    }
    let fut = engine.run_here(
        Arc::new(PanicAt(0)),
        TaskSplit::new(0, 10, 10),
        (crate::observe::Row::GpufilePosix, None, None),
    );
    let r = fut
        .wait_timeout(Duration::from_secs(1))
        .expect("done on return");
    assert!(matches!(r, Err(Error::TaskPanicked { .. })), "{r:?}");
    assert_eq!(engine.in_flight(), 0);
    // The workers survived: a 16-task read over both of them ends with the right bytes.
    let mut buf = vec![0u8; data.len()];
    let req = Request::read(Buffer::host(&mut buf), 0);
    // SAFETY: `buf` outlives the wait below.
    let fut = unsafe { engine.submit(&h.endpoint(Direction::Read), req, &settings) }.unwrap();
    let n = fut.wait_timeout(Duration::from_secs(20));
    assert_eq!(
        n.expect("a read after the panics hung").unwrap(),
        data.len()
    );
    assert_eq!(buf, data);
}
