//! The one way in from Python to a remote object, for reading or for writing
//! (`gpufile._native.open_remote`): which of KvikIO's constructors (`how`), the object, its size
//! and the S3 options, parsed here once. `gpufile.RemoteFile`'s `open_*` methods, KvikIO's
//! names, are thin Python entries over it.

use gpufile::Error;
use gpufile_remote::{RemoteEndpointType, RemoteFile, RemoteWriter, S3Options};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{open_err, to_py, uint_arg};
use crate::remote::NativeRemoteFile;
use crate::remote_write::NativeRemoteWriter;
use crate::stoppable::{run_stoppable, Ended};

/// KvikIO's five AWS keyword arguments (`open_s3`, `open_s3_url`), the keys of `aws`.
const AWS_KEYS: [&str; 5] = [
    "aws_region_name",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_endpoint_url",
    "aws_session_token",
];

/// An endpoint type from KvikIO's integer value.
pub(crate) fn endpoint_type(value: u32) -> PyResult<RemoteEndpointType> {
    RemoteEndpointType::from_value(value)
        .ok_or_else(|| PyValueError::new_err(format!("unknown RemoteEndpointType value {value}")))
}

/// Which of KvikIO's constructors opens the object.
#[derive(Clone, Debug)]
enum How {
    Http,
    /// `url` is the bucket.
    S3 {
        object: String,
    },
    S3Url,
    S3Public,
    S3PresignedUrl,
    WebHdfs,
    /// gpufile's addition.
    GcsPublic,
    /// KvikIO's `open`: the given type, or the type inferred from the URL (AUTO).
    Infer {
        kind: RemoteEndpointType,
        allow: Option<Vec<RemoteEndpointType>>,
    },
}

/// What an object is opened for: a writer of one `PUT` (HTTP, presigned URL, WebHDFS) takes no
/// size, so its `nbytes` is not looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    Read,
    Write,
}

/// One `open_remote` call's arguments, checked.
#[derive(Debug)]
pub(crate) struct OpenArgs {
    how: How,
    url: String,
    nbytes: Option<u64>,
    s3: S3Options,
}

/// The arguments of `open_remote`, as Python passes them.
pub(crate) struct Raw<'a, 'py> {
    pub how: &'a str,
    pub url: String,
    pub nbytes: Option<&'a Bound<'py, PyAny>>,
    pub object_name: Option<String>,
    pub remote_endpoint_type: u32,
    pub allow_list: Option<Vec<u32>>,
    pub aws: Option<&'a Bound<'py, PyDict>>,
}

impl OpenArgs {
    /// Checks `raw` for `purpose`: `how` is known, `nbytes` an int where it is used,
    /// `object_name` given for (only for) `"s3"`, the endpoint types KvikIO's values, and `aws`
    /// a mapping of KvikIO's five AWS keyword arguments to `str` or `None`.
    pub(crate) fn parse(raw: Raw<'_, '_>, purpose: Purpose) -> PyResult<Self> {
        let unsized_write =
            purpose == Purpose::Write && matches!(raw.how, "http" | "s3_presigned_url" | "webhdfs");
        let nbytes = match unsized_write {
            true => None,
            false => uint_arg("nbytes", raw.nbytes, None)?,
        };
        let how = match (raw.how, raw.object_name) {
            ("s3", Some(object)) => How::S3 { object },
            ("s3", None) => {
                return Err(PyTypeError::new_err(
                    "open_remote('s3', ...) needs object_name",
                ))
            }
            (how, Some(_)) => {
                return Err(PyTypeError::new_err(format!(
                    "open_remote('{how}', ...) takes no object_name"
                )))
            }
            ("http", None) => How::Http,
            ("s3_url", None) => How::S3Url,
            ("s3_public", None) => How::S3Public,
            ("s3_presigned_url", None) => How::S3PresignedUrl,
            ("webhdfs", None) => How::WebHdfs,
            ("gcs_public", None) => How::GcsPublic,
            ("infer", None) => How::Infer {
                kind: endpoint_type(raw.remote_endpoint_type)?,
                allow: raw
                    .allow_list
                    .map(|l| l.into_iter().map(endpoint_type).collect())
                    .transpose()?,
            },
            (other, None) => {
                return Err(PyValueError::new_err(format!(
                    "unknown opener '{other}': one of http, s3, s3_url, s3_public, \
                     s3_presigned_url, webhdfs, gcs_public, infer"
                )))
            }
        };
        Ok(OpenArgs {
            how,
            url: raw.url,
            nbytes,
            s3: s3_options(raw.aws)?,
        })
    }

    /// Opens the object for reading (call without the GIL).
    pub(crate) fn open_file(&self) -> gpufile::Result<RemoteFile> {
        let (url, n, o) = (self.url.as_str(), self.nbytes, &self.s3);
        match &self.how {
            How::Http => RemoteFile::open_http(url, n),
            How::S3 { object } => RemoteFile::open_s3(url, object, n, o),
            How::S3Url => RemoteFile::open_s3_url(url, n, o),
            How::S3Public => RemoteFile::open_s3_public(url, n),
            How::S3PresignedUrl => RemoteFile::open_s3_presigned_url(url, n),
            How::WebHdfs => RemoteFile::open_webhdfs(url, n),
            How::GcsPublic => RemoteFile::open_gcs_public(url, n),
            How::Infer { kind, allow } => RemoteFile::open(url, *kind, allow.as_deref(), n),
        }
    }

    /// Opens the object for writing (call without the GIL); S3 public and `gs://` objects
    /// cannot be written.
    pub(crate) fn open_writer(&self) -> gpufile::Result<RemoteWriter> {
        let (url, n, o) = (self.url.as_str(), self.nbytes, &self.s3);
        match &self.how {
            How::Http => RemoteWriter::create_http(url),
            How::S3 { object } => RemoteWriter::create_s3(url, object, n, o),
            How::S3Url => RemoteWriter::create_s3_url(url, n, o),
            How::S3PresignedUrl => RemoteWriter::create_s3_presigned_url(url),
            How::WebHdfs => RemoteWriter::create_webhdfs(url),
            How::Infer { kind, allow } => RemoteWriter::create(url, *kind, allow.as_deref(), n),
            How::S3Public | How::GcsPublic => Err(Error::InvalidArgument(format!(
                "{}: public objects are read anonymously and cannot be written",
                gpufile_remote::redact(url)
            ))),
        }
    }

    /// The errors of opening: KvikIO's RuntimeError for bad URLs, except for gpufile's
    /// `gcs_public`, whose errors take gpufile's types (a bad `gs://` URL is a ValueError).
    pub(crate) fn error(&self, e: Error) -> PyErr {
        match self.how {
            How::GcsPublic => to_py(e),
            _ => open_err(e),
        }
    }
}

/// The S3 options of `aws`: KvikIO's five AWS keyword arguments, each a `str` or `None`
/// (`None`, or a key left out: read from the environment).
fn s3_options(aws: Option<&Bound<'_, PyDict>>) -> PyResult<S3Options> {
    let mut values: [Option<String>; 5] = Default::default();
    for (key, value) in aws.into_iter().flat_map(|d| d.iter()) {
        let name: String = key.extract()?;
        let Some(i) = AWS_KEYS.iter().position(|k| *k == name) else {
            return Err(PyTypeError::new_err(format!(
                "unexpected AWS option '{name}' (expected one of {})",
                AWS_KEYS.join(", ")
            )));
        };
        values[i] = value.extract().map_err(|e: PyErr| {
            PyTypeError::new_err(format!("argument '{name}': {}", e.value(value.py())))
        })?;
    }
    let [region, access_key_id, secret_access_key, endpoint_url, session_token] = values;
    Ok(S3Options {
        region,
        access_key_id,
        secret_access_key,
        endpoint_url,
        session_token,
    })
}

/// Opens a remote object for reading (a `NativeRemoteFile`) or, with `write`, for writing (a
/// `NativeRemoteWriter`), the GIL released and Ctrl-C heard (KeyboardInterrupt within about
/// 50 ms, see [`until_interrupted`]): `how` names KvikIO's constructor (`http`, `s3` with
/// `object_name` and the bucket as `url`, `s3_url`, `s3_public`, `s3_presigned_url`,
/// `webhdfs`, gpufile's `gcs_public`, or `infer`: KvikIO's `open`, with `remote_endpoint_type`
/// and `allow_list` as its integer values); `aws` holds KvikIO's AWS keyword arguments by name.
#[pyfunction]
#[pyo3(signature = (how, url, *, write=false, nbytes=None, object_name=None,
    remote_endpoint_type=0, allow_list=None, aws=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_remote(
    py: Python<'_>,
    how: &str,
    url: String,
    write: bool,
    nbytes: Option<&Bound<'_, PyAny>>,
    object_name: Option<String>,
    remote_endpoint_type: u32,
    allow_list: Option<Vec<u32>>,
    aws: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let raw = Raw {
        how,
        url,
        nbytes,
        object_name,
        remote_endpoint_type,
        allow_list,
        aws,
    };
    let purpose = if write { Purpose::Write } else { Purpose::Read };
    let args = OpenArgs::parse(raw, purpose)?;
    if write {
        let (args, w) = until_interrupted(py, move || {
            let w = args.open_writer();
            (args, w)
        })?;
        let w = w.map_err(|e| args.error(e))?;
        Ok(Py::new(py, NativeRemoteWriter::new(w))?.into_any())
    } else {
        let (args, f) = until_interrupted(py, move || {
            let f = args.open_file();
            (args, f)
        })?;
        let f = f.map_err(|e| args.error(e))?;
        Ok(Py::new(py, NativeRemoteFile::from_file(f))?.into_any())
    }
}

/// Runs `open` under a stop flag ([`gpufile_remote::with_stop`]) on a thread of its own, so
/// that Ctrl-C ends an open waiting on credential sources (a `credential_process`, STS, IMDS, a
/// token endpoint) or on the size request; whatever `open` made once stopped is dropped.
fn until_interrupted<T: Send + 'static>(
    py: Python<'_>,
    open: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    match run_stoppable(py, "remote-open", move |flag| {
        gpufile_remote::with_stop(flag, open)
    })? {
        Ended::Done(v) => Ok(v),
        Ended::Interrupted(interrupt, _) => Err(interrupt),
    }
}

/// Adds `open_remote` to `gpufile._native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open_remote, m)?)
}
