//! Ranges and whole bodies: `Range` headers and what answers them (a `206` with its
//! `Content-Range`, a `200` carrying the range, or the whole object from a server that ignores
//! `Range`, served from and kept open for the read that continues it), and the object's size by
//! `HEAD` or by a one-byte range.

use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};

use gpufile::{Error, Result};
use ureq::http::Response;
use ureq::Body;

use super::client::{Client, WholeBody};
use super::request::{header_str, header_u64, lock, Target};
use super::retry::{classify, Attempt, Policy};
use super::transport::Watch;
use crate::error::RemoteFailure;

/// The reason of a whole-object read, in path reports.
pub const WHOLE_BODY_REASON: &str = "server ignores Range: one whole-body GET";

/// What is known of a server's byte ranges (a [`Counters::ranges`](super::client::Counters::ranges)
/// value; 0 while unknown).
const RANGES_HONOURED: u8 = 1;
const RANGES_IGNORED: u8 = 2;

/// Whether the server answers `Range` requests with the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeSupport {
    /// No answer has said so yet (a HEAD without `Accept-Ranges`, or `nbytes` given).
    Unknown,
    /// A `206` answer, or `Accept-Ranges: bytes`.
    Honoured,
    /// A `200` answer with the whole object to a ranged GET, or `Accept-Ranges: none`.
    Ignored,
}

impl Client {
    /// What the server's answers have said of byte ranges so far.
    pub fn range_support(&self) -> RangeSupport {
        match self.counters.ranges.load(Ordering::Relaxed) {
            RANGES_HONOURED => RangeSupport::Honoured,
            RANGES_IGNORED => RangeSupport::Ignored,
            _ => RangeSupport::Unknown,
        }
    }

    /// Records what an answer said of ranges.
    pub(crate) fn set_range_support(&self, support: RangeSupport) {
        let v = match support {
            RangeSupport::Unknown => return,
            RangeSupport::Honoured => RANGES_HONOURED,
            RangeSupport::Ignored => RANGES_IGNORED,
        };
        self.counters.ranges.store(v, Ordering::Relaxed);
    }

    /// `HEAD`: the `Content-Length` of the object.
    pub fn head_size(&self, t: &Target<'_>) -> Result<u64> {
        self.retrying(t, "HEAD", |p| {
            let resp = self.send(t, "HEAD", p)?;
            match header_str(&resp, "accept-ranges").map(|v| v.trim().to_ascii_lowercase()) {
                Some(v) if v == "none" => self.set_range_support(RangeSupport::Ignored),
                Some(v) if v.split(',').any(|u| u.trim() == "bytes") => {
                    self.set_range_support(RangeSupport::Honoured)
                }
                _ => {}
            }
            header_u64(&resp, "content-length").ok_or_else(|| {
                Attempt::Fail(t.error(
                    RemoteFailure::BadResponse,
                    "HEAD: the server sent no Content-Length, so the size is unknown (pass nbytes)".into(),
                ))
            })
        })
    }

    /// `GET` with `Range: bytes=0-0`: the size from `Content-Range: bytes 0-0/<size>`.
    pub fn range_probe_size(&self, t: &Target<'_>) -> Result<u64> {
        self.retrying(t, "GET", |p| {
            let mut resp = self.send(t, "GET", p)?;
            let status = ranged_status(&resp);
            self.set_range_support(match status {
                206 => RangeSupport::Honoured,
                200 => RangeSupport::Ignored,
                _ => RangeSupport::Unknown,
            });
            let size = if status == 206 {
                let cr = header_str(&resp, "content-range").unwrap_or_default();
                match cr.rsplit_once('/').map(|(_, s)| s.trim().parse::<u64>()) {
                    Some(Ok(n)) => n,
                    _ => {
                        return Err(Attempt::Fail(t.error(
                            RemoteFailure::BadResponse,
                            format!("File size information missing on the server side (Content-Range: {cr:?})"),
                        )))
                    }
                }
            } else {
                // The whole object came back: its length is the size; the body is not read.
                header_u64(&resp, "content-length").ok_or_else(|| {
                    Attempt::Fail(t.error(
                        RemoteFailure::BadResponse,
                        "the server sent neither Content-Range nor Content-Length".into(),
                    ))
                })?
            };
            if status == 206 {
                // Read the one byte and the body's end, so that the connection is reused.
                // (At most two reads: a server that sends more is not waited for.)
                let mut one = [0u8; 1];
                let mut reader = resp.body_mut().as_reader();
                for _ in 0..2 {
                    if !matches!(reader.read(&mut one), Ok(n) if n > 0) {
                        break;
                    }
                }
            }
            Ok(size)
        })
    }

    /// `GET` of `dst.len()` bytes at `offset` into `dst`. With a range (`t.range`), a `206`
    /// must carry exactly that range (`Content-Range` start, end and total); a `200` is the
    /// whole object, which serves the range too: the bytes before `offset` are read through
    /// `dst` (overwritten, nothing else kept), then `dst.len()` bytes; the rest of the body is
    /// kept open for a read that continues there (the next chunk of a read into GPU memory).
    /// Without a range, the URL itself selects the bytes (WebHDFS `op=OPEN&offset&length`).
    pub fn get_into(
        &self,
        t: &Target<'_>,
        offset: u64,
        dst: &mut [u8],
        progress: &AtomicU64,
    ) -> Result<()> {
        let len = dst.len();
        if t.range.is_some() && self.range_support() == RangeSupport::Ignored {
            if let Some(done) = self.continue_whole_body(t, offset, dst, progress) {
                return done;
            }
        }
        self.retrying(t, "GET", |p| {
            let resp = self.send(t, "GET", p)?;
            let status = if t.range.is_some() { ranged_status(&resp) } else { resp.status().as_u16() };
            let announced = header_u64(&resp, "content-length");
            refuse_encoded(t, "GET", &resp)?;
            let no_ranges = |n: Option<u64>| {
                Attempt::Fail(t.error(
                    RemoteFailure::NoRangeSupport,
                    format!(
                        "{}: the server answered {status} with {} bytes instead of the range; \
                         maybe the server doesn't support file ranges?",
                        t.what("GET"),
                        n.map_or("an unknown number of".into(), |n| n.to_string())
                    ),
                ))
            };
            // A whole object answering a ranged GET: the range is served from it.
            let whole = t.range.is_some() && status == 200;
            let skip = match (t.range.is_some(), status) {
                (true, 206) => {
                    self.set_range_support(RangeSupport::Honoured);
                    check_content_range(t, &resp, offset, len)?;
                    0
                }
                (true, 200) => {
                    self.set_range_support(RangeSupport::Ignored);
                    // The whole object: it serves the range unless it is too short for it.
                    if announced.is_some_and(|n| n < offset + len as u64) {
                        return Err(no_ranges(announced));
                    }
                    offset
                }
                (true, _) => return Err(no_ranges(announced)),
                (false, 200) => 0,
                (false, _) => {
                    return Err(Attempt::Fail(t.error(
                        RemoteFailure::BadResponse,
                        format!("{}: unexpected HTTP status {status}", t.what("GET")),
                    )))
                }
            };
            match announced {
                _ if whole => {}
                Some(n) if n > len as u64 => {
                    return Err(Attempt::Fail(t.error(
                        RemoteFailure::NoRangeSupport,
                        format!(
                            "{}: the server announced {n} bytes for a {len}-byte range; \
                             maybe the server doesn't support file ranges?",
                            t.what("GET")
                        ),
                    )))
                }
                Some(n) if n < len as u64 => {
                    return Err(Attempt::Fail(t.error(
                        RemoteFailure::ShortBody,
                        format!("{}: the server announced {n} of the {len} bytes asked for", t.what("GET")),
                    )))
                }
                _ => {}
            }
            let mut reader = resp.into_body().into_reader();
            // The whole object's bytes before the range, through `dst` (not counted as read).
            let mut skipped = 0u64;
            while skipped < skip {
                let n = (skip - skipped).min(len as u64) as usize;
                fill(&mut reader, &mut dst[..n], t, p, |_| {}).map_err(|(e, _)| e)?;
                skipped += n as u64;
            }
            let counted = |n: usize| {
                progress.fetch_add(n as u64, Ordering::Relaxed);
                self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
            };
            if let Err((e, filled)) = fill(&mut reader, dst, t, p, counted) {
                // A retry reads the range again: take back what this attempt counted.
                progress.fetch_sub(filled as u64, Ordering::Relaxed);
                return Err(e);
            }
            let end = offset + len as u64;
            if status == 206 || t.range.is_none() {
                // One read past the range: ureq hands a connection back to the agent's pool only
                // once a read has returned the body's end (without it, every range opens a new
                // connection: docs/performance.md, "Remote requests"). A length-delimited body
                // answers 0 at once; a longer chunked body means the range was ignored.
                let mut extra = [0u8; 1];
                if matches!(reader.read(&mut extra), Ok(n) if n > 0) {
                    return Err(Attempt::Fail(t.error(
                        RemoteFailure::NoRangeSupport,
                        format!(
                            "{}: the body is longer than the range; maybe the server doesn't support file ranges?",
                            t.what("GET")
                        ),
                    )));
                }
            } else if announced == Some(end) {
                // The whole object ends with the range: its end lets the connection be reused.
                let _ = reader.read(&mut [0u8; 1]);
            } else {
                // The rest of the whole object waits for the read that continues it.
                *lock(&self.stream) = Some(WholeBody {
                    url: t.url.to_owned(),
                    next: end,
                    end: announced,
                    reader,
                });
            }
            Ok(())
        })
    }

    /// Serves `dst.len()` bytes at `offset` from the whole-object body left open by an earlier
    /// read that ended there; `None` where there is none (or it fails: a new GET then asks).
    fn continue_whole_body(
        &self,
        t: &Target<'_>,
        offset: u64,
        dst: &mut [u8],
        progress: &AtomicU64,
    ) -> Option<Result<()>> {
        let mut body = lock(&self.stream)
            .take()
            .filter(|b| b.url == t.url && b.next == offset)?;
        let policy = Policy::current().ok()?;
        let _watch = Watch::new(t.stop);
        let counted = |n: usize| {
            progress.fetch_add(n as u64, Ordering::Relaxed);
            self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        };
        match fill(&mut body.reader, dst, t, &policy, counted) {
            Ok(()) => {
                body.next += dst.len() as u64;
                if body.end.is_none_or(|e| body.next < e) {
                    *lock(&self.stream) = Some(body);
                }
                Some(Ok(()))
            }
            Err((_, filled)) => {
                progress.fetch_sub(filled as u64, Ordering::Relaxed);
                t.stopped().then_some(Err(Error::Cancelled))
            }
        }
    }
}

/// Reads `dst.len()` bytes of a body into `dst`, telling `counted` of each read; or the
/// attempt's end with the bytes read so far.
fn fill(
    reader: &mut impl Read,
    dst: &mut [u8],
    t: &Target<'_>,
    p: &Policy,
    mut counted: impl FnMut(usize),
) -> std::result::Result<(), (Attempt, usize)> {
    let len = dst.len();
    let ended = |filled: usize, extra: String| {
        Attempt::Fail(t.error(
            RemoteFailure::ShortBody,
            format!(
                "{}: the body ended after {filled} of {len} bytes{extra}",
                t.what("GET")
            ),
        ))
    };
    let mut filled = 0;
    while filled < len {
        if t.stopped() {
            return Err((Attempt::Fail(Error::Cancelled), filled));
        }
        match reader.read(&mut dst[filled..]) {
            Ok(0) => return Err((ended(filled, String::new()), filled)),
            Ok(n) => {
                filled += n;
                counted(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let attempt = match ureq::Error::from(e) {
                    // A connection closed or reset mid-body.
                    ureq::Error::Io(io) if io.kind() != io::ErrorKind::TimedOut => {
                        ended(filled, format!(" ({io})"))
                    }
                    other => classify(t, "GET", other, p),
                };
                return Err((attempt, filled));
            }
        }
    }
    Ok(())
}

/// Refuses a body sent with a `Content-Encoding` (gzip, br, ...): its bytes are not the object's
/// (ureq decodes nothing without its `gzip`/`brotli` features, and gpufile asks for `identity`).
fn refuse_encoded(
    t: &Target<'_>,
    method: &str,
    resp: &Response<Body>,
) -> std::result::Result<(), Attempt> {
    match header_str(resp, "content-encoding") {
        Some(e) if !e.trim().is_empty() && !e.trim().eq_ignore_ascii_case("identity") => {
            Err(Attempt::Fail(t.error(
                RemoteFailure::BadResponse,
                format!(
                    "{}: the server sent the body with Content-Encoding: {}, not the stored bytes \
                     (gpufile asks for Accept-Encoding: identity and decodes no body)",
                    t.what(method),
                    e.trim()
                ),
            )))
        }
        _ => Ok(()),
    }
}

/// `Content-Range: bytes <start>-<end>/<total or *>` → (start, end, total).
fn parse_content_range(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    let total = match total.trim() {
        "*" => None,
        n => Some(n.parse::<u64>().ok()?),
    };
    (a <= b && total.is_none_or(|n| b < n)).then_some((a, b, total))
}

/// The status of an answer to a ranged `GET`, where a `200` that carries a `Content-Range`
/// counts as the `206` it means: some S3-compatible servers (rclone's `serve s3`, built on
/// gofakes3) send the range asked for with status 200 and its `Content-Range`. The range is then
/// checked as for a `206`; a `200` without one, or with one of the whole object, is the whole
/// object.
fn ranged_status(resp: &Response<Body>) -> u16 {
    ranged_status_of(
        resp.status().as_u16(),
        header_str(resp, "content-range").as_deref(),
    )
}

fn ranged_status_of(status: u16, content_range: Option<&str>) -> u16 {
    let partial = content_range
        .and_then(parse_content_range)
        .is_some_and(|(a, b, total)| !(a == 0 && total == Some(b + 1)));
    if status == 200 && partial {
        206
    } else {
        status
    }
}

/// A `206` answer must carry the range asked for, of an object of the size known.
fn check_content_range(
    t: &Target<'_>,
    resp: &Response<Body>,
    offset: u64,
    len: usize,
) -> std::result::Result<(), Attempt> {
    let cr = header_str(resp, "content-range").unwrap_or_default();
    let end = offset + len as u64 - 1;
    let fits = parse_content_range(&cr).is_some_and(|(a, b, total)| {
        a == offset && b == end && (total.is_none() || t.size.is_none() || total == t.size)
    });
    if fits {
        return Ok(());
    }
    let size = t.size.map_or("<size>".to_owned(), |n| n.to_string());
    Err(Attempt::Fail(t.error(
        RemoteFailure::BadResponse,
        format!(
            "{}: the server answered with Content-Range {cr:?}, not \"bytes {offset}-{end}/{size}\"",
            t.what("GET")
        ),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_200_with_the_range_s_content_range_counts_as_206() {
        assert_eq!(ranged_status_of(200, Some("bytes 100-199/1000")), 206);
        assert_eq!(ranged_status_of(200, Some("bytes 5-9/*")), 206);
        // The whole object, or no Content-Range: a whole body.
        assert_eq!(ranged_status_of(200, Some("bytes 0-999/1000")), 200);
        assert_eq!(ranged_status_of(200, None), 200);
        assert_eq!(ranged_status_of(200, Some("nonsense")), 200);
        assert_eq!(ranged_status_of(206, Some("bytes 0-9/10")), 206);
        assert_eq!(ranged_status_of(416, Some("bytes */10")), 416);
    }

    #[test]
    fn content_ranges_parse_start_end_and_total() {
        assert_eq!(
            parse_content_range("bytes 10-19/100"),
            Some((10, 19, Some(100)))
        );
        assert_eq!(parse_content_range(" bytes 0-0/*"), Some((0, 0, None)));
        for bad in [
            "bytes 10-19",
            "bytes 19-10/100",
            "bytes 10-100/100",
            "bytes 10-19/x",
            "items 10-19/100",
            "bytes -19/100",
            "",
        ] {
            assert_eq!(parse_content_range(bad), None, "{bad}");
        }
    }
}
