//! HTTP requests with KvikIO's retry policy, reading bodies straight into the caller's slice:
//! what every endpoint type sends its requests through.
//!
//! One [`Client`](client::Client) per remote file composes the rooms of this module:
//! - [`client`]: sends requests (reads, uploads), follows and checks redirects, judges statuses;
//! - [`request`]: one request's description and the headers of its answer;
//! - [`transport`]: the `ureq` agent and how a request stops when its stop flag is set;
//! - [`retry`]: what is retried, after how long, how many times, and each retry's record;
//! - [`range`]: `Range` requests and their answers, servers that ignore `Range`, sizes;
//! - [`sign`]: what authenticates a request in its headers (S3's SigV4, a GCS bearer token),
//!   as a trait the providers implement, so that this module names no provider;
//! - the trusted roots, from KvikIO's variables: [`crate::tls_ca`].
//!
//! Bodies are asked for and accepted only as they are stored (`Accept-Encoding: identity`): an
//! encoded body is refused, since its bytes are not the object's.

pub(crate) mod client;
pub(crate) mod range;
pub(crate) mod request;
pub(crate) mod retry;
pub(crate) mod sign;
pub(crate) mod transport;

pub use client::RemoteStats;
pub use range::{RangeSupport, WHOLE_BODY_REASON};
