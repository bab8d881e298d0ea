use super::*;
use crate::plan::HostIoBackend;
use crate::plan::HostIoReason;
use crate::request::{Buffer, Direction};
use crate::source::{IoContext, Source};

/// `size` bytes of 7s, written into the caller's buffer one task at a time.
struct Sevens(u64);

impl Source for Sevens {
    fn describe(&self) -> String {
        "sevens".into()
    }

    fn size(&self) -> Result<u64> {
        Ok(self.0)
    }

    fn read_at(&self, dst: &mut [u8], offset: u64, _: IoContext<'_>) -> Result<()> {
        dst.fill(7);
        match offset + dst.len() as u64 > self.0 {
            true => Err(Error::InvalidArgument("read past the end".into())),
            false => Ok(()),
        }
    }
}

/// A source other than a local file is checked as a local file is: a read past its end is
/// refused before any byte moves (the buffer untouched), one within it reads.
#[test]
fn every_endpoint_refuses_a_read_past_its_end_before_any_byte_moves() {
    let engine = Engine::new(config::State::from_env(|_| None).unwrap());
    let settings = Settings {
        num_threads: 4,
        ..engine.settings()
    };
    let at = Endpoint::Read(Arc::new(Sevens(8 << 20)));
    let mut buf = vec![0u8; 4 << 20];
    let req = Request::read(Buffer::host(&mut buf), 5 << 20).task_size(Some(1 << 20));
    // SAFETY: `buf` outlives the call; a refused request runs nothing.
    let r = unsafe { engine.submit(&at, req, &settings) };
    match r {
        Err(Error::UnexpectedEof {
            offset, file_size, ..
        }) => assert_eq!((offset, file_size), (5 << 20, 8 << 20)),
        Err(e) => panic!("{e:?}"),
        Ok(f) => panic!("submitted: {:?}", f.wait()),
    }
    assert!(
        buf.iter().all(|b| *b == 0),
        "bytes moved before the refusal"
    );
    let req = Request::read(Buffer::host(&mut buf), 4 << 20);
    // SAFETY: as above; waited for below.
    let n = unsafe { engine.submit(&at, req, &settings) }
        .unwrap()
        .wait();
    assert_eq!(n.unwrap(), 4 << 20);
    assert!(buf.iter().all(|b| *b == 7));
}

/// Many ranges of one buffer are one request: a gather of pieces of a file into a buffer,
/// and a scatter of a buffer's pieces into a file, byte for byte, over several workers.
#[test]
fn a_gather_lands_byte_exact_and_reports_its_host_io_on_and_off() {
    use crate::request::{Range, Ranges};
    let engine = Engine::new(config::State::from_env(|_| None).unwrap());
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 253) as u8).collect();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, &data).unwrap();
    let h = crate::FileHandle::open(file.path(), "r").unwrap();
    let ranges: Vec<Range> = (0..3000)
        .map(|i| Range {
            file_offset: (i * 7919 % 250_000) as u64,
            len: 1 + i % 600,
            buf_offset: i * 600,
        })
        .collect();
    for io_uring in [true, false] {
        let settings = Settings {
            num_threads: 3,
            io_uring,
            ..engine.settings()
        };
        let mut buf = vec![0u8; 3000 * 600];
        let req = Request::read_ranges(Buffer::host(&mut buf), Ranges::Many(ranges.clone().into()));
        // SAFETY: `buf` outlives the wait.
        let (fut, report) =
            unsafe { engine.submit_reported(&h.endpoint(Direction::Read), req, &settings) }
                .unwrap();
        let want: usize = ranges.iter().map(|r| r.len).sum();
        assert_eq!(fut.wait().unwrap(), want);
        for r in &ranges {
            let at = r.file_offset as usize;
            assert_eq!(&buf[r.buf_offset..][..r.len], &data[at..at + r.len]);
        }
        assert!(report.gathered && report.ranges == 3000 && report.copies.is_none());
        assert_eq!(report.tasks, 12); // 4 groups per worker
        let host_io = report.host_io.unwrap();
        match (io_uring, crate::exec::uring::probe()) {
            (false, _) => assert_eq!(host_io.reason, HostIoReason::SettingOff),
            (true, Ok(_)) => assert_eq!(host_io.backend, HostIoBackend::IoUring),
            (true, Err(why)) => assert_eq!(host_io.reason, why),
        }
    }
}

#[test]
fn a_request_of_many_ranges_gathers_and_scatters_the_right_bytes() {
    use crate::request::{Range, Ranges};
    let engine = Engine::new(config::State::from_env(|_| None).unwrap());
    let settings = Settings {
        num_threads: 4,
        task_size: 64 << 10,
        ..engine.settings()
    };
    let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, &data).unwrap();
    let h = crate::FileHandle::open(file.path(), "r+").unwrap();
    // Out of order in the file, back to back in the buffer, one empty, one of many tasks.
    let pieces = [
        (3 << 20, 1000),
        (17, 4096),
        (0, 0),
        (1 << 20, 300_001),
        (5, 12),
    ];
    let mut at = 0;
    let ranges: Vec<Range> = pieces
        .iter()
        .map(|&(file_offset, len)| {
            let r = Range {
                file_offset,
                len,
                buf_offset: at,
            };
            at += len;
            r
        })
        .collect();
    let mut buf = vec![0u8; at];
    let req = Request::read_ranges(Buffer::host(&mut buf), Ranges::Many(ranges.clone().into()));
    // SAFETY: `buf` outlives the wait.
    let fut = unsafe { engine.submit(&h.endpoint(Direction::Read), req, &settings) }.unwrap();
    assert_eq!(fut.wait().unwrap(), at);
    let want: Vec<u8> = pieces
        .iter()
        .flat_map(|&(o, l)| data[o as usize..o as usize + l].iter().copied())
        .collect();
    assert_eq!(buf, want);
    // The same ranges written back, from a buffer of other bytes.
    let back: Vec<u8> = buf.iter().map(|b| b ^ 0xff).collect();
    let buffer = Buffer::Host {
        ptr: back.as_ptr().cast_mut(),
        len: back.len(),
    };
    let req = Request::write_ranges(buffer, Ranges::Many(ranges.into()));
    // SAFETY: `back` outlives the wait; a write only reads it.
    let fut = unsafe { engine.submit(&h.endpoint(Direction::Write), req, &settings) }.unwrap();
    assert_eq!(fut.wait().unwrap(), at);
    let mut expect = data.clone();
    for &(o, l) in &pieces {
        for b in &mut expect[o as usize..o as usize + l] {
            *b ^= 0xff;
        }
    }
    assert!(std::fs::read(file.path()).unwrap() == expect);
    // Ranges past the file's end are refused before any byte moves.
    let mut buf = vec![0u8; 8];
    let past = Ranges::Many(
        vec![
            Range {
                file_offset: 0,
                len: 4,
                buf_offset: 0,
            },
            Range {
                file_offset: data.len() as u64 - 2,
                len: 4,
                buf_offset: 4,
            },
        ]
        .into(),
    );
    let req = Request::read_ranges(Buffer::host(&mut buf), past);
    // SAFETY: as above.
    let r = unsafe { engine.submit(&h.endpoint(Direction::Read), req, &settings) };
    assert!(
        matches!(r, Err(Error::UnexpectedEof { .. })),
        "{:?}",
        r.err()
    );
    assert_eq!(buf, [0u8; 8]);
}

/// A request the other way from its endpoint is an argument error naming both.
#[test]
fn a_request_against_its_endpoints_direction_is_refused() {
    let engine = Engine::new(config::State::from_env(|_| None).unwrap());
    let at = Endpoint::Read(Arc::new(Sevens(100)));
    let mut buf = vec![0u8; 10];
    let req = Request::write(Buffer::host(&mut buf), 0);
    // SAFETY: `buf` outlives the call; a refused request runs nothing.
    let r = unsafe { engine.submit(&at, req, &engine.settings()) };
    let Err(Error::InvalidArgument(m)) = r else {
        panic!("not refused");
    };
    assert!(m.contains("a write request on sevens"), "{m}");
}

/// A source that learns, before a read split into tasks, that it serves reads best as one
/// request ([`Source::before_split_read`], as a remote object whose server ignores `Range`
/// does): asked once, only for a split read, under the caller's stop flag; the read is then
/// planned again, as one task.
struct Learns {
    asked: std::sync::atomic::AtomicUsize,
    whole: AtomicBool,
}

impl Source for Learns {
    fn describe(&self) -> String {
        "learns".into()
    }

    fn size(&self) -> Result<u64> {
        Ok(1 << 20)
    }

    fn request_per_task(&self) -> bool {
        true
    }

    fn one_request(&self) -> bool {
        self.whole.load(Ordering::SeqCst)
    }

    fn before_split_read(&self, call: IoContext<'_>) -> Result<bool> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if call.stop.is_set() {
            return Err(Error::Cancelled);
        }
        Ok(!self.whole.swap(true, Ordering::SeqCst))
    }

    fn read_at(&self, dst: &mut [u8], _: u64, _: IoContext<'_>) -> Result<()> {
        dst.fill(7);
        Ok(())
    }
}

#[test]
fn a_source_learns_before_a_split_read_and_the_read_is_planned_again() {
    use crate::future::StopFlag;
    let engine = Engine::new(config::State::from_env(|_| None).unwrap());
    let settings = Settings {
        num_threads: 4,
        task_size: 64 << 10,
        ..engine.settings()
    };
    let source = Arc::new(Learns {
        asked: 0.into(),
        whole: false.into(),
    });
    let at = Endpoint::Read(source.clone());
    let mut buf = vec![0u8; 1 << 20];
    // One task: nothing to learn.
    let req = Request::read(Buffer::host(&mut buf[..1000]), 0);
    // SAFETY: `buf` outlives the wait.
    let (fut, report) = unsafe { engine.submit_reported(&at, req, &settings) }.unwrap();
    assert_eq!((fut.wait().unwrap(), report.tasks), (1000, 1));
    assert_eq!(source.asked.load(Ordering::SeqCst), 0);
    buf.fill(0);
    // A caller's stop flag, set: the source gives up, nothing is read.
    let stop = StopFlag::default();
    stop.set();
    let req = Request::read(Buffer::host(&mut buf), 0).stop(Some(stop));
    // SAFETY: as above; a refused request runs nothing.
    let r = unsafe { engine.submit(&at, req, &settings) };
    assert!(matches!(r, Err(Error::Cancelled)), "{:?}", r.map(|_| ()));
    assert!(buf.iter().all(|b| *b == 0));
    // Split into 16 tasks, until the source learns: then one.
    let req = Request::read(Buffer::host(&mut buf), 0);
    // SAFETY: as above.
    let (fut, report) = unsafe { engine.submit_reported(&at, req, &settings) }.unwrap();
    assert_eq!((fut.wait().unwrap(), report.tasks), (1 << 20, 1));
    assert_eq!(source.asked.load(Ordering::SeqCst), 2);
    assert!(buf.iter().all(|b| *b == 7));
}

/// A local file says nothing itself (sources sit below `observe`): the notice it comes to have
/// (no direct I/O where `/proc` is missing) reaches the user through the request that met it,
/// with its text as the file gives it.
#[test]
fn a_files_notice_is_said_by_the_request_on_it() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut f, &[5u8; 1 << 16]).unwrap();
    let h = crate::FileHandle::open(f.path(), "r").unwrap();
    let text = "no direct I/O: /proc/self/fd is missing: O_DIRECT needs a second descriptor of \
                the open file (the path may name another file by now)";
    assert!(!crate::observe::said("no-direct-io")
        .iter()
        .any(|t| t == text));
    h.local().refuse_direct_as_without_proc();
    assert_eq!(h.local().direct_fd(), None);
    let engine = Engine::new(config::State::from_env(|_| None).unwrap());
    let mut buf = vec![0u8; 1 << 16];
    let req = Request::read(Buffer::host(&mut buf), 0);
    // SAFETY: `buf` outlives the wait below.
    let fut = unsafe { engine.submit(&h.endpoint(Direction::Read), req, &engine.settings()) };
    assert_eq!(fut.unwrap().wait().unwrap(), 1 << 16);
    assert!(buf.iter().all(|b| *b == 5));
    assert_eq!(
        crate::observe::said("no-direct-io"),
        [text],
        "the notice is said once, with the file's text"
    );
}
