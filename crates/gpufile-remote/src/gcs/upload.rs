//! Writing a `gs://` object: GCS's resumable upload (JSON API), which both Google's service and
//! the fake-gcs-server emulator answer (the emulator has no XML multipart upload).
//!
//! `POST <endpoint>/upload/storage/v1/b/<bucket>/o?uploadType=resumable&name=<object>` with the
//! bearer token starts a session; its `Location` (the session URI) then takes the object's
//! chunks in order, `PUT` with `Content-Range: bytes a-b/*` (answered `308`), the last one with
//! the total (`bytes a-b/<size>`, or `bytes */<size>` with no bytes where every chunk was
//! whole). The session URI is itself the upload's credential (Google's docs: requests to it
//! need no `Authorization`), so the bearer token goes to the start request only, and the URI
//! is never shown. An abort is `DELETE` of the session URI (answered `499`).
//!
//! The writer's parts are chunks: whole parts (a multiple of 256 KiB, as GCS requires of every
//! chunk but the last) are sent as they complete, in order; a part that completes before the
//! ones ahead of it waits in memory until they are sent.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use gpufile::StopFlag;
use gpufile::{Error, Result};

use super::object::GcsObject;
use crate::error::{RemoteError, RemoteFailure};
use crate::http::client::Client;
use crate::http::request::Target;
use crate::http::sign::SignRequest;

/// GCS's chunk granularity: every chunk but the last is a multiple of it.
pub(crate) const CHUNK_UNIT: u64 = 256 << 10;

/// What a request of the upload needs from its writer.
pub(crate) struct Ctx<'a> {
    pub client: &'a Client,
    pub shown: &'a str,
    pub stop: Option<&'a StopFlag>,
    pub part_size: u64,
}

/// The session and the parts waiting for their turn.
#[derive(Default)]
struct Session {
    uri: Option<String>,
    /// The next part to send.
    next: u64,
    /// Whole parts that completed before `next`.
    pending: BTreeMap<u64, Vec<u8>>,
}

/// A `gs://` object being written.
pub(crate) struct GcsUpload {
    pub obj: GcsObject,
    session: Mutex<Session>,
}

impl std::fmt::Debug for GcsUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The session URI is a credential.
        f.debug_struct("GcsUpload")
            .field("obj", &self.obj)
            .finish_non_exhaustive()
    }
}

/// A chunk's `Content-Range`, sent with each attempt of its `PUT`.
struct ChunkRange(String);

impl SignRequest for ChunkRange {
    fn sign_request(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
    ) -> Result<Vec<(&'static str, String)>> {
        Ok(vec![("content-range", self.0.clone())])
    }
}

impl GcsUpload {
    pub(crate) fn new(obj: GcsObject) -> Self {
        GcsUpload {
            obj,
            session: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a session was started (something may be held by the server).
    pub(crate) fn started(&self) -> bool {
        self.lock().uri.is_some()
    }

    /// Part `k` (whole): sent now with every part after it that waits, if it is next; else
    /// kept until the parts ahead of it are sent.
    pub(crate) fn part(&self, cx: &Ctx<'_>, k: u64, data: &[u8]) -> Result<()> {
        let mut s = self.lock();
        if k != s.next {
            s.pending.insert(k, data.to_vec());
            return Ok(());
        }
        self.chunk(&mut s, cx, k, data, None)?;
        loop {
            let next = s.next;
            let Some(d) = s.pending.remove(&next) else {
                break;
            };
            self.chunk(&mut s, cx, next, &d, None)?;
        }
        Ok(())
    }

    /// The object of `body` alone, in one chunk that ends the upload.
    pub(crate) fn whole(&self, cx: &Ctx<'_>, body: &[u8]) -> Result<()> {
        let mut s = self.lock();
        let total = body.len() as u64;
        self.chunk(&mut s, cx, 0, body, Some(total))
    }

    /// Ends the upload of `extent` bytes: the parts left (`buffers`, the last one shorter),
    /// the last with the total.
    pub(crate) fn finish(
        &self,
        cx: &Ctx<'_>,
        buffers: Vec<(u64, Vec<u8>)>,
        extent: u64,
    ) -> Result<()> {
        let p = cx.part_size;
        let last = extent.saturating_sub(1) / p;
        let mut tail = None;
        for (k, data) in buffers {
            let len = (extent - k * p).min(p) as usize;
            match k == last {
                true => tail = Some(data[..len].to_vec()),
                false => self.part(cx, k, &data[..len])?,
            }
        }
        let mut s = self.lock();
        let expected = if tail.is_some() { last } else { last + 1 };
        if s.next != expected || !s.pending.is_empty() {
            return Err(bad(
                cx,
                format!(
                    "the resumable upload has {} of its {} parts in order; refusing to end it",
                    s.next,
                    last + 1
                ),
            ));
        }
        match tail {
            Some(d) => self.chunk(&mut s, cx, last, &d, Some(extent)),
            None => self.chunk(&mut s, cx, last + 1, &[], Some(extent)),
        }
    }

    /// Cancels the session, if one was started: `None` if none was.
    pub(crate) fn cancel(&self, cx: &Ctx<'_>) -> Option<Result<()>> {
        let uri = self.lock().uri.clone()?;
        let t = target(cx, &uri, "DELETE (cancel the resumable upload)", None);
        Some(match cx.client.send_body(&t, "DELETE", &[], None, false) {
            Ok(_) => Ok(()),
            // GCS answers a cancelled upload 499.
            Err(e) if RemoteError::of(&e).is_some_and(|r| r.kind == RemoteFailure::Status(499)) => {
                Ok(())
            }
            Err(e) => Err(e),
        })
    }

    /// The session URI, started with the first chunk.
    fn session(&self, s: &mut Session, cx: &Ctx<'_>) -> Result<String> {
        if let Some(uri) = &s.uri {
            return Ok(uri.clone());
        }
        let url = self.obj.upload_url();
        let t = target(
            cx,
            &url,
            "POST (start a resumable upload)",
            self.obj.creds.signer(),
        );
        let answer = cx.client.send_body(&t, "POST", &[], None, false)?;
        let location = answer.location.ok_or_else(|| {
            bad(
                cx,
                format!(
                    "the resumable upload's start was answered {} without a Location",
                    answer.status
                ),
            )
        })?;
        let uri = url::Url::parse(&url)
            .and_then(|base| base.join(&location))
            .map_err(|e| {
                bad(
                    cx,
                    format!("the resumable upload's Location is not a URL ({e})"),
                )
            })?;
        if url.starts_with("https://") && uri.scheme() != "https" {
            return Err(bad(
                cx,
                "the resumable upload's session is not https: refused, the bytes would travel \
                 unencrypted"
                    .into(),
            ));
        }
        let uri = String::from(uri);
        s.uri = Some(uri.clone());
        Ok(uri)
    }

    /// `PUT` of part `k`'s `data` to the session; `total` on the last one ends the upload.
    fn chunk(
        &self,
        s: &mut Session,
        cx: &Ctx<'_>,
        k: u64,
        data: &[u8],
        total: Option<u64>,
    ) -> Result<()> {
        let uri = self.session(s, cx)?;
        let start = k * cx.part_size;
        let size = total.map_or_else(|| "*".to_owned(), |n| n.to_string());
        let range = match data.len() {
            0 => format!("bytes */{size}"),
            n => format!("bytes {start}-{}/{size}", start + n as u64 - 1),
        };
        let label = format!("PUT of part {} ({range})", k + 1);
        let header = ChunkRange(range);
        let t = target(cx, &uri, &label, Some(&header));
        let answer =
            cx.client
                .send_body(&t, "PUT", data, Some("application/octet-stream"), false)?;
        match (total.is_some(), answer.status) {
            (false, 308) | (true, 200 | 201) => {}
            (last, status) => {
                let expected = match last {
                    false => "308 (more to come)",
                    true => "200 or 201 (the object made)",
                };
                return Err(bad(
                    cx,
                    format!("{label}: answered {status}, expected {expected}"),
                ));
            }
        }
        s.next = k + 1;
        Ok(())
    }
}

fn target<'a>(
    cx: &Ctx<'a>,
    url: &'a str,
    label: &'a str,
    signer: Option<&'a dyn SignRequest>,
) -> Target<'a> {
    Target {
        url,
        shown: cx.shown,
        range: None,
        signer,
        size: None,
        stop: cx.stop,
        label: Some(label),
    }
}

fn bad(cx: &Ctx<'_>, reason: String) -> Error {
    RemoteError {
        url: cx.shown.to_owned(),
        kind: RemoteFailure::BadResponse,
        reason,
    }
    .into()
}
