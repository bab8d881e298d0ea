//! Remote objects (HTTP(S), S3, WebHDFS, `gs://`) through `gpufile-remote`, read into host or
//! device memory as local files are.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use ::gpufile_remote::{RemoteEndpointType, RemoteFile, S3Object, S3Options};
use gpufile_core::source::{Endpoint, Source};
use gpufile_core::Engine;

use crate::error::{give_text, guard, CallError};
use crate::handles::Table;
use crate::{give_future, gpufile_future, gpufile_status, out_arg, put, start_on, text, What};

/// An open remote object (opaque; from `gpufile_remote_open`, freed by
/// `gpufile_remote_close`).
pub struct gpufile_remote_file {
    _opaque: (),
}

/// `remote_endpoint_type` values (KvikIO's `RemoteEndpointType`, same numbers): infer from
/// the URL.
pub const GPUFILE_REMOTE_AUTO: c_int = 0;
/// S3 with credentials (SigV4): `s3://bucket/key` or an S3 HTTP(S) URL.
pub const GPUFILE_REMOTE_S3: c_int = 1;
/// S3 objects readable by anyone (no signing).
pub const GPUFILE_REMOTE_S3_PUBLIC: c_int = 2;
/// An S3 URL signed in advance.
pub const GPUFILE_REMOTE_S3_PRESIGNED_URL: c_int = 3;
/// Apache Hadoop WebHDFS.
pub const GPUFILE_REMOTE_WEBHDFS: c_int = 4;
/// Any HTTP(S) server that answers ranged GETs (also public `gs://bucket/object`).
pub const GPUFILE_REMOTE_HTTP: c_int = 5;

static REMOTES: Table<RemoteFile> = Table::new("remote");

fn endpoint_type(value: c_int, what: &str) -> Result<RemoteEndpointType, CallError> {
    u32::try_from(value)
        .ok()
        .and_then(RemoteEndpointType::from_value)
        .ok_or_else(|| {
            CallError::bad(format!(
                "{what} {value} is not a remote endpoint type (GPUFILE_REMOTE_AUTO 0 .. \
                 GPUFILE_REMOTE_HTTP 5)"
            ))
        })
}

fn nbytes_arg(nbytes: i64) -> Result<Option<u64>, CallError> {
    match nbytes {
        -1 => Ok(None),
        n if n < 0 => Err(CallError::bad(format!(
            "nbytes {n} is negative (-1: ask the server)"
        ))),
        n => Ok(Some(n as u64)),
    }
}

/// Stores `opened` in the table and its handle in `*out` (checked non-null).
///
/// # Safety
/// `out` is valid for a write of a pointer.
unsafe fn give(opened: RemoteFile, out: *mut *mut gpufile_remote_file) {
    let id = REMOTES.insert(opened);
    // SAFETY: the caller's contract.
    unsafe { put(out, id as *mut gpufile_remote_file) };
}

/// An optional string argument.
///
/// # Safety
/// `ptr` is null or a NUL-terminated string.
unsafe fn opt_text(ptr: *const c_char, what: &str) -> Result<Option<String>, CallError> {
    match ptr.is_null() {
        true => Ok(None),
        // SAFETY: the caller's contract.
        false => Ok(Some(unsafe { text(ptr, what)? }.to_owned())),
    }
}

/// Opens the remote object `url` as KvikIO's `RemoteHandle::open` does: type
/// `remote_endpoint_type` (`GPUFILE_REMOTE_AUTO` infers it from the URL, trying the allow
/// list in order); `allow_list` holds `allow_len` types (NULL: KvikIO's default list, S3, S3
/// public, presigned, WebHDFS, HTTP); a type not in the list is refused
/// (`GPUFILE_BAD_ARGUMENT`, "... is not in the allowlist."). `nbytes` is the object's size,
/// or -1 to ask the server. S3 credentials come from the AWS default chain (the `AWS_*`
/// environment variables, profiles, web identity, container credentials, instance metadata),
/// `gs://` ones from Google's application default credentials
/// (`gpufile_remote_credentials_source` says which). A server that cannot be reached, or
/// answers an error, is `GPUFILE_REMOTE`.
///
/// # Safety
/// `url` is null or a NUL-terminated string; `allow_list` is null or valid for reads of
/// `allow_len` ints; `out` is null or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpufile_remote_open(
    url: *const c_char,
    remote_endpoint_type: c_int,
    allow_list: *const c_int,
    allow_len: usize,
    nbytes: i64,
    out: *mut *mut gpufile_remote_file,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        // SAFETY: the caller's contract.
        let url = unsafe { text(url, "url")? };
        let kind = endpoint_type(remote_endpoint_type, "remote_endpoint_type")?;
        let allow = match allow_list.is_null() {
            true if allow_len == 0 => None,
            true => {
                return Err(CallError::bad(format!(
                    "allow_list is NULL (allow_len {allow_len})"
                )))
            }
            false => {
                // SAFETY: non-null, `allow_len` ints by the caller's contract.
                let list = unsafe { std::slice::from_raw_parts(allow_list, allow_len) };
                let list = list
                    .iter()
                    .map(|v| endpoint_type(*v, "allow_list entry"))
                    .collect::<Result<Vec<_>, _>>()?;
                Some(list)
            }
        };
        let opened = RemoteFile::open(url, kind, allow.as_deref(), nbytes_arg(nbytes)?)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { give(opened, out) };
        Ok(())
    })
}

/// Opens an S3 object with explicit credentials (KvikIO's `S3Endpoint`): `url` is
/// `s3://bucket/key` or an S3 HTTP(S) URL; each of `region`, `access_key_id`,
/// `secret_access_key`, `endpoint_url` and `session_token` may be NULL (then its `AWS_*`
/// environment variable is read). `nbytes` as for `gpufile_remote_open`.
///
/// # Safety
/// Every string is null or NUL-terminated; `out` is null or valid for a write of a pointer.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn gpufile_remote_open_s3(
    url: *const c_char,
    region: *const c_char,
    access_key_id: *const c_char,
    secret_access_key: *const c_char,
    endpoint_url: *const c_char,
    session_token: *const c_char,
    nbytes: i64,
    out: *mut *mut gpufile_remote_file,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        // SAFETY: the caller's contract, for each string.
        let (url, options) = unsafe {
            (
                text(url, "url")?,
                S3Options {
                    region: opt_text(region, "region")?,
                    access_key_id: opt_text(access_key_id, "access_key_id")?,
                    secret_access_key: opt_text(secret_access_key, "secret_access_key")?,
                    endpoint_url: opt_text(endpoint_url, "endpoint_url")?,
                    session_token: opt_text(session_token, "session_token")?,
                },
            )
        };
        let opened = RemoteFile::open_s3_url(url, nbytes_arg(nbytes)?, &options)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { give(opened, out) };
        Ok(())
    })
}

/// Closes `remote`. Reads still running keep the object until they end.
#[no_mangle]
pub extern "C" fn gpufile_remote_close(remote: *mut gpufile_remote_file) -> gpufile_status {
    guard(|| {
        REMOTES.remove(remote as usize)?;
        Ok(())
    })
}

/// Stores the object's size (known since open) in `*out`.
///
/// # Safety
/// `out` is null or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_remote_nbytes(
    remote: *const gpufile_remote_file,
    out: *mut u64,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let n = REMOTES.get(remote as usize)?.nbytes();
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, n) };
        Ok(())
    })
}

/// Stores the type the object was opened as (a `GPUFILE_REMOTE_*` value) in `*out`.
///
/// # Safety
/// `out` is null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_remote_endpoint_type(
    remote: *const gpufile_remote_file,
    out: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let k = REMOTES.get(remote as usize)?.remote_endpoint_type();
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, k as c_int) };
        Ok(())
    })
}

/// Copies the object's URL (signatures and credentials redacted) into `buf` as
/// `gpufile_settings_get_str` copies text; the bytes needed in `*needed` (if not null).
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes; `needed` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_remote_url(
    remote: *const gpufile_remote_file,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        let file = REMOTES.get(remote as usize)?;
        // SAFETY: the caller's contract.
        unsafe { give_text(file.url(), buf, len, needed) };
        Ok(())
    })
}

/// Copies where the object's credentials come from into `buf` as `gpufile_remote_url` copies
/// text: for S3, "arguments or environment" or the AWS chain's source ("shared config and
/// credentials files (profile ...)", "container credentials", "EC2 instance metadata", ...);
/// for `gs://`, the Google credentials' source or that there are none; the empty string for
/// objects read without credentials (HTTP, presigned URLs, WebHDFS). Never the credentials.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes; `needed` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn gpufile_remote_credentials_source(
    remote: *const gpufile_remote_file,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        let file = REMOTES.get(remote as usize)?;
        let source = file.credentials_source().unwrap_or("");
        // SAFETY: the caller's contract.
        unsafe { give_text(source, buf, len, needed) };
        Ok(())
    })
}

/// Stores in `*out` the endpoint type KvikIO's `infer_remote_endpoint_type` gives `url`.
///
/// # Safety
/// `url` is null or NUL-terminated; `out` is null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_remote_infer_endpoint_type(
    url: *const c_char,
    out: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        // SAFETY: the caller's contract.
        let url = unsafe { text(url, "url")? };
        let k = ::gpufile_remote::infer_remote_endpoint_type(url)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, k as c_int) };
        Ok(())
    })
}

/// Starts reading `size` bytes at `file_offset` of `remote` into `buf` (host or device
/// memory); `task_size` 0 takes the setting. A range past the object's end is refused here
/// (`GPUFILE_BAD_ARGUMENT`, KvikIO's "cannot read ..."), before any byte moves. Where it is
/// not yet known whether the server honours `Range` and the read is split, the engine has the
/// object read byte 0 first (so that a server that ignores ranges sends the object once, not
/// once per task).
///
/// # Safety
/// As `gpufile_file_pread`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_remote_pread(
    remote: *const gpufile_remote_file,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    task_size: usize,
    out: *mut *mut gpufile_future,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let file = REMOTES.get(remote as usize)?;
        if buf.is_null() {
            return Err(CallError::bad("buf is NULL"));
        }
        file.check_range(file_offset, size)?;
        let settings = Engine::global()?.shared_settings();
        let task_size = (task_size > 0).then_some(task_size);
        let source: Arc<dyn Source> = file;
        // SAFETY: the caller's contract.
        let future = unsafe {
            start_on(
                &Endpoint::Read(source),
                buf,
                size,
                What::Whole(file_offset),
                &settings,
                task_size,
                false,
            )?
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { give_future(future, out) };
        Ok(())
    })
}

/// Stores 1 in `*out` where `url` has the shape endpoint type `remote_endpoint_type` accepts
/// (KvikIO's `<Endpoint>::is_url_valid`), else 0 (always 0 for `GPUFILE_REMOTE_AUTO`).
///
/// # Safety
/// `url` is null or NUL-terminated; `out` is null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn gpufile_remote_url_is_valid(
    remote_endpoint_type: c_int,
    url: *const c_char,
    out: *mut c_int,
) -> gpufile_status {
    guard(|| {
        out_arg(out, "out")?;
        let kind = endpoint_type(remote_endpoint_type, "remote_endpoint_type")?;
        // SAFETY: the caller's contract.
        let url = unsafe { text(url, "url")? };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(out, c_int::from(kind.accepts(url))) };
        Ok(())
    })
}

/// Copies the URL of an S3 object (unsigned, credentials redacted) into `buf` as
/// `gpufile_remote_url` does: of `url` (an `s3://` or S3 HTTP(S) URL) where it is not NULL,
/// else of `bucket` and `object` at `endpoint_url` (NULL: `AWS_ENDPOINT_URL`, else AWS in
/// `region`; NULL: `AWS_DEFAULT_REGION`). Credentials are looked up as an open would (the
/// `AWS_*` variables), so missing ones are an error here too.
///
/// # Safety
/// Every string is null or NUL-terminated; `buf` is null or valid for writes of `len` bytes;
/// `needed` is null or valid for a write of a `size_t`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn gpufile_remote_s3_object_url(
    url: *const c_char,
    bucket: *const c_char,
    object: *const c_char,
    region: *const c_char,
    endpoint_url: *const c_char,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> gpufile_status {
    guard(|| {
        let env = |name: &str| std::env::var(name).ok();
        // SAFETY: the caller's contract, for each string.
        let options = unsafe {
            S3Options {
                region: opt_text(region, "region")?,
                endpoint_url: opt_text(endpoint_url, "endpoint_url")?,
                ..S3Options::default()
            }
        };
        // SAFETY: the caller's contract.
        let object_url = match unsafe { opt_text(url, "url")? } {
            Some(u) if u.starts_with("s3://") => {
                let (b, o) = ::gpufile_remote::parse_s3_url(&u)?;
                S3Object::from_bucket(&b, &o, &options, &env)?
            }
            Some(u) => S3Object::from_http_url(&u, &options, &env)?,
            None => {
                // SAFETY: the caller's contract.
                let (b, o) = unsafe { (text(bucket, "bucket")?, text(object, "object")?) };
                S3Object::from_bucket(b, o, &options, &env)?
            }
        };
        // SAFETY: the caller's contract.
        unsafe { give_text(&object_url.url(), buf, len, needed) };
        Ok(())
    })
}
