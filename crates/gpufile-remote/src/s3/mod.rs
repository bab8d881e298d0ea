//! Amazon S3 (and S3-compatible servers) as an endpoint: the object and its SigV4 signing
//! ([`object`]), who signs and where (the caller's options, KvikIO's variables, the region and
//! endpoint chains: [`credentials`]), and the AWS credential chain ([`chain`]: profiles, web
//! identity, container and instance credentials). The URL syntax is [`crate::syntax::s3`]'s.

pub(crate) mod chain;
pub(crate) mod credentials;
pub(crate) mod object;

pub use credentials::S3Options;
pub use object::S3Object;
