//! Host-memory round trips through real files, threads and the process pool.

use std::io::Write;

use gpufile::{Buffer, Engine, Error, FileHandle, Request};

mod common;
use common::{pattern, submit};

fn file_with(data: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(data).unwrap();
    f.flush().unwrap();
    f
}

#[test]
fn round_trips_for_awkward_sizes_and_task_sizes() {
    for size in [0usize, 1, 4095, 4096, 4097, (10 << 20) + 3] {
        for task_size in [199usize, 1024, 4 << 20] {
            if size > (1 << 20) && task_size == 199 {
                continue; // 50k tasks of 199 bytes prove nothing more than 1 MiB does
            }
            let data = pattern(size, size as u64 + task_size as u64);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f.bin");
            let w = FileHandle::open(&path, "w").unwrap();
            assert_eq!(w.write(&data, 0, Some(task_size)).unwrap(), size);
            drop(w);
            assert_eq!(
                std::fs::read(&path).unwrap(),
                data,
                "size {size} task {task_size}"
            );
            let r = FileHandle::open(&path, "r").unwrap();
            let mut back = vec![0u8; size];
            assert_eq!(r.read(&mut back, 0, Some(task_size)).unwrap(), size);
            assert!(back == data, "size {size} task {task_size}");
        }
    }
}

#[test]
fn thread_counts_all_give_the_same_bytes() {
    let data = pattern((3 << 20) + 17, 7);
    let f = file_with(&data);
    let defaults = Engine::global().unwrap().settings();
    for threads in [1, 3, 4, 16] {
        // Each request carries its own settings: nothing process-wide changes.
        let settings = gpufile::Settings {
            num_threads: threads,
            ..defaults.clone()
        };
        let h = FileHandle::open(f.path(), "r").unwrap();
        let mut back = vec![0u8; data.len()];
        let req = Request::read(Buffer::host(&mut back), 0).task_size(Some(64 << 10));
        // SAFETY: `back` outlives the wait.
        unsafe { submit(&h, req, Some(&settings)) }
            .unwrap()
            .wait()
            .unwrap();
        assert!(back == data, "threads {threads}");
    }
    assert_eq!(Engine::global().unwrap().settings(), defaults);
}

#[test]
fn unaligned_offsets_read_the_right_range() {
    let data = pattern(100_000, 3);
    let f = file_with(&data);
    let h = FileHandle::open(f.path(), "r").unwrap();
    for (off, len) in [
        (1usize, 4095usize),
        (4097, 10_000),
        (99_999, 1),
        (12_345, 87_655),
    ] {
        let mut back = vec![0u8; len];
        assert_eq!(h.read(&mut back, off as u64, Some(1000)).unwrap(), len);
        assert_eq!(back, &data[off..off + len], "offset {off} len {len}");
    }
}

#[test]
fn writes_at_offsets_leave_the_rest_alone() {
    let data = pattern(10_000, 11);
    let f = file_with(&data);
    let h = FileHandle::open(f.path(), "r+").unwrap();
    let patch = pattern(333, 99);
    h.write(&patch, 4321, Some(100)).unwrap();
    let mut expect = data.clone();
    expect[4321..4321 + 333].copy_from_slice(&patch);
    assert_eq!(std::fs::read(f.path()).unwrap(), expect);
}

#[test]
fn reading_past_the_end_fails_before_touching_the_buffer() {
    let f = file_with(&pattern(1000, 5));
    let h = FileHandle::open(f.path(), "r").unwrap();
    let mut buf = vec![0xAAu8; 1001];
    let err = h.read(&mut buf, 0, None).unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnexpectedEof {
                file_size: 1000,
                len: 1001,
                offset: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(buf.iter().all(|b| *b == 0xAA), "destination untouched");
    let err = h.read(&mut buf[..1], 1000, None).unwrap_err();
    assert!(err.to_string().contains("past the end"), "{err}");
    assert_eq!(
        h.read(&mut [], 5000, None).unwrap(),
        0,
        "an empty read anywhere is fine"
    );
}

#[test]
fn wrong_direction_and_flags_are_refused() {
    let f = file_with(b"abc");
    let r = FileHandle::open(f.path(), "r").unwrap();
    assert!(matches!(
        r.write(b"x", 0, None),
        Err(Error::NotWritable { .. })
    ));
    let w = FileHandle::open(f.path(), "w").unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(
        w.read(&mut b, 0, None),
        Err(Error::NotReadable { .. })
    ));
    assert!(matches!(
        FileHandle::open(f.path(), "rw"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        r.read(&mut b, 0, Some(0)),
        Err(Error::InvalidArgument(_))
    ));
}

/// `Engine::check` refuses what `submit` refuses (the same error) and accepts what it starts,
/// moving no byte either way: a caller starting several requests checks them all first.
#[test]
fn check_refuses_what_submit_refuses_and_moves_nothing() {
    use gpufile::Direction::{Read, Write};
    let data = pattern(1000, 3);
    let f = file_with(&data);
    let rw = FileHandle::open(f.path(), "r+").unwrap();
    let ro = FileHandle::open(f.path(), "r").unwrap();
    let engine = Engine::global().unwrap();
    let settings = engine.settings();
    let mut buf = vec![0xAAu8; 1001];
    let mut src = vec![0x55u8; 10];
    let past_the_end = Request::read(Buffer::host(&mut buf), 0);
    let err = engine.check(&rw.endpoint(Read), &past_the_end, &settings);
    assert!(matches!(err, Err(Error::UnexpectedEof { .. })), "{err:?}");
    let on_read_only = Request::write(Buffer::host(&mut src), 0);
    let err = engine.check(&ro.endpoint(Write), &on_read_only, &settings);
    assert!(matches!(err, Err(Error::NotWritable { .. })), "{err:?}");
    let fits = Request::write(Buffer::host(&mut src), 990);
    engine.check(&rw.endpoint(Write), &fits, &settings).unwrap();
    assert!(buf.iter().all(|b| *b == 0xAA), "no byte read");
    assert_eq!(std::fs::read(f.path()).unwrap(), data, "no byte written");
}

#[test]
fn open_errors_carry_errno_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.bin");
    let err = FileHandle::open(&missing, "r").unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT));
    assert!(err.to_string().contains("missing.bin"), "{err}");
    let err = FileHandle::open(dir.path(), "r").unwrap_err();
    assert_eq!(err.errno(), Some(libc::EISDIR));
}

#[test]
fn concurrent_preads_on_one_handle() {
    let data = pattern(8 << 20, 13);
    let f = file_with(&data);
    let h = FileHandle::open(f.path(), "r").unwrap();
    let chunk = 1 << 20;
    let mut bufs: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; chunk]).collect();
    let futures: Vec<_> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| {
            let req = Request::read(Buffer::host(b), (i * chunk) as u64).task_size(Some(100_003));
            // SAFETY: each buffer is borrowed until its future is waited on below.
            unsafe { submit(&h, req, None) }.unwrap()
        })
        .collect();
    for f in &futures {
        assert_eq!(f.wait().unwrap(), chunk);
        assert!(f.is_done());
    }
    for (i, b) in bufs.iter().enumerate() {
        assert!(b[..] == data[i * chunk..(i + 1) * chunk], "chunk {i}");
    }
}

#[test]
fn closing_the_handle_while_a_request_runs_is_safe() {
    let data = pattern(4 << 20, 17);
    let f = file_with(&data);
    let h = FileHandle::open(f.path(), "r").unwrap();
    let mut back = vec![0u8; data.len()];
    let req = Request::read(Buffer::host(&mut back), 0).task_size(Some(4096));
    // SAFETY: `back` outlives the wait below.
    let fut = unsafe { submit(&h, req, None) }.unwrap();
    drop(h);
    assert_eq!(fut.wait().unwrap(), data.len());
    assert!(back == data);
}

#[test]
fn huge_offsets_are_argument_errors() {
    let f = file_with(b"abc");
    let h = FileHandle::open(f.path(), "r+").unwrap();
    let err = h.write(b"x", u64::MAX, None).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

#[test]
fn a_billion_tiny_tasks_stream_lazily_and_cancel_promptly() {
    // 1 GiB in 1-byte tasks: nothing is allocated per task up front, and a cancel stops the
    // tasks not yet started (the future reports it, no worker touches the buffer afterwards).
    let f = file_with(&pattern(1 << 20, 5));
    let h = FileHandle::open(f.path(), "r").unwrap();
    let mut back = vec![0u8; 1 << 20];
    let req = Request::read(Buffer::host(&mut back), 0).task_size(Some(1));
    // SAFETY: `back` outlives the wait.
    let fut = unsafe { submit(&h, req, None) }.unwrap();
    fut.cancel();
    let started = std::time::Instant::now();
    assert!(matches!(fut.wait(), Err(Error::Cancelled)));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn a_private_engine_runs_requests_and_shuts_down() {
    let data = pattern(1 << 20, 9);
    let f = file_with(&data);
    let engine = Engine::new(gpufile::__private::config::State::from_env(|_| None).unwrap());
    let h = FileHandle::open(f.path(), "r").unwrap();
    let mut back = vec![0u8; data.len()];
    let settings = engine.settings();
    // SAFETY: `back` outlives the wait.
    let fut = unsafe {
        engine.submit(
            &h.endpoint(gpufile::Direction::Read),
            Request::read(Buffer::host(&mut back), 0),
            &settings,
        )
    };
    assert_eq!(fut.unwrap().wait().unwrap(), data.len());
    assert!(back == data);
    assert!(engine.shutdown(std::time::Duration::from_secs(1)));
    // SAFETY: as above.
    let refused = unsafe {
        engine.submit(
            &h.endpoint(gpufile::Direction::Read),
            Request::read(Buffer::host(&mut back), 0),
            &settings,
        )
    };
    assert!(matches!(refused, Err(Error::ShuttingDown)));
}

#[test]
fn uncached_ranges_read_directly_and_cached_ones_through_the_cache() {
    use std::os::fd::AsRawFd;
    let data = pattern(8 << 20, 21);
    let dir = tempfile::tempdir_in(".").unwrap(); // a disk file system (tmpfs keeps its pages)
    let path = dir.path().join("cold.bin");
    std::fs::write(&path, &data).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: plain advice on an open descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let h = FileHandle::open(&path, "r").unwrap();
    let cold = h.local().uncached(0, 1 << 20);
    let settings = gpufile::Settings {
        direct_io_uncached: true,
        ..Engine::global().unwrap().settings()
    };
    // Page-aligned memory, as O_DIRECT needs (a Vec of u64 pages would not guarantee 4 KiB).
    let layout = std::alloc::Layout::from_size_align(data.len(), 4096).unwrap();
    // SAFETY: a non-zero size; freed below.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    let buffer = Buffer::Host {
        ptr,
        len: data.len(),
    };
    // SAFETY: `ptr` holds `data.len()` bytes until freed after the wait.
    let n = unsafe { submit(&h, Request::read(buffer, 0), Some(&settings)) };
    assert_eq!(n.unwrap().wait().unwrap(), data.len());
    // SAFETY: the read is done; the memory is initialised.
    let back = unsafe { std::slice::from_raw_parts(ptr, data.len()) };
    assert!(back == &data[..]);
    // SAFETY: allocated above with `layout`.
    unsafe { std::alloc::dealloc(ptr, layout) };
    if cold {
        // Read directly, the pages did not come into the cache.
        assert!(
            h.local().uncached(0, 1 << 20),
            "a direct read filled the cache"
        );
    } else {
        eprintln!("skipped the residency check: this file system kept the pages cached");
    }
    let mut again = vec![0u8; data.len()];
    h.read(&mut again, 0, None).unwrap(); // buffered: now cached
    assert!(again == data);
    assert!(!h.local().uncached(0, 1 << 20));
}

/// Runs `f` on a thread and gives its result, or fails the test where it has not returned
/// within 10 s (an open that waits for a FIFO's other end never returns).
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} still blocks after 10 s"))
}

#[test]
fn a_fifo_is_refused_at_open_without_waiting_for_its_other_end() {
    use gpufile::safetensors::{Checkpoint, FormatError};
    use gpufile::source::{MapOptions, MmapSource};
    let dir = tempfile::tempdir().unwrap();
    let names = ["f", "f.safetensors", "model.safetensors.index.json"];
    for name in names {
        let status = std::process::Command::new("mkfifo")
            .arg(dir.path().join(name))
            .status()
            .unwrap();
        assert!(status.success());
    }
    let fifo = dir.path().join("f");
    for flags in ["r", "r+", "w", "w+"] {
        let p = fifo.clone();
        let r = within_10s(flags, move || FileHandle::open(&p, flags).map(|_| ()));
        match r {
            Err(Error::NotSeekable { ref path, what }) => {
                assert_eq!((path, what), (&fifo, "a FIFO"), "{flags}")
            }
            other => panic!("{flags}: expected NotSeekable, got {other:?}"),
        }
        let text = r.unwrap_err().to_string();
        assert!(text.ends_with("is a FIFO: gpufile reads and writes at file offsets (pread/pwrite), which a FIFO does not have"), "{text}");
    }
    let p = fifo.clone();
    let r = within_10s("Mmap", move || {
        MmapSource::open(&p, "r", MapOptions::default()).map(|_| ())
    });
    assert!(matches!(r, Err(Error::NotSeekable { .. })), "{r:?}");
    for name in &names[1..] {
        let p = dir.path().join(name);
        let r = within_10s(name, move || Checkpoint::open(&p).map(|_| ()));
        match r {
            Err(e @ FormatError::NotSeekable { .. }) => {
                assert!(e.to_string().contains("is a FIFO"), "{e}")
            }
            other => panic!("{name}: expected NotSeekable, got {other:?}"),
        }
    }
    // What opened before still opens: a character device, read by offset.
    let null = FileHandle::open("/dev/null", "r+").unwrap();
    assert_eq!(null.write(b"abc", 0, None).unwrap(), 3);
    assert_eq!(null.open_flags().unwrap() & libc::O_NONBLOCK, 0);
    let regular = FileHandle::open(dir.path().join("regular"), "w").unwrap();
    assert_eq!(regular.open_flags().unwrap() & libc::O_NONBLOCK, 0);
}
