//! How a [`RemoteWriter`] ends: [`RemoteWriter::close`] makes the object (the last parts and
//! CompleteMultipartUpload, or the one `PUT` / WebHDFS `CREATE`), [`RemoteWriter::abort`] ends
//! it unmade (AbortMultipartUpload). Both have a form whose requests stop soon after a caller's
//! [`StopFlag`] is set (Ctrl-C), however long the server stalls.

use gpufile::StopFlag;
use gpufile::{Error, Result};

use super::multipart::{form, s3_error, xml_escape};
use super::{lock, Dest, RemoteWriter, State};
use crate::error::{RemoteError, RemoteFailure};
use crate::syntax::redact::redact;
use crate::webhdfs::user_param;

impl RemoteWriter {
    /// `DELETE ?uploadId` (AbortMultipartUpload), once no part upload is under way. A
    /// cancelled write sends it without the request's stop flag, since a cancelled upload must
    /// be aborted too; [`Self::abort_with_stop`] sends it under its caller's flag. False where
    /// that flag stopped it before the server answered (the upload may still be there).
    pub(super) fn send_abort(&self, stop: Option<&StopFlag>) -> bool {
        let r = match &self.dest {
            Dest::Gcs(g) => match g.cancel(&self.gcs_ctx(stop)) {
                Some(r) => r,
                None => return true,
            },
            _ => {
                let Some(id) = lock(&self.upload_id).clone() else {
                    return true;
                };
                self.s3_url(&form(&[("uploadId", &id)])).and_then(|url| {
                    let t = self.target(&url, "DELETE (AbortMultipartUpload)", stop);
                    self.client
                        .send_body(&t, "DELETE", &[], None, false)
                        .map(|_| ())
                })
            }
        };
        match r {
            Ok(_) => true,
            Err(_) if stop.is_some_and(StopFlag::is_set) => false,
            Err(e) => {
                lock(&self.state).abort_error = Some(e);
                true
            }
        }
    }

    /// Ends the writer without making the object: aborts the multipart upload (if any) once
    /// the part uploads under way have ended. Idempotent; nothing happens after a close.
    pub fn abort(&self) -> Result<()> {
        self.abort_with_stop(None)
    }

    /// [`Self::abort`] whose AbortMultipartUpload stops soon after `stop` is set (Ctrl-C), as a
    /// read does. Stopped before the server answered: [`RemoteFailure::Interrupted`], the
    /// writer ended all the same, and a later abort sends the request again.
    pub fn abort_with_stop(&self, stop: Option<&StopFlag>) -> Result<()> {
        let mut st = lock(&self.state);
        while st.inflight > 0 {
            st = self.idle.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.closed == Some(true) {
            return Ok(());
        }
        st.closed = Some(false);
        st.buffers.clear();
        if st.failed.is_none() {
            st.failed = Some(Error::Cancelled);
        }
        let send = !st.aborted;
        st.aborted = true;
        drop(st);
        if send {
            if !self.send_abort(stop) {
                let e = self.interrupted(
                    "abort() was interrupted before the server answered AbortMultipartUpload: \
                     the multipart upload may still be there (its parts stored); abort() again \
                     removes it",
                );
                let mut st = lock(&self.state);
                st.aborted = false;
                st.interrupted = Some(e.clone());
                return Err(e);
            }
            lock(&self.state).interrupted = None;
        }
        match lock(&self.state).abort_error.clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn interrupted(&self, reason: &str) -> Error {
        RemoteError {
            url: self.shown.clone(),
            kind: RemoteFailure::Interrupted,
            reason: reason.to_owned(),
        }
        .into()
    }

    /// What an interrupted close leaves on the server.
    fn interrupted_close(&self, multipart: bool) -> Error {
        let holds = match (&self.dest, multipart) {
            (Dest::S3(_), true) => {
                "S3 holds an incomplete multipart upload (its parts stored) until abort() \
                 removes it, unless a CompleteMultipartUpload it received still makes the object"
            }
            (Dest::S3(_), false) => "S3 makes the object from the PutObject it received, or none",
            (Dest::Put { .. }, _) => "the server may still store what it received of the PUT",
            (Dest::WebHdfs { .. }, _) => {
                "the file may be created, with what the data node received of the bytes"
            }
            (Dest::Gcs(_), _) => {
                "GCS holds the unfinished resumable upload (its bytes received so far) until \
                 abort() cancels it or a week passes, unless its last request still makes the \
                 object"
            }
        };
        self.interrupted(&format!(
            "close() was interrupted before the server answered: the object is not known to \
             be made; {holds}"
        ))
    }

    /// Makes the object from the bytes written, once every write has returned (the caller
    /// waits for its requests first): the last parts and CompleteMultipartUpload (S3), or the
    /// one `PUT` / WebHDFS `CREATE`. Refused, and the upload aborted, where an earlier write
    /// failed or the writes do not tile the object from byte 0 to its end
    /// ([`RemoteFailure::NotTiled`]). A second close does nothing.
    pub fn close(&self) -> Result<()> {
        self.close_with_stop(None)
    }

    /// [`Self::close`] whose requests (the last parts, CompleteMultipartUpload, the one `PUT` /
    /// `CREATE`, the abort after a failure) stop soon after `stop` is set (Ctrl-C), as a read
    /// does, however long the server stalls. Stopped before the server answered:
    /// [`RemoteFailure::Interrupted`], saying what the server may hold; the writer has ended
    /// without the object known to be made (a second close returns the same error), and no
    /// abort was sent (a stalled server would hold it as long): [`Self::abort`] sends it.
    pub fn close_with_stop(&self, stop: Option<&StopFlag>) -> Result<()> {
        let mut st = lock(&self.state);
        while st.inflight > 0 {
            st = self.idle.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        match st.closed {
            Some(true) => return Ok(()),
            Some(false) => return Err(st.interrupted.clone().unwrap_or(Error::Closed)),
            None => {}
        }
        if let Some(e) = st.failed.clone() {
            drop(st);
            let _ = self.abort_with_stop(stop);
            return Err(self.with_abort_note(e));
        }
        if let Some(gap) = self.gap(&st) {
            drop(st);
            let _ = self.abort_with_stop(stop);
            return Err(self.with_abort_note(gap));
        }
        let extent = st.extent;
        let multipart = st.multipart;
        let mut buffers: Vec<(u64, Vec<u8>)> =
            st.buffers.drain().map(|(k, b)| (k, b.data)).collect();
        buffers.sort_by_key(|(k, _)| *k);
        drop(st);
        let r = match multipart {
            false => {
                let body = buffers.pop().map(|(_, d)| d).unwrap_or_default();
                self.send_whole(&body[..extent as usize], stop)
            }
            true => self.finish_multipart(buffers, stop),
        };
        match r {
            Ok(()) => {
                lock(&self.state).closed = Some(true);
                Ok(())
            }
            Err(_) if stop.is_some_and(StopFlag::is_set) => {
                let e = self.interrupted_close(multipart);
                let mut st = lock(&self.state);
                st.failed.get_or_insert(Error::Cancelled);
                st.closed = Some(false);
                st.interrupted = Some(e.clone());
                Err(e)
            }
            Err(e) => {
                {
                    let mut st = lock(&self.state);
                    st.failed.get_or_insert(e.clone());
                }
                let _ = self.abort_with_stop(stop);
                Err(self.with_abort_note(e))
            }
        }
    }

    /// Where the writes leave a hole, if anywhere.
    pub(super) fn gap(&self, st: &State) -> Option<Error> {
        let mut next = 0u64;
        for (&s, &e) in &st.reserved {
            if s > next {
                return Some(self.not_tiled(format!(
                    "bytes {next}-{} were never written; the writes to an object must tile it \
                     from byte 0 to its end",
                    s - 1
                )));
            }
            next = e;
        }
        (st.written != st.extent).then(|| {
            self.not_tiled(format!(
                "{} of the object's {} bytes were written: a write did not finish",
                st.written, st.extent
            ))
        })
    }

    fn with_abort_note(&self, e: Error) -> Error {
        let Some(r) = RemoteError::of(&e) else {
            return e;
        };
        let (had_upload, what) = match &self.dest {
            Dest::Gcs(g) => (g.started(), "resumable upload"),
            _ => (lock(&self.upload_id).is_some(), "multipart upload"),
        };
        let st = lock(&self.state);
        let note = match (had_upload, st.aborted, st.abort_error.as_ref()) {
            (false, _, _) => " (nothing was written)".to_owned(),
            (true, false, _) => format!(
                " (the abort of the {what} was interrupted: the upload may still be there; \
                 abort() removes it)"
            ),
            (true, true, None) => format!(" (the {what} was aborted)"),
            (true, true, Some(a)) => format!(" (aborting the {what} failed too: {a})"),
        };
        drop(st);
        RemoteError {
            reason: format!("{}{note}", r.reason),
            ..r.clone()
        }
        .into()
    }

    /// The object in one request: PutObject (S3), `PUT`, or WebHDFS `CREATE`.
    fn send_whole(&self, body: &[u8], stop: Option<&StopFlag>) -> Result<()> {
        match &self.dest {
            Dest::Gcs(g) => g.whole(&self.gcs_ctx(stop), body),
            Dest::S3(o) => {
                let url = o.url.as_str().to_owned();
                let t = self.target(&url, "PUT (PutObject)", stop);
                self.client
                    .send_body(&t, "PUT", body, None, false)
                    .map(|_| ())
            }
            Dest::Put { url } => {
                let t = self.target(url, "PUT", stop);
                self.client
                    .send_body(&t, "PUT", body, None, false)
                    .map(|_| ())
            }
            Dest::WebHdfs { base, user } => {
                let url = format!("{base}?{}op=CREATE&overwrite=true", user_param(user));
                let t = self.target(&url, "PUT (WebHDFS CREATE)", stop);
                let answer = self.client.send_body(&t, "PUT", &[], None, true)?;
                let location = match answer.location {
                    Some(l) => l,
                    None => serde_json::from_str::<serde_json::Value>(&answer.body)
                        .ok()
                        .and_then(|v| v.get("Location")?.as_str().map(str::to_owned))
                        .ok_or_else(|| {
                            self.bad_answer(format!(
                                "WebHDFS CREATE: the name node answered {} without a Location \
                                 for the data",
                                answer.status
                            ))
                        })?,
                };
                let next = url::Url::parse(&url)
                    .and_then(|b| b.join(&location))
                    .map_err(|e| self.bad_answer(format!("WebHDFS CREATE: Location {e}")))?;
                if url.starts_with("https://") && next.scheme() != "https" {
                    return Err(self.bad_answer(format!(
                        "WebHDFS CREATE: the name node redirects from https to {} ({}), refused: \
                         the bytes would travel unencrypted",
                        next.scheme(),
                        redact(next.as_str())
                    )));
                }
                let next = next.to_string();
                let t = self.target(&next, "PUT (WebHDFS CREATE, data)", stop);
                self.client
                    .send_body(&t, "PUT", body, Some("application/octet-stream"), false)?;
                Ok(())
            }
        }
    }

    /// Uploads the parts left in buffers, then CompleteMultipartUpload with every part's ETag.
    fn finish_multipart(
        &self,
        buffers: Vec<(u64, Vec<u8>)>,
        stop: Option<&StopFlag>,
    ) -> Result<()> {
        let extent = lock(&self.state).extent;
        if let Dest::Gcs(g) = &self.dest {
            return g.finish(&self.gcs_ctx(stop), buffers, extent);
        }
        for (k, data) in buffers {
            let len = (extent - k * self.part_size).min(self.part_size) as usize;
            self.upload_part(k, &data[..len], stop, false)?;
        }
        let parts: String = lock(&self.state)
            .etags
            .iter()
            .map(|(k, etag)| {
                format!(
                    "<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>",
                    k + 1,
                    xml_escape(etag)
                )
            })
            .collect();
        let body = format!("<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>");
        let id = self.upload_id(stop)?;
        let url = self.s3_url(&form(&[("uploadId", &id)]))?;
        let t = self.target(&url, "POST (CompleteMultipartUpload)", stop);
        let answer =
            self.client
                .send_body(&t, "POST", body.as_bytes(), Some("application/xml"), false)?;
        // S3 may answer 200 and report the failure in the body.
        if answer.body.contains("<Error>") || !answer.body.contains("CompleteMultipartUploadResult")
        {
            return Err(self.bad_answer(format!(
                "CompleteMultipartUpload failed{}",
                s3_error(&answer.body)
            )));
        }
        Ok(())
    }
}
