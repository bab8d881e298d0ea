//! S3's multipart upload protocol: parts (their sizes and number), CreateMultipartUpload,
//! UploadPart, and the XML of S3's answers (CompleteMultipartUpload and
//! AbortMultipartUpload are sent by close).

use gpufile::StopFlag;
use gpufile::{Error, Result};

use super::{lock, Dest, RemoteWriter};
use crate::error::{RemoteError, RemoteFailure};
use crate::gcs::upload;
use crate::s3::S3Object;

/// S3's smallest part, in bytes (every part but the last).
pub const S3_MIN_PART: u64 = 5 << 20;
/// S3's largest part, in bytes.
pub const S3_MAX_PART: u64 = 5 << 30;
/// S3's most parts of one multipart upload.
pub const S3_MAX_PARTS: u64 = 10_000;

impl RemoteWriter {
    /// Uploads part `k` (S3's part number `k + 1`); a failure fails the writer, and, where
    /// `abort`, the last upload to end after a failure aborts the multipart upload (close
    /// aborts on its own, under its caller's stop flag).
    pub(super) fn upload_part(
        &self,
        k: u64,
        data: &[u8],
        stop: Option<&StopFlag>,
        abort: bool,
    ) -> Result<()> {
        {
            let mut st = lock(&self.state);
            if let Some(e) = &st.failed {
                return Err(self.failed_earlier(e));
            }
            st.inflight += 1;
        }
        let r = self.send_part(k, data, stop);
        let abort = {
            let mut st = lock(&self.state);
            st.inflight -= 1;
            match &r {
                Ok(etag) => {
                    st.etags.insert(k, etag.clone());
                }
                Err(e) => {
                    if st.failed.is_none() {
                        st.failed = Some(e.clone());
                    }
                }
            }
            let abort = abort && st.failed.is_some() && st.inflight == 0 && !st.aborted;
            if abort {
                st.aborted = true;
            }
            abort
        };
        if abort {
            self.send_abort(None);
        }
        self.idle.notify_all();
        r.map(|_| ())
    }

    fn s3(&self) -> Result<&S3Object> {
        match &self.dest {
            Dest::S3(o) => Ok(o),
            _ => Err(Error::InvalidArgument(format!(
                "{}: not an S3 object",
                self.shown
            ))),
        }
    }

    /// The object's URL with `query`.
    pub(super) fn s3_url(&self, query: &str) -> Result<String> {
        let mut u = self.s3()?.url.clone();
        u.set_query(Some(query));
        Ok(u.into())
    }

    /// The multipart upload's id: created (`POST ?uploads`) by the first caller.
    pub(super) fn upload_id(&self, stop: Option<&StopFlag>) -> Result<String> {
        let mut id = lock(&self.upload_id);
        if let Some(id) = id.as_ref() {
            return Ok(id.clone());
        }
        let url = self.s3_url("uploads")?;
        let t = self.target(&url, "POST (CreateMultipartUpload)", stop);
        let answer = self.client.send_body(&t, "POST", &[], None, false)?;
        let created = xml_text(&answer.body, "UploadId").ok_or_else(|| {
            self.bad_answer(format!(
                "CreateMultipartUpload: the answer holds no UploadId{}",
                s3_error(&answer.body)
            ))
        })?;
        *id = Some(created.clone());
        Ok(created)
    }

    pub(super) fn bad_answer(&self, reason: String) -> Error {
        RemoteError {
            url: self.shown.clone(),
            kind: RemoteFailure::BadResponse,
            reason,
        }
        .into()
    }

    /// What a GCS upload's requests need of this writer.
    pub(super) fn gcs_ctx<'a>(&'a self, stop: Option<&'a StopFlag>) -> upload::Ctx<'a> {
        upload::Ctx {
            client: &self.client,
            shown: &self.shown,
            stop,
            part_size: self.part_size,
        }
    }

    /// `PUT ?partNumber&uploadId` of part `k`; its ETag (GCS: the part goes to the resumable
    /// upload in its turn, and has no ETag).
    fn send_part(&self, k: u64, data: &[u8], stop: Option<&StopFlag>) -> Result<String> {
        if let Dest::Gcs(g) = &self.dest {
            return g.part(&self.gcs_ctx(stop), k, data).map(|()| String::new());
        }
        let id = self.upload_id(stop)?;
        let query = form(&[("partNumber", &(k + 1).to_string()), ("uploadId", &id)]);
        let url = self.s3_url(&query)?;
        let start = k * self.part_size;
        let label = format!(
            "PUT of part {} (bytes {start}-{})",
            k + 1,
            start + (data.len() as u64).max(1) - 1
        );
        let t = self.target(&url, &label, stop);
        let answer = self.client.send_body(&t, "PUT", data, None, false)?;
        answer
            .etag
            .ok_or_else(|| self.bad_answer(format!("{label}: the answer has no ETag")))
    }
}

/// A query of `pairs`, form-encoded.
pub(super) fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// The text of the first `<tag>` element of `xml`.
pub(super) fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    Some(xml_unescape(&xml[start..end]))
}

/// An S3 error answer's code and message, for errors (nothing else of the body: an S3 error can
/// carry the request's canonical form and the access key id).
pub(super) fn s3_error(body: &str) -> String {
    match (xml_text(body, "Code"), xml_text(body, "Message")) {
        (Some(c), Some(m)) => format!(": {c}: {m}"),
        (Some(c), None) => format!(": {c}"),
        _ => String::new(),
    }
}

pub(super) fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn xml_unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}
