//! Many requests started as one ([`Engine::submit_batch`], [`Engine::submit_each`]): every
//! request is checked and planned before the first starts, so a refused one leaves every buffer
//! and file as it was.

use super::shared_writes::WriteSpans;
use super::{Engine, Prepared};
use crate::config::Settings;
use crate::engine::PathReport;
use crate::error::{Error, Result};
use crate::future::IoFuture;
use crate::plan;
use crate::request::{Buffer, Direction, Request};
use crate::source::Endpoint;

impl Engine {
    /// Reads or writes many files as one stream of requests: every request is checked and
    /// planned before any starts, then all are queued back to back, so the workers go from one
    /// file to the next with no gap; the future ends when all have, with the total bytes (or the
    /// first error). Where the batch keeps every worker busy its requests run as whole
    /// `task_size` tasks (`plan::batch_keeps_tasks_whole`).
    ///
    /// A request refused (past the end of its file, reads whose destinations overlap, ...)
    /// refuses the batch before any byte moves.
    ///
    /// # Safety
    /// As for [`Engine::submit`], for every request's buffer.
    pub unsafe fn submit_batch(
        &self,
        batch: &[(Endpoint, Request)],
        settings: &Settings,
    ) -> Result<IoFuture> {
        let sizes = batch.iter().map(|(_, r)| (r.len(), r.task_size));
        let whole = plan::batch_keeps_tasks_whole(sizes, settings);
        let requests = batch.iter().map(|(endpoint, req)| (endpoint, req.clone()));
        // SAFETY: the caller's contract.
        let started = unsafe { self.start_all(requests, settings, false, whole) }?;
        Ok(IoFuture::all(started.into_iter().map(|(f, _)| f).collect()))
    }

    /// Starts every request of `batch`, each with its own future and what its plan decided,
    /// once all are checked and planned: a refused one (its error is returned) starts none.
    ///
    /// # Safety
    /// As for [`Engine::submit`], for every request's buffer.
    pub unsafe fn submit_each(
        &self,
        batch: &[(Endpoint, Request)],
        settings: &Settings,
    ) -> Result<Vec<(IoFuture, PathReport)>> {
        let requests = batch.iter().map(|(endpoint, req)| (endpoint, req.clone()));
        // SAFETY: the caller's contract.
        let started = unsafe { self.start_all(requests, settings, true, false) }?;
        started
            .into_iter()
            .map(|(f, report)| {
                let report = report.ok_or_else(|| Error::InvalidArgument("no report made".into()));
                Ok((f, report?))
            })
            .collect()
    }

    /// Prepares every request, then launches them in order; `whole`: the batch keeps every
    /// worker busy with whole tasks ([`plan::batch_keeps_tasks_whole`]).
    ///
    /// # Safety
    /// As for [`Engine::submit`], for every request's buffer.
    unsafe fn start_all<'a>(
        &self,
        requests: impl Iterator<Item = (&'a Endpoint, Request)>,
        settings: &Settings,
        report: bool,
        whole: bool,
    ) -> Result<Vec<(IoFuture, Option<PathReport>)>> {
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        let mut prepared: Vec<Prepared> = Vec::new();
        for (i, (endpoint, req)) in requests.enumerate() {
            match req.direction {
                Direction::Read => reads.push((i, req.buffer, req.ranges.clone())),
                Direction::Write => writes.push((i, endpoint, req.ranges.clone())),
            }
            prepared.push(self.prepare(endpoint, req, settings, report, i == 0, whole)?);
        }
        no_shared_destination(&reads)?;
        no_shared_file_bytes(&writes)?;
        let mut started = Vec::with_capacity(prepared.len());
        for p in prepared {
            // SAFETY: the caller's contract.
            match unsafe { self.launch(p, settings) } {
                Ok(s) => started.push(s),
                Err(e) => {
                    // A launch fails only where the machine refuses (no worker thread, a stream
                    // that cannot be marked): what started is stopped and waited for, so no
                    // worker uses a buffer once the caller has the error.
                    let all = IoFuture::all(started.into_iter().map(|(f, _)| f).collect());
                    all.cancel();
                    let _ended = all.wait();
                    return Err(e);
                }
            }
        }
        Ok(started)
    }
}

/// Refuses writes of different requests that land on the same bytes of one file (two handles
/// of one file too): which lands last would not be defined, as [`crate::Ranges::check`] refuses
/// such writes within one request.
fn no_shared_file_bytes(writes: &[(usize, &Endpoint, crate::Ranges)]) -> Result<()> {
    if writes.len() < 2 {
        return Ok(());
    }
    let mut spans = WriteSpans::default();
    for (i, endpoint, ranges) in writes {
        spans.add(endpoint, *i, ranges.as_slice());
    }
    match spans.first_shared() {
        None => Ok(()),
        Some(shared) => {
            let file = writes
                .iter()
                .find(|(i, ..)| *i == shared.a)
                .map(|(_, e, _)| e.describe())
                .unwrap_or_default();
            Err(shared.error("requests", &file))
        }
    }
}

/// Refuses reads of different requests that land on the same bytes (which lands last would not
/// be defined), as [`crate::Ranges::check`] refuses them within one request. Addresses of host
/// and device memory share one space (CUDA's unified addressing), so both are compared alike.
fn no_shared_destination(reads: &[(usize, Buffer, crate::Ranges)]) -> Result<()> {
    if reads.len() < 2 {
        return Ok(());
    }
    let mut spans: Vec<(u64, u64, usize)> = Vec::new();
    for (i, buffer, ranges) in reads {
        let base = match *buffer {
            Buffer::Host { ptr, .. } => ptr as usize as u64,
            Buffer::Device { addr, .. } => addr,
        };
        let at = |r: &crate::request::Range| base + r.buf_offset as u64;
        spans.extend(
            ranges
                .as_slice()
                .iter()
                .filter(|r| r.len > 0)
                .map(|r| (at(r), at(r) + r.len as u64, *i)),
        );
    }
    spans.sort_unstable();
    // The span reaching furthest so far: one that overlaps a later span is of another request
    // (each request's own ranges were checked already).
    let mut reach = spans.first().copied();
    for &s in spans.iter().skip(1) {
        let Some(r) = reach else { break };
        if s.0 < r.1 && s.2 != r.2 {
            let (a, b) = if r.2 < s.2 { (r, s) } else { (s, r) };
            return Err(Error::InvalidArgument(format!(
                "requests {} and {} of the batch overlap in the buffer: reads may not share \
                 destination bytes ({} bytes at {:#x} and {} bytes at {:#x})",
                a.2,
                b.2,
                a.1 - a.0,
                a.0,
                b.1 - b.0,
                b.0
            )));
        }
        if s.1 > r.1 {
            reach = Some(s);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config, FileHandle};

    /// A file of `len` zero bytes opened for writing, and an engine at the environment's
    /// defaults.
    fn zeros_and_engine(len: usize) -> (tempfile::NamedTempFile, Engine, FileHandle) {
        let file = tempfile::NamedTempFile::new().unwrap();
        file.as_file().set_len(len as u64).unwrap();
        let engine = Engine::new(config::State::from_env(|_| None).unwrap());
        let h = FileHandle::open(file.path(), "r+").unwrap();
        (file, engine, h)
    }

    #[test]
    fn a_refused_request_refuses_the_batch_before_any_byte_moves() {
        let len = 32 << 20;
        let (file, engine, h) = zeros_and_engine(len);
        let reader = FileHandle::open(file.path(), "r").unwrap();
        let mut data = vec![7u8; len];
        let mut small = vec![0u8; 16];
        let batch = [
            (
                h.endpoint(Direction::Write),
                Request::write(Buffer::host(&mut data), 0),
            ),
            // Past the end of the file: refused before the write starts.
            (
                reader.endpoint(Direction::Read),
                Request::read(Buffer::host(&mut small), len as u64),
            ),
        ];
        let settings = engine.settings();
        // SAFETY: both buffers outlive the call; on error no request may still run.
        let refused = unsafe { engine.submit_batch(&batch, &settings) };
        assert!(matches!(refused, Err(Error::UnexpectedEof { .. })));
        assert_eq!(engine.in_flight(), 0);
        assert!(std::fs::read(file.path()).unwrap().iter().all(|b| *b == 0));
        assert_eq!(small, [0u8; 16]);
    }

    #[test]
    fn reads_of_two_requests_into_the_same_bytes_are_refused() {
        let (file, engine, h) = zeros_and_engine(1 << 20);
        drop(h);
        let h = FileHandle::open(file.path(), "r").unwrap();
        let mut out = vec![0x5Au8; 3000];
        let base = out.as_mut_ptr();
        let part = |at: usize, len: usize| Buffer::Host {
            ptr: base.wrapping_add(at),
            len,
        };
        let at = |b: Buffer, offset: u64| (h.endpoint(Direction::Read), Request::read(b, offset));
        let settings = engine.settings();
        let overlapping = [
            at(part(0, 1000), 0),
            at(part(2000, 1000), 0),
            at(part(500, 1000), 4096),
        ];
        // SAFETY: `out` outlives the calls; a refused batch starts nothing.
        let refused = unsafe { engine.submit_batch(&overlapping, &settings) };
        match refused {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("requests 0 and 2 of the batch overlap"), "{m}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a batch of overlapping reads started"),
        }
        assert!(out.iter().all(|b| *b == 0x5A));
        // Adjacent destinations are fine, and so is one request's own destination.
        let adjacent = [at(part(0, 1000), 0), at(part(1000, 2000), 8)];
        // SAFETY: as above; waited for before `out` is read.
        let fut = unsafe { engine.submit_batch(&adjacent, &settings) }.unwrap();
        assert_eq!(fut.wait().unwrap(), 3000);
        assert!(out.iter().all(|b| *b == 0));
    }

    #[test]
    fn writes_of_two_requests_to_the_same_bytes_of_one_file_are_refused() {
        let (file, engine, h) = zeros_and_engine(1 << 20);
        let again = FileHandle::open(file.path(), "r+").unwrap();
        let mut a = vec![0xAAu8; 4096];
        let mut b = vec![0xBBu8; 4096];
        let settings = engine.settings();
        let batch = [
            (
                h.endpoint(Direction::Write),
                Request::write(Buffer::host(&mut a), 0),
            ),
            (
                h.endpoint(Direction::Write),
                Request::write(Buffer::host(&mut b), 8192),
            ),
            (
                again.endpoint(Direction::Write),
                Request::write(Buffer::host(&mut b), 2048),
            ),
        ];
        // SAFETY: the buffers outlive the call; a refused batch starts nothing.
        let refused = unsafe { engine.submit_batch(&batch, &settings) };
        match refused {
            Err(Error::InvalidArgument(m)) => assert!(
                m.contains("requests 0 and 2 of the batch write the same bytes of")
                    && m.contains("(bytes 2048..4096)"),
                "{m}"
            ),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a batch of overlapping writes started"),
        }
        assert_eq!(engine.in_flight(), 0);
        assert!(std::fs::read(file.path()).unwrap().iter().all(|b| *b == 0));
    }
}
