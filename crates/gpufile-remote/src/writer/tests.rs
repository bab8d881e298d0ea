//! The writer's unit tests: tiling, part limits, S3 answers, a close under a stop flag.

use super::multipart::{form, s3_error, xml_text};
use super::tiling::{insert_range, remove_range};
use super::*;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

#[test]
fn part_size_rises_to_fit_ten_thousand_parts() {
    assert_eq!(part_size_for(16 << 20, None), 16 << 20);
    assert_eq!(part_size_for(1, None), S3_MIN_PART);
    assert_eq!(part_size_for(16 << 20, Some(1 << 30)), 16 << 20);
    let big = 1u64 << 40; // 1 TiB: 10,000 parts of at least 105 MiB
    let p = part_size_for(16 << 20, Some(big));
    assert!(p * S3_MAX_PARTS >= big && p % (1 << 20) == 0, "{p}");
    assert_eq!(part_size_for(16 << 20, Some(u64::MAX)), S3_MAX_PART);
}

#[test]
fn range_sets_merge_and_split() {
    let mut s = BTreeMap::new();
    insert_range(&mut s, 10, 20);
    insert_range(&mut s, 0, 10);
    insert_range(&mut s, 30, 40);
    assert_eq!(
        s.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(),
        [(0, 20), (30, 40)]
    );
    insert_range(&mut s, 20, 30);
    assert_eq!(
        s.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(),
        [(0, 40)]
    );
    remove_range(&mut s, 5, 15);
    assert_eq!(
        s.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(),
        [(0, 5), (15, 40)]
    );
}

#[test]
fn s3_answers_are_read_without_their_other_fields() {
    let body = "<Error><Code>AccessDenied</Code><Message>Access Denied</Message>\
                <AWSAccessKeyId>AKIDSECRET</AWSAccessKeyId></Error>";
    let shown = s3_error(body);
    assert_eq!(shown, ": AccessDenied: Access Denied");
    assert_eq!(
        xml_text("<R><UploadId>a&amp;b</UploadId></R>", "UploadId").as_deref(),
        Some("a&b")
    );
    assert_eq!(form(&[("uploadId", "a+b/c=")]), "uploadId=a%2Bb%2Fc%3D");
}

fn writer(part: u64) -> RemoteWriter {
    let mut w = RemoteWriter::create_http("http://127.0.0.1:9/x").unwrap();
    w.part_size = part;
    w
}

fn r(file_offset: u64, len: usize) -> Range {
    Range {
        file_offset,
        len,
        buf_offset: 0,
    }
}

#[test]
fn overlaps_are_refused_before_any_byte_and_gaps_at_close() {
    let w = writer(u64::MAX);
    w.reserve(&[r(0, 10)]).unwrap();
    let e = w.reserve(&[r(5, 10)]).unwrap_err();
    assert_eq!(RemoteError::of(&e).unwrap().kind, RemoteFailure::NotTiled);
    assert!(
        e.to_string().contains("bytes 5-14 overlaps bytes 0-9"),
        "{e}"
    );
    // Nothing of the refused request was reserved.
    w.reserve(&[r(10, 5)]).unwrap();
    let e = w.reserve(&[r(20, 4), r(22, 4)]).unwrap_err();
    assert!(e.to_string().contains("overlaps"), "{e}");
    w.reserve(&[r(20, 4)]).unwrap();
    let st = lock(&w.state);
    let gap = w.gap(&st).unwrap();
    assert!(
        gap.to_string().contains("bytes 15-19 were never written"),
        "{gap}"
    );
}

#[test]
fn more_than_ten_thousand_parts_are_refused() {
    let w = writer(S3_MIN_PART);
    let e = w.reserve(&[r(S3_MIN_PART * S3_MAX_PARTS, 1)]).unwrap_err();
    assert_eq!(RemoteError::of(&e).unwrap().kind, RemoteFailure::PartLimit);
    w.reserve(&[r(S3_MIN_PART * S3_MAX_PARTS - 1, 1)]).unwrap();
    w.release(&[r(S3_MIN_PART * S3_MAX_PARTS - 1, 1)]);
    assert_eq!(w.nbytes(), 0);
}

/// A server that reads the `PUT` and never answers: a close under a stop flag ends soon
/// after the flag is set (not after `http_timeout` times `http_max_attempts`), as
/// [`RemoteFailure::Interrupted`], and the writer is not reported as made.
#[test]
fn a_close_stops_soon_after_its_flag_is_set_however_long_the_server_stalls() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/o.bin", listener.local_addr().unwrap());
    let (got, arrived) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !seen.ends_with(b"\r\n\r\nabc") {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = got.send(());
        std::thread::sleep(Duration::from_secs(120)); // the connection open, unanswered
    });
    let w = RemoteWriter::create_http(&url).unwrap();
    w.reserve(&[r(0, 3)]).unwrap();
    let (progress, request_stop) = (AtomicU64::new(0), StopFlag::default());
    let call = IoContext {
        progress: &progress,
        direct: false,
        direct_uncached: false,
        stop: &request_stop,
    };
    w.write_at(b"abc", 0, call).unwrap();
    let stop = StopFlag::default();
    let (e, took) = std::thread::scope(|s| {
        let closing = s.spawn(|| w.close_with_stop(Some(&stop)));
        arrived
            .recv_timeout(Duration::from_secs(30))
            .expect("the PUT never arrived");
        let set = Instant::now();
        stop.set();
        (closing.join().unwrap().unwrap_err(), set.elapsed())
    });
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        RemoteError::of(&e).unwrap().kind,
        RemoteFailure::Interrupted
    );
    assert!(
        e.to_string().contains("the object is not known to be made"),
        "{e}"
    );
    assert!(w.closed());
    assert_eq!(w.close().unwrap_err().to_string(), e.to_string());
}
