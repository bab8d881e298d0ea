use super::*;
use crate::error::Op as Call;
use crate::{config, FileHandle};

/// `len` known bytes (`seed` varies them) in a new file.
fn file_of(len: usize, seed: u8) -> (tempfile::NamedTempFile, Vec<u8>) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let data: Vec<u8> = (0..len)
        .map(|i| (i % 251) as u8 ^ seed.wrapping_mul(37))
        .collect();
    std::io::Write::write_all(&mut file, &data).unwrap();
    (file, data)
}

fn engine() -> Engine {
    Engine::new(config::State::from_env(|_| None).unwrap())
}

#[test]
fn ops_of_one_file_buffer_and_direction_run_as_one_request_each_byte_for_byte() {
    let engine = engine();
    let (a_file, a) = file_of(1 << 20, 1);
    let (b_file, b) = file_of(1 << 20, 2);
    let (w_file, _) = file_of(64 << 10, 3);
    let ha = FileHandle::open(a_file.path(), "r").unwrap();
    let hb = FileHandle::open(b_file.path(), "r").unwrap();
    let hw = FileHandle::open(w_file.path(), "r+").unwrap();
    // Two endpoints made of one handle (and of a clone of it) are one file: one group.
    let (ra, ra_again) = (
        ha.endpoint(Direction::Read),
        ha.clone().endpoint(Direction::Read),
    );
    let (rb, ww) = (hb.endpoint(Direction::Read), hw.endpoint(Direction::Write));
    let mut out_a = vec![0u8; 64 * 4096];
    let mut out_b = vec![0u8; 8 * 1000];
    let mut src = vec![0xC3u8; 3 * 512];
    let (oa, ob) = (
        OpBuffer::new(Buffer::host(&mut out_a)),
        OpBuffer::new(Buffer::host(&mut out_b)),
    );
    let os = OpBuffer::new(Buffer::host(&mut src));
    let mut ops = Vec::new();
    for i in 0..64usize {
        // Scattered in the file, in the buffer's order; interleaved with the other groups.
        let at = &[&ra, &ra_again][i % 2];
        ops.push(Op {
            endpoint: at,
            buffer: &oa,
            file_offset: ((i * 7919) % 250) as u64 * 4096,
            buf_offset: i * 4096,
            size: 4096,
        });
        if i % 8 == 3 {
            let k = i / 8;
            ops.push(Op {
                endpoint: &rb,
                buffer: &ob,
                file_offset: 12345 + k as u64 * 3000,
                buf_offset: k * 1000,
                size: 1000,
            });
        }
        if i % 20 == 5 {
            let k = i / 20;
            ops.push(Op {
                endpoint: &ww,
                buffer: &os,
                file_offset: 9000 + k as u64 * 1000,
                buf_offset: k * 512,
                size: 512,
            });
        }
    }
    let settings = engine.settings();
    // SAFETY: every buffer outlives the waits below and is not touched meanwhile.
    let sub = unsafe { submit(&engine, &ops, &settings) }.unwrap();
    assert_eq!(sub.len(), ops.len());
    let sizes: Vec<(usize, usize)> = sub
        .groups()
        .iter()
        .map(|g| (g.ops.len(), g.report.ranges))
        .collect();
    assert_eq!(sizes, [(64, 64), (8, 8), (3, 3)]);
    for (i, op) in ops.iter().enumerate() {
        let g = &sub.groups()[sub.group_of(i)];
        assert!(g.ops.contains(&i));
        match sub.wait(i) {
            Outcome::Complete(n) => assert_eq!(n, op.size),
            other => panic!("operation {i}: {other:?}"),
        }
        assert!(matches!(sub.outcome(i), Outcome::Complete(_)));
    }
    assert_eq!(sub.groups()[0].future.wait().unwrap(), 64 * 4096);
    for (i, chunk) in out_a.chunks(4096).enumerate() {
        let at = (i * 7919) % 250 * 4096;
        assert_eq!(chunk, &a[at..at + 4096], "operation {i}");
    }
    for (k, chunk) in out_b.chunks(1000).enumerate() {
        let at = 12345 + k * 3000;
        assert_eq!(chunk, &b[at..at + 1000]);
    }
    let written = std::fs::read(w_file.path()).unwrap();
    assert!(written[9000..9000 + 3 * 1000]
        .chunks(1000)
        .all(|c| c[..512].iter().all(|&x| x == 0xC3)));
    assert_eq!(engine.in_flight(), 0);
    // No operation: no request.
    // SAFETY: nothing is read or written.
    let none = unsafe { submit(&engine, &[], &settings) }.unwrap();
    assert!(none.is_empty() && none.groups().is_empty());
}

#[test]
fn a_refused_op_refuses_the_whole_submission_before_any_byte_moves() {
    let engine = engine();
    let (r_file, _) = file_of(64 << 10, 4);
    let (w_file, before) = file_of(64 << 10, 5);
    let hr = FileHandle::open(r_file.path(), "r").unwrap();
    let hw = FileHandle::open(w_file.path(), "r+").unwrap();
    let (r, w) = (hr.endpoint(Direction::Read), hw.endpoint(Direction::Write));
    let on_ro = hr.endpoint(Direction::Write);
    let r2_handle = FileHandle::open(w_file.path(), "r").unwrap();
    let r2 = r2_handle.endpoint(Direction::Read);
    let mut src = vec![0xEEu8; 32 << 10];
    let mut out = vec![0x5Au8; 8192];
    let os = OpBuffer::new(Buffer::host(&mut src));
    let oo = OpBuffer::new(Buffer::host(&mut out));
    let op = |endpoint, buffer, file_offset, buf_offset, size| Op {
        endpoint,
        buffer,
        file_offset,
        buf_offset,
        size,
    };
    // A large write first: whatever refuses the submission comes after it.
    let write = op(&w, &os, 0, 0, 32 << 10);
    let cases: [(&str, Op<'_>, Op<'_>); 5] = [
        (
            "past the end",
            op(&r, &oo, 0, 0, 4096),
            op(&r, &oo, 63 << 10, 4096, 4096),
        ),
        (
            "runs past the buffer",
            op(&r, &oo, 0, 0, 4096),
            op(&r, &oo, 0, 8000, 4096),
        ),
        (
            "ranges overlap in the buffer",
            op(&r, &oo, 0, 0, 4096),
            op(&r, &oo, 8192, 4000, 100),
        ),
        (
            "of the batch overlap in the buffer",
            op(&r, &oo, 0, 0, 4096),
            op(&r2, &oo, 0, 4000, 100),
        ),
        (
            "not open for writing",
            op(&r, &oo, 0, 0, 4096),
            op(&on_ro, &os, 0, 0, 10),
        ),
    ];
    let settings = engine.settings();
    for (what, first, bad) in cases {
        let ops = [write, first, bad];
        // SAFETY: the buffers outlive the call; a refused submission starts nothing.
        let refused = unsafe { submit(&engine, &ops, &settings) };
        let e = match refused {
            Err(e) => e,
            Ok(_) => panic!("{what}: the submission started"),
        };
        let text = e.to_string();
        match what {
            "past the end" => assert!(matches!(e, Error::UnexpectedEof { .. }), "{e:?}"),
            "not open for writing" => assert!(matches!(e, Error::NotWritable { .. }), "{e:?}"),
            _ => assert!(text.contains(what), "{what}: {text}"),
        }
        assert_eq!(engine.in_flight(), 0);
        assert_eq!(std::fs::read(w_file.path()).unwrap(), before, "{what}");
        assert!(out.iter().all(|&x| x == 0x5A), "{what}");
    }
}

#[test]
fn writes_to_the_same_bytes_of_one_file_are_refused_whatever_their_buffers_and_handles() {
    let engine = engine();
    let (file, before) = file_of(64 << 10, 6);
    let (other_file, other_before) = file_of(64 << 10, 7);
    // Two handles of one file (one inode) and a third file.
    let (h1, h2) = (
        FileHandle::open(file.path(), "r+").unwrap(),
        FileHandle::open(file.path(), "r+").unwrap(),
    );
    let h3 = FileHandle::open(other_file.path(), "r+").unwrap();
    let (w1, w2, w3) = (
        h1.endpoint(Direction::Write),
        h2.endpoint(Direction::Write),
        h3.endpoint(Direction::Write),
    );
    let mut a = vec![0xAAu8; 8192];
    let mut b = vec![0xBBu8; 8192];
    let (oa, ob) = (
        OpBuffer::new(Buffer::host(&mut a)),
        OpBuffer::new(Buffer::host(&mut b)),
    );
    let op = |endpoint, buffer, file_offset, size| Op {
        endpoint,
        buffer,
        file_offset,
        buf_offset: 0,
        size,
    };
    let settings = engine.settings();
    let cases: [(&str, Vec<Op<'_>>); 3] = [
        (
            "operations 0 and 2 of the batch write the same bytes of",
            vec![
                op(&w1, &oa, 0, 8192),
                op(&w3, &ob, 0, 8192),
                op(&w1, &ob, 4096, 8192),
            ],
        ),
        (
            "operations 1 and 2 of the batch write the same bytes of",
            vec![
                op(&w3, &oa, 0, 100),
                op(&w1, &oa, 1000, 100),
                op(&w2, &ob, 1050, 100),
            ],
        ),
        (
            "operations 0 and 1 of the batch write the same bytes of",
            vec![op(&w2, &ob, 9000, 100), op(&w2, &oa, 9000, 1)],
        ),
    ];
    let ranges = [
        "(bytes 4096..8192)",
        "(bytes 1050..1100)",
        "(bytes 9000..9001)",
    ];
    for ((what, ops), range) in cases.into_iter().zip(ranges) {
        // SAFETY: the buffers outlive the call; a refused submission starts nothing.
        let refused = unsafe { submit(&engine, &ops, &settings) };
        match refused {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains(what) && m.contains(range), "{m}");
                assert!(m.contains(&*file.path().to_string_lossy()), "{m}");
            }
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: the submission started"),
        }
        assert_eq!(engine.in_flight(), 0);
        assert_eq!(std::fs::read(file.path()).unwrap(), before, "{what}");
        assert_eq!(std::fs::read(other_file.path()).unwrap(), other_before);
    }
    // Adjacent writes through the two handles, the same bytes of two files, and a read of the
    // written bytes run.
    let r = h1.endpoint(Direction::Read);
    let mut out = vec![0u8; 100];
    let oo = OpBuffer::new(Buffer::host(&mut out));
    let ops = [
        op(&w1, &oa, 0, 4096),
        op(&w2, &ob, 4096, 4096),
        op(&w3, &ob, 0, 8192),
        op(&r, &oo, 100, 100),
    ];
    // SAFETY: the buffers outlive the waits below.
    let sub = unsafe { submit(&engine, &ops, &settings) }.unwrap();
    for i in 0..ops.len() {
        assert!(matches!(sub.wait(i), Outcome::Complete(_)), "{i}");
    }
    let now = std::fs::read(file.path()).unwrap();
    assert!(now[..4096].iter().all(|&x| x == 0xAA));
    assert!(now[4096..8192].iter().all(|&x| x == 0xBB));
    assert_eq!(now[8192..], before[8192..]);
}

#[test]
fn an_operation_s_outcome_is_its_group_s_result() {
    let ok: Result<usize> = Ok(3 * 4096);
    assert!(matches!(Outcome::of(4096, &ok), Outcome::Complete(4096)));
    assert!(matches!(
        Outcome::of(4096, &Err(Error::Cancelled)),
        Outcome::Cancelled
    ));
    let io = std::io::Error::from_raw_os_error(libc::EIO);
    let failed = Error::os(Call::Read, std::path::Path::new("f.bin"), 0, 4096, io);
    let tasks = Error::TasksFailed {
        first: Box::new(failed.clone()),
        others: Vec::new(),
        not_shown: 0,
        bytes_done: 4096,
    };
    for e in [failed, tasks] {
        let outcome = Outcome::of(4096, &Err(e));
        assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
        assert_eq!(outcome.errno(), Some(libc::EIO));
    }
    assert_eq!(Outcome::Running.errno(), None);
}
