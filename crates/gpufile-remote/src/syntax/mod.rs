//! URL syntax of every endpoint type, what of a URL is shown, and the environment as a
//! function: the leaf every provider and the readers and writers build on. Pure (no I/O, no
//! request, no provider's types), so that no provider imports another and nothing here
//! imports them.
//!
//! - [`scheme`]: a URL's scheme, the `http(s)://` and WebHDFS shapes, the userinfo check;
//! - [`s3`]: `s3://` and AWS's `https://` forms, presigned URLs;
//! - [`gs`]: `gs://` names and their XML API addresses;
//! - [`endpoint`]: [`RemoteEndpointType`], inference under an allow list, explicit types;
//! - [`redact`](mod@redact): what of a URL is shown;
//! - [`keys`]: how object keys are written into URL paths;
//! - [`env`](mod@env): the environment as a function.

pub(crate) mod endpoint;
pub(crate) mod env;
pub(crate) mod gs;
pub(crate) mod keys;
pub(crate) mod redact;
pub(crate) mod s3;
pub(crate) mod scheme;

pub use endpoint::{infer_remote_endpoint_type, RemoteEndpointType};
pub use gs::{parse_gs_url, EMULATOR_HOST_VAR, XML_API_ENDPOINT};
pub use redact::{redact, SECRET_PARAMS};
pub use s3::parse_s3_url;
