//! Google Cloud Storage as an endpoint: the `gs://` object read through GCS's XML API
//! ([`object`]), the Application Default Credentials and their tokens ([`credentials`]), and
//! resumable uploads ([`upload`]). The URL syntax is [`crate::syntax::gs`]'s.

pub(crate) mod credentials;
pub(crate) mod object;
pub(crate) mod upload;
