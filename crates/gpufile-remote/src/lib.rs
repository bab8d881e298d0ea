//! Remote objects as gpufile sources: HTTP(S), S3 (SigV4), S3 public, presigned S3 URLs and
//! WebHDFS, with KvikIO's URL rules, environment and retry settings; beyond KvikIO, Google
//! Cloud Storage objects by `gs://` URL (read as HTTP, see [`parse_gs_url`]; written as
//! resumable uploads), with the credentials Google's Application Default Credentials find.
//!
//! How to use:
//! 1. Open with one of [`RemoteFile`]'s constructors (`open_http`, `open_s3`, `open_s3_url`,
//!    `open_s3_public`, `open_s3_presigned_url`, `open_webhdfs`, `open_gcs_public`) or with
//!    [`RemoteFile::open`], which infers the endpoint type from the URL (see
//!    [`infer_remote_endpoint_type`]). The size is asked once, at open, unless given. Signed
//!    URLs of other stores (Azure shared access signatures, GCS signed URLs) are plain HTTPS:
//!    `open_http` reads them, the query sent with every request and its signature redacted.
//! 2. [`RemoteFile`] is a [`gpufile::source::Source`]: each `read_at` is one ranged GET read
//!    straight into the caller's slice (no intermediate buffer). The engine
//!    ([`gpufile::Engine::submit`]) splits a request over its workers, into host memory or
//!    through pinned bounce buffers into GPU memory, receiving one range while the previous one
//!    is copied to the GPU; [`RemoteFile::read`] and [`read_into`] are the host-memory shortcut.
//! 3. [`RemoteWriter`] writes an object (S3 PutObject or multipart upload, HTTP `PUT`,
//!    WebHDFS `CREATE`): a [`gpufile::source::Sink`], so that writes of host or GPU memory
//!    go through the same submit as reads; the object exists once
//!    [`RemoteWriter::close`] succeeds, and a failure aborts the upload.
//! 4. [`open_checkpoint`] reads a safetensors checkpoint's headers by URL (a file, an index,
//!    a prefix holding one) for loads to any memory through the same remote sources.
//! 5. [`save_checkpoint`] saves a Hugging Face checkpoint under a prefix: every shard's bytes as
//!    one batch of writes over the engine, every shard made, then the index (the commit).
//! 6. Every failure is a [`gpufile::Error`]: what the server or the network did is a
//!    [`RemoteError`] (with a [`RemoteFailure`] kind) inside [`gpufile::Error::Source`] (found
//!    again with [`RemoteError::of`]), with the URL (signatures redacted), the byte range and
//!    the attempts made; `InvalidArgument` for bad URLs, missing credentials and reads past the
//!    end; a configured credential source that fails is a [`RemoteFailure::Credentials`].
//! 7. An open waits on credential sources (a `credential_process`, STS, IMDS, a Google token
//!    endpoint) and on the size request: run it under [`with_stop`] on a thread of its own and
//!    set the flag on Ctrl-C, and it ends soon with [`gpufile::Error::Cancelled`], a helper
//!    process killed (the Python binding and the CLI do).
//!
//! Libraries: `ureq` (blocking HTTP/1.1, rustls with ring, webpki roots) and `aws-sigv4` (AWS's
//! own SigV4 signer: each S3 GET/HEAD is signed in its headers, `Authorization`, as the AWS SDKs
//! and KvikIO's libcurl sign them; a query-signed request is not recognised as S3's by some
//! S3-compatible servers). Neither starts a thread or a runtime.
//!
//! Rooms, by provider (as object_store's `aws/`, `gcp/` and `client/`), each importing only the
//! rooms listed above it, so that no import circle forms and a new provider copies a folder:
//! - `syntax/`: every scheme's URL syntax, [`redact()`] and the environment as a
//!   function (the leaf); `error`, `stop`, `children` and `tls_ca` are leaves too;
//! - `http/`: the client every endpoint sends through (transport, retry, range, the signing
//!   trait);
//! - `s3/` (the object and SigV4, its credentials, the AWS chain), `gcs/` (the object, its
//!   credentials, resumable uploads) and `webhdfs`: the providers;
//! - `file` (reads), `writer/` (writes), `checkpoint` and `save`: what users call.

mod checkpoint;
mod children;
mod error;
mod file;
mod gcs;
mod http;
mod s3;
mod save;
mod stop;
mod syntax;
mod tls_ca;
mod webhdfs;
mod writer;

pub use checkpoint::{
    is_url, open_checkpoint, read_header, CheckpointError, RemoteCheckpoint, CHECKPOINT_RANGE_MIN,
    HEADER_PROBE,
};
pub use error::{RemoteError, RemoteFailure, SOURCE_WHAT};
pub use file::{read_into, ReadPlan, RemoteFile, RANGED_REASON};
pub use http::{RangeSupport, RemoteStats, WHOLE_BODY_REASON};
pub use s3::{S3Object, S3Options};
pub use save::{save_checkpoint, SaveCheckpointError};
pub use stop::with_stop;
pub use syntax::{
    infer_remote_endpoint_type, parse_gs_url, parse_s3_url, redact, RemoteEndpointType,
    EMULATOR_HOST_VAR, SECRET_PARAMS, XML_API_ENDPOINT,
};
pub use writer::{part_size_for, RemoteWriter, S3_MAX_PART, S3_MAX_PARTS, S3_MIN_PART};
