//! How object keys are written into URL paths, shared by the S3 and GCS URL syntax and objects
//! (a module of its own so that neither provider imports the other's).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};

/// Characters kept as they are in an S3 key's URL path: RFC 3986 unreserved ones and `/`
/// (the URI encoding that SigV4 canonicalises, so that the URL sent is the one signed).
pub(crate) const KEY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');
