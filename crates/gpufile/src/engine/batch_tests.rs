use super::*;
use crate::exec::host::HostExec;
use crate::plan::{self, TaskSplit};
use crate::request::SendPtr;
use crate::request::{Buffer, Direction};
use crate::FileHandle;

/// A file of `len` known bytes, an engine at the environment's defaults, the file opened.
fn file_and_engine(len: u32) -> (tempfile::NamedTempFile, Vec<u8>, Engine, FileHandle) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    std::io::Write::write_all(&mut file, &data).unwrap();
    let engine = Engine::new(config::State::from_env(|_| None).unwrap());
    let h = FileHandle::open(file.path(), "r").unwrap();
    (file, data, engine, h)
}

#[test]
fn a_blocking_small_host_request_is_done_on_return_and_others_run_as_before() {
    let (_file, data, engine, h) = file_and_engine(3 << 20);
    let settings = Settings {
        num_threads: 4,
        ..engine.settings()
    };
    for (len, offset) in [(4096, 8192u64), (1 << 20, 1), (3 << 20, 0)] {
        let mut buf = vec![0u8; len];
        let req = Request::read(Buffer::host(&mut buf), offset).caller_waits(true);
        let at = h.endpoint(Direction::Read);
        // SAFETY: `buf` outlives the wait below.
        let fut = unsafe { engine.submit(&at, req, &settings) }.unwrap();
        // One task (up to MIN_SPLIT) ran here; 3 MiB is three tasks, on the workers.
        if len <= plan::MIN_SPLIT {
            assert!(fut.is_done(), "{len}");
        }
        assert_eq!(fut.wait().unwrap(), len);
        assert_eq!(buf, data[offset as usize..offset as usize + len]);
        assert_eq!(engine.in_flight(), 0);
    }
    let mut buf = vec![0u8; 16];
    let req = Request::read(Buffer::host(&mut buf), data.len() as u64 - 8).caller_waits(true);
    // SAFETY: as above.
    let r = unsafe { engine.submit(&h.endpoint(Direction::Read), req, &settings) };
    assert!(matches!(r, Err(Error::UnexpectedEof { .. })));
}

/// Runs a read of `len` bytes at 0 into `buf` as `CallerPart::Share` does (device reads
/// only take it; with host memory the mechanism is the same and runs here).
fn shared_read(engine: &Engine, h: &FileHandle, buf: &mut [u8], threads: usize) -> IoFuture {
    let exec = Arc::new(HostExec {
        endpoint: Endpoint::Read(h.local()),
        ptr: SendPtr(buf.as_mut_ptr()),
        direct: false,
        direct_uncached: false,
    });
    let split = TaskSplit::new(0, buf.len(), 64 << 10);
    let runs = split.count().min(threads);
    engine
        .run(
            exec,
            split,
            (crate::observe::Row::GpufilePosix, None, None),
            threads,
            runs,
            true,
        )
        .unwrap()
}

#[test]
fn a_shared_request_is_run_by_the_caller_and_the_workers_and_ends_once() {
    let (file, data, engine, h) = file_and_engine(2 << 20);
    // One worker: the caller runs every task (none is queued), done on return. More: the
    // workers may end every task before the caller looks (the executor is gone by then).
    for threads in [1, 2, 4, 8] {
        for _ in 0..20 {
            let mut buf = vec![0u8; data.len()];
            let fut = shared_read(&engine, &h, &mut buf, threads);
            if threads == 1 {
                assert!(fut.is_done());
            }
            assert_eq!(fut.wait().unwrap(), data.len(), "{threads}");
            assert_eq!(buf, data);
            assert_eq!(engine.in_flight(), 0);
        }
    }
    // A task that fails (the file shrank) fails the request once, wherever it ran.
    file.as_file().set_len(1 << 20).unwrap();
    for threads in [1, 4] {
        let mut buf = vec![0u8; data.len()];
        let fut = shared_read(&engine, &h, &mut buf, threads);
        // Each task past the new end fails: one error, or several named together.
        let r = fut.wait();
        let first = match &r {
            Err(Error::TasksFailed { first, .. }) => &**first,
            Err(e) => e,
            Ok(n) => panic!("read {n} bytes of a shrunk file"),
        };
        assert!(matches!(first, Error::UnexpectedEof { .. }), "{r:?}");
        assert_eq!(engine.in_flight(), 0);
    }
}
