"""Remote files: HTTP(S), S3, public S3, presigned S3 URLs and WebHDFS (KvikIO's ``RemoteFile``),
and, beyond KvikIO, Google Cloud Storage objects by ``gs://`` URL.

::

    import numpy, gpufile
    with gpufile.RemoteFile.open("https://example.com/data.bin") as f:
        buf = numpy.empty(f.nbytes(), dtype="u1")
        f.read(buf)

``gs://<bucket>/<object>`` URLs are read through GCS's XML API
(``https://storage.googleapis.com/<bucket>/<object>``, or the host in ``STORAGE_EMULATOR_HOST``)
as HTTP endpoints, with a bearer token of the Google credentials found as Google's libraries find
them (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application default credentials, the GCE
metadata server), anonymously without any; ``open(url, mode="w")`` writes them. Signed URLs (Azure shared access signatures, GCS signed URLs) are plain HTTPS:
``open_http`` reads them, sending the query with every request and redacting its signature.

Opened with ``mode="w"``, a remote file is written instead (S3 PutObject or multipart upload, HTTP
``PUT``, WebHDFS ``CREATE``); the object exists once ``close()`` succeeds (see ``RemoteFile``)::

    with gpufile.RemoteFile.open("s3://bucket/model.bin", mode="w") as f:
        f.write(gpu_array)

Each read is split into ``task_size`` ranged GETs run on ``num_threads`` threads; the settings
``http_max_attempts``, ``http_status_codes`` and ``http_timeout`` govern retries. S3 credentials
come from the arguments or from ``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN`` and ``AWS_ENDPOINT_URL``; WebHDFS's user from
``user.name`` in the URL or ``KVIKIO_WEBHDFS_USERNAME``.
"""

from __future__ import annotations

import enum
import io
import urllib.parse
from typing import Any, Optional

from . import _native
from ._future import IOFuture


class RemoteEndpointType(enum.Enum):
    """Kinds of remote endpoint (KvikIO's values).

    Attributes
    ----------
    AUTO
        Infer the type from the URL, trying the allow list in order.
    S3
        S3 with credentials (SigV4 signing).
    S3_PUBLIC
        S3 objects readable by anyone (no signing).
    S3_PRESIGNED_URL
        An S3 URL signed in advance (``X-Amz-Signature`` in its query).
    WEBHDFS
        Apache Hadoop WebHDFS (``http://host:port/webhdfs/v1/<path>``).
    HTTP
        Any HTTP(S) server that answers ranged GETs; ``gs://`` objects are read as this type
        (gpufile's addition).
    """

    AUTO = 0
    S3 = 1
    S3_PUBLIC = 2
    S3_PRESIGNED_URL = 3
    WEBHDFS = 4
    HTTP = 5


def is_remote_file_available() -> bool:
    """Whether remote files can be used (always true: gpufile is built with them).

    Returns
    -------
    bool
        True.
    """
    return hasattr(_native, "NativeRemoteFile")


def infer_remote_endpoint_type(url: str) -> RemoteEndpointType:
    """The endpoint type that ``RemoteFile.open(url)`` would pick (without network requests).

    Parameters
    ----------
    url
        The URL.

    Returns
    -------
    RemoteEndpointType
        The first of S3, S3_PUBLIC, S3_PRESIGNED_URL, WEBHDFS, HTTP whose URL form matches;
        HTTP for ``gs://<bucket>/<object>`` (gpufile's addition).

    Raises
    ------
    RuntimeError
        "Bad scheme" when the URL has no scheme, "Unsupported endpoint URL" when no type fits
        (for a malformed ``gs://`` URL, with what is wrong with it).
    """
    return RemoteEndpointType(_native.infer_remote_endpoint_type(url))


def _type_value(t: Any, what: str) -> int:
    if isinstance(t, RemoteEndpointType):
        return t.value
    name = getattr(t, "name", None)  # another library's enum with the same names
    if isinstance(name, str) and name in RemoteEndpointType.__members__:
        return RemoteEndpointType[name].value
    raise TypeError(f"{what} must be a RemoteEndpointType, not {type(t).__name__}")


def _write_mode(mode: str) -> bool:
    if mode in ("r", "rb"):
        return False
    if mode in ("w", "wb"):
        return True
    raise ValueError(f"mode must be 'r' or 'w', not {mode!r}")


# KvikIO's five AWS keyword arguments of ``open_s3`` and ``open_s3_url``, in their order.
_AWS_OPTIONS = (
    "aws_region_name",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_endpoint_url",
    "aws_session_token",
)


def _aws(*values: Optional[str]) -> dict[str, Optional[str]]:
    """The AWS keyword arguments, given in ``_AWS_OPTIONS``'s order, as the native opener's
    mapping (parsed there)."""
    return dict(zip(_AWS_OPTIONS, values))


def _shown_url(how: str, url: str, object_name: Optional[str]) -> Optional[str]:
    """The ``s3://`` URL an S3 object was named by (``open_s3``'s bucket and object name, or an
    ``s3://`` URL, redacted), which the handle shows as the endpoint's HTTP address it reads;
    None for every other way, whose handle shows the URL it was given."""
    if how == "s3" and object_name is not None:
        return f"s3://{url}/{object_name}"
    if url[:5].lower() == "s3://":
        return _native.redact_url(url)
    return None


class RemoteFile:
    """A remote object, read into host or GPU memory (GPU memory through pinned bounce buffers:
    each range is received while the previous one is copied to the GPU).

    Open it with a factory method (``open``, ``open_http``, ``open_s3``, ``open_s3_url``,
    ``open_s3_public``, ``open_s3_presigned_url``, ``open_webhdfs``, and gpufile's
    ``open_gcs_public``); its size is asked once, at open, unless ``nbytes`` is given.

    With ``mode="w"`` (every factory but ``open_s3_public`` and ``open_gcs_public``) the object
    is written: nothing is sent at open, and the object exists once ``close()`` succeeds.

    - Writes tile the object: every byte from 0 to the end of the last write is written exactly
      once, in any order and from several threads (``pwrite``). ``write(buf)`` and
      ``pwrite(buf)`` without ``file_offset`` append after what was written so far. A write that
      overlaps an earlier one raises ``ValueError`` before any byte moves; a gap raises
      ``ValueError`` at close.
    - S3: an object up to ``remote_part_size`` bytes (a setting, default 16 MiB) is one
      PutObject at close; a larger one is a multipart upload whose parts (``remote_part_size``
      each, the last one shorter) are uploaded in parallel as soon as each is whole, from host
      or GPU memory (GPU memory through the pinned bounce buffers), each retried under the
      ``http_*`` settings. ``nbytes`` (the object's size, where known) raises the part size so
      that the object fits S3's 10,000 parts.
    - HTTP (a server that takes ``PUT``, a presigned URL) and WebHDFS have no parts: the object
      is collected in host memory and sent at close in one request (WebHDFS: ``op=CREATE`` at
      the name node, then the bytes to the data node it redirects to).
    - A failed or cancelled write, a close that finds a gap, an exception inside ``with``, or
      ``abort()`` makes no object; an S3 multipart upload is then aborted, so that none is left
      behind.
    """

    def __init__(self, handle: Any) -> None:
        """Wraps a native handle; use the factory methods instead.

        Parameters
        ----------
        handle
            A ``gpufile._native.NativeRemoteFile``.
        """
        if not isinstance(handle, (_native.NativeRemoteFile, _native.NativeRemoteWriter)):
            raise TypeError("use RemoteFile.open(...) or another RemoteFile.open_* method")
        self._handle: Any = handle
        self._writing = isinstance(handle, _native.NativeRemoteWriter)
        self._pending: list[IOFuture] = []
        # What str() and repr() show: the object as the user named it (None: the handle's URL).
        self._shown: Optional[str] = None

    @classmethod
    def open_http(cls, url: str, nbytes: Optional[int] = None, mode: str = "r") -> RemoteFile:
        """Opens an HTTP(S) file; its size comes from ``HEAD`` (Content-Length).

        A URL with a query is sent as it is with every request (``HEAD`` and each ranged
        ``GET``), so signed URLs of any store work: an Azure Blob shared access signature
        (``https://<account>.blob.core.windows.net/<container>/<blob>?sv=...&sig=...``) or a
        GCS signed URL. Their signatures (``sig``, ``X-Goog-Signature``, ``Signature``, ...)
        are redacted in ``str()`` and errors.

        Parameters
        ----------
        url
            URL of the file.
        nbytes
            Its size, if known (no request is then made at open).
        mode
            ``"r"`` (default) or ``"w"``: one ``PUT`` of the object's bytes at close.

        Returns
        -------
        RemoteFile
            The open file.

        Raises
        ------
        RuntimeError
            The server refused or failed (status, timeout, attempts exhausted).
        """
        return cls._open("http", url, nbytes, mode)

    @classmethod
    def open_s3(
        cls,
        bucket_name: str,
        object_name: str,
        nbytes: Optional[int] = None,
        aws_region_name: Optional[str] = None,
        aws_access_key_id: Optional[str] = None,
        aws_secret_access_key: Optional[str] = None,
        aws_endpoint_url: Optional[str] = None,
        aws_session_token: Optional[str] = None,
        mode: str = "r",
    ) -> RemoteFile:
        """Opens an S3 object by bucket and object name, signing each request (SigV4).

        Parameters
        ----------
        bucket_name, object_name
            The object.
        nbytes
            Its size, if known.
        aws_region_name, aws_access_key_id, aws_secret_access_key, aws_session_token
            Credentials; each ``None`` is read from ``AWS_DEFAULT_REGION``,
            ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``.
        aws_endpoint_url
            ``<endpoint>/<bucket>/<object>`` instead of
            ``https://<bucket>.s3.<region>.amazonaws.com/<object>``; ``None``: ``AWS_ENDPOINT_URL``.
        mode
            ``"r"`` (default) or ``"w"`` (PutObject or multipart upload; ``nbytes``, where
            given, raises the part size to fit 10,000 parts).

        Returns
        -------
        RemoteFile
            The open file.

        Raises
        ------
        RuntimeError
            Missing region or credentials, or the server refused (e.g. "URL returned error: 404").
        """
        aws = _aws(aws_region_name, aws_access_key_id, aws_secret_access_key,
                   aws_endpoint_url, aws_session_token)
        return cls._open("s3", bucket_name, nbytes, mode, object_name=object_name, aws=aws)

    @classmethod
    def open_s3_url(
        cls,
        url: str,
        nbytes: Optional[int] = None,
        aws_region_name: Optional[str] = None,
        aws_access_key_id: Optional[str] = None,
        aws_secret_access_key: Optional[str] = None,
        aws_endpoint_url: Optional[str] = None,
        aws_session_token: Optional[str] = None,
        mode: str = "r",
    ) -> RemoteFile:
        """Opens an S3 object by URL: ``s3://<bucket>/<object>`` or an ``http(s)://`` URL.

        Parameters
        ----------
        url
            The object's URL.
        nbytes, aws_region_name, aws_access_key_id, aws_secret_access_key, aws_endpoint_url, aws_session_token
            As in ``open_s3`` (the endpoint applies to ``s3://`` URLs).
        mode
            ``"r"`` (default) or ``"w"``, as in ``open_s3``.

        Returns
        -------
        RemoteFile
            The open file.

        Raises
        ------
        ValueError
            "Unsupported protocol" for another scheme.
        RuntimeError
            As in ``open_s3``.
        """
        scheme = urllib.parse.urlparse(url.lower()).scheme
        if scheme not in ("http", "https", "s3"):
            raise ValueError(f"Unsupported protocol: {_native.redact_url(url)}")
        aws = _aws(aws_region_name, aws_access_key_id, aws_secret_access_key,
                   aws_endpoint_url, aws_session_token)
        return cls._open("s3_url", url, nbytes, mode, aws=aws)

    @classmethod
    def open_s3_public(cls, url: str, nbytes: Optional[int] = None) -> RemoteFile:
        """Opens a publicly readable S3 object (no signing).

        Parameters
        ----------
        url
            ``http(s)://`` URL of the object, or ``s3://<bucket>/<object>`` (read through
            ``AWS_ENDPOINT_URL`` if set, else AWS's global endpoint).
        nbytes
            Its size, if known.

        Returns
        -------
        RemoteFile
            The open file.
        """
        return cls._open("s3_public", url, nbytes)

    @classmethod
    def open_s3_presigned_url(
        cls, presigned_url: str, nbytes: Optional[int] = None, mode: str = "r"
    ) -> RemoteFile:
        """Opens an S3 object by presigned URL; the size comes from a ``Range: bytes=0-0`` GET.

        Parameters
        ----------
        presigned_url
            The presigned URL (its signature is never shown in errors or ``str()``).
        nbytes
            Its size, if known.
        mode
            ``"r"`` (default) or ``"w"``: one ``PUT`` at close, to a URL presigned for PUT.

        Returns
        -------
        RemoteFile
            The open file.
        """
        return cls._open("s3_presigned_url", presigned_url, nbytes, mode)

    @classmethod
    def open_gcs_public(cls, url: str, nbytes: Optional[int] = None) -> RemoteFile:
        """Opens a Google Cloud Storage object by ``gs://`` URL (gpufile's addition).

        The object is read by ranged GETs, each with a bearer token of the Google credentials
        found (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application default credentials,
        the GCE metadata server; anonymously, public objects only, without any), of the XML
        API address
        ``https://storage.googleapis.com/<bucket>/<object>`` (the name percent-encoded segment
        by segment, ``/`` kept), or of the same path at the host in ``STORAGE_EMULATOR_HOST``
        where that is set (``http://127.0.0.1:4443`` or ``127.0.0.1:4443``: the variable
        Google's client libraries read to target an emulator such as fake-gcs-server). The
        size comes from ``HEAD``. The file is an HTTP endpoint (``remote_endpoint_type()``);
        ``str()`` and errors show the ``gs://`` URL. ``RemoteFile.open(url)`` opens the same.

        Parameters
        ----------
        url
            ``gs://<bucket>/<object>``; the object name is taken literally (``%20``, ``?`` and
            ``#`` are characters of the name, as in Google's tools).
        nbytes
            Its size, if known (no request is then made at open).

        Returns
        -------
        RemoteFile
            The open file.

        Raises
        ------
        ValueError
            A malformed URL (no bucket, no object, a bucket name GCS would refuse), a
            ``STORAGE_EMULATOR_HOST`` that is not ``host:port`` or ``http(s)://host:port``, or a
            credentials file that cannot be used.
        RuntimeError
            The server or the token endpoint refused or failed; a 401 or 403 adds which
            credentials were used, or that none were found (then only public objects read).
        """
        return cls._open("gcs_public", url, nbytes)

    @classmethod
    def open_webhdfs(cls, url: str, nbytes: Optional[int] = None, mode: str = "r") -> RemoteFile:
        """Opens a WebHDFS file, ``http(s)://<host>:<port>/webhdfs/v1/<path>[?user.name=<u>]``.

        Parameters
        ----------
        url
            The file's URL; without ``user.name``, ``KVIKIO_WEBHDFS_USERNAME`` is used if set.
        nbytes
            Its size, if known (else ``op=GETFILESTATUS``).
        mode
            ``"r"`` (default) or ``"w"``: the file is created (overwritten) at close.

        Returns
        -------
        RemoteFile
            The open file.
        """
        return cls._open("webhdfs", url, nbytes, mode)

    @classmethod
    def open(
        cls,
        url: str,
        remote_endpoint_type: RemoteEndpointType = RemoteEndpointType.AUTO,
        allow_list: Optional[list] = None,
        nbytes: Optional[int] = None,
        mode: str = "r",
    ) -> RemoteFile:
        """Opens a remote file of any supported kind.

        Parameters
        ----------
        url
            The URL. Beyond KvikIO, a ``gs://<bucket>/<object>`` URL is an HTTP endpoint,
            opened as ``open_gcs_public`` opens it (KvikIO: "Unsupported endpoint URL").
        remote_endpoint_type
            AUTO (default) infers it from the URL, trying ``allow_list`` in order; an S3 URL
            whose credentials are missing (no source configured at all) or refused falls back
            to S3_PUBLIC if allowed; a configured credential source that fails (a profile named
            by ``AWS_PROFILE`` that does not exist, a failing ``credential_process``) raises.
        allow_list
            Endpoint types allowed (default: S3, S3_PUBLIC, S3_PRESIGNED_URL, WEBHDFS, HTTP).
        nbytes
            The size, if known (for writes to S3: raises the part size to fit 10,000 parts).
        mode
            ``"r"`` (default) or ``"w"``. Written, an S3 URL is S3 (with credentials, no
            fallback to S3_PUBLIC); S3_PUBLIC objects cannot be written; a ``gs://``
            object is written with GCS's resumable upload.

        Returns
        -------
        RemoteFile
            The open file.

        Raises
        ------
        RuntimeError
            "Bad scheme", "Unsupported endpoint URL", "... is not in the allowlist.",
            "Invalid URL for ... endpoint", a failed request, or "S3 credentials from
            <source>: <why>" for a configured credential source that failed.
        KeyboardInterrupt
            Ctrl-C while the open waits (a credential source, the size request), within about
            50 ms; a ``credential_process`` still running is killed.
        """
        kind = _type_value(remote_endpoint_type, "remote_endpoint_type")
        allowed = None
        if allow_list is not None:
            allowed = [_type_value(t, "allow_list items") for t in allow_list]
        return cls._open(
            "infer", url, nbytes, mode, remote_endpoint_type=kind, allow_list=allowed
        )

    @classmethod
    def _open(
        cls, how: str, url: str, nbytes: Optional[int], mode: str = "r", **options: Any
    ) -> RemoteFile:
        """The one way in under the ``open_*`` methods: ``_native.open_remote``, which opens
        the object as KvikIO's constructor ``how`` does, for reading or (``mode="w"``) writing.
        """
        write = _write_mode(mode)
        f = cls(_native.open_remote(how, url, write=write, nbytes=nbytes, **options))
        f._shown = _shown_url(how, url, options.get("object_name"))
        return f

    def close(self) -> None:
        """Closes the file (reads in flight finish).

        Opened for writing, makes the object: waits for the writes in flight, then sends what
        is left (the last parts and CompleteMultipartUpload, or the one ``PUT`` / ``CREATE``).
        A second close does nothing.

        Raises
        ------
        ValueError
            The writes leave a gap (the object is then not made, the upload aborted).
        RuntimeError
            A write or the completion failed (the upload is aborted); or an earlier close was
            interrupted, so the object is not known to be made.
        KeyboardInterrupt
            Ctrl-C while the server is awaited, however long it stalls: the file ends without
            the object known to be made, and no abort is sent; the exception's note says what
            the server may hold (S3: an incomplete multipart upload, which ``abort()`` removes).
        """
        if not self._writing:
            self._handle.close()
            return
        if self._handle.closed and not self._pending:
            try:
                self._handle.close()  # raises where a close or abort was interrupted
            except ValueError:
                pass  # made or aborted already: nothing to do
            return
        pending, self._pending = self._pending, []
        for fut in pending:
            try:
                fut.get()
            except Exception:  # noqa: BLE001 - the writer holds the failure; close raises it
                pass
        self._handle.close()

    def abort(self) -> None:
        """Ends a file opened for writing without making the object (S3: aborts the multipart
        upload, once the parts in flight have ended). Nothing happens after a close.

        Ctrl-C while the server is awaited raises ``KeyboardInterrupt`` at once; the upload may
        then still be there, and a later ``abort()`` sends the request again."""
        self._need_writer()
        pending, self._pending = self._pending, []
        for fut in pending:
            try:
                fut.get()
            except Exception:  # noqa: BLE001 - the object is abandoned anyway
                pass
        self._handle.abort()

    def part_size(self) -> Optional[int]:
        """The size of every part but the last of an S3 object opened for writing
        (``remote_part_size``, raised to fit 10,000 parts when ``nbytes`` was given); None for
        other endpoints and for reading."""
        return self._handle.part_size() if self._writing else None


    def _need_writer(self) -> None:
        if not self._writing:
            raise io.UnsupportedOperation(f"{self} is open for reading (mode='r')")

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._handle.closed

    def __enter__(self) -> RemoteFile:
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if self._writing and exc_type is not None:
            self.abort()  # an exception inside ``with``: no object
            return
        self.close()

    def __str__(self) -> str:
        """The object as it was named: an ``s3://`` URL for S3 (opened by bucket and object
        name, or by an ``s3://`` URL), else the URL it was opened with; signatures, tokens and
        passwords redacted, never the endpoint's address in place of ``s3://``."""
        return self._shown if self._shown is not None else self._handle.url()

    def __repr__(self) -> str:
        mode = " mode='w'" if self._writing else ""
        return f"<gpufile.RemoteFile {self.remote_endpoint_type().name} {str(self)!r}{mode}>"

    def remote_endpoint_type(self) -> RemoteEndpointType:
        """The endpoint type the file was opened as.

        Returns
        -------
        RemoteEndpointType
            Never AUTO.
        """
        return RemoteEndpointType(self._handle.remote_endpoint_type())

    def credentials_source(self) -> Optional[str]:
        """Where an S3 object's credentials come from: ``"arguments or environment"``, or the
        AWS default chain's source (``"shared config/credentials files"``, ``"web identity
        (STS)"``, ``"container credentials"``, ``"EC2 instance metadata (IMDSv2)"``); for a
        ``gs://`` object, the Google credentials' source (``"GOOGLE_APPLICATION_CREDENTIALS
        (service account key)"``, ``"GCE metadata server"``, ...) or ``"none (anonymous: no
        Google credentials found)"``; never the credentials themselves.

        Returns
        -------
        str or None
            None for objects read or written without credentials.
        """
        return self._handle.credentials_source()

    def nbytes(self) -> int:
        """The file size in bytes (known since open; no request); opened for writing, the
        object's size so far (the end of the last range written).

        Returns
        -------
        int
            The size.
        """
        return self._handle.nbytes()

    def read(self, buf: Any, size: Optional[int] = None, file_offset: int = 0) -> int:
        """Reads ``size`` bytes (default: all of ``buf``) at ``file_offset`` into ``buf``.

        Parameters
        ----------
        buf
            A writable, C-contiguous buffer: host (NumPy array, bytearray, memoryview) or GPU
            memory (CuPy, PyTorch, Numba, DLPack).
        size
            Bytes to read; at most the buffer's size.
        file_offset
            Where in the file to start.

        Returns
        -------
        int
            The bytes read (``size``).

        Raises
        ------
        ValueError
            The range goes past the end ("cannot read 0+100 bytes into a 10 bytes file").
        OverflowError
            The server ignored the range ("maybe the server doesn't support file ranges?").
        RuntimeError
            The server refused or failed (status, timeout, short body, attempts exhausted).
        """
        return self.pread(buf, size, file_offset).get()

    def pread(self, buf: Any, size: Optional[int] = None, file_offset: int = 0) -> IOFuture:
        """Starts a read like ``read`` and returns at once.

        Parameters
        ----------
        buf, size, file_offset
            As in ``read``; the future keeps ``buf`` alive until the read is done.

        Returns
        -------
        IOFuture
            ``get()`` returns the bytes read or raises the read's error.

        Raises
        ------
        ValueError
            Bad arguments or a range past the end (before any byte moves).
        TypeError
            Not a writable buffer (NumPy, bytearray, CuPy, PyTorch, ...).
        """
        if self._writing:
            raise io.UnsupportedOperation(f"{self} is open for writing (mode='w')")
        return IOFuture(self._handle.pread(buf, size, file_offset))

    def write(self, buf: Any, size: Optional[int] = None, file_offset: Optional[int] = None) -> int:
        """Writes ``size`` bytes (default: all of ``buf``) of ``buf`` at ``file_offset`` of an
        object opened with ``mode="w"``, and waits.

        Parameters
        ----------
        buf
            A C-contiguous buffer: host (NumPy array, bytes, bytearray, memoryview) or GPU
            memory (CuPy, PyTorch, Numba, DLPack).
        size
            Bytes to write; at most the buffer's size.
        file_offset
            Where in the object; default: right after what was written so far (appends).

        Returns
        -------
        int
            The bytes written.

        Raises
        ------
        ValueError
            The range overlaps one written before (nothing is written), or it would need more
            than S3's 10,000 parts.
        RuntimeError
            The server refused or failed, after the ``http_*`` retries (the upload is aborted).
        io.UnsupportedOperation
            The file is open for reading.
        """
        return self.pwrite(buf, size, file_offset).get()

    def pwrite(self, buf: Any, size: Optional[int] = None, file_offset: Optional[int] = None) -> IOFuture:
        """Starts a write like ``write`` and returns at once; ``close()`` waits for it.

        Parameters
        ----------
        buf, size, file_offset
            As in ``write``; the future keeps ``buf`` alive until the write is done. Writes
            from several threads give their ``file_offset``: an append's offset is read when
            the write starts.

        Returns
        -------
        IOFuture
            ``get()`` returns the bytes written or raises the write's error.

        Raises
        ------
        ValueError
            An overlap with an earlier write, refused before any byte moves.
        """
        self._need_writer()
        if file_offset is None:
            file_offset = self._handle.nbytes()
        fut = IOFuture(self._handle.pwrite(buf, size, file_offset))
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(fut)
        return fut
