"""A local HTTP server for tests and benchmarks (KvikIO's ``utils.LocalHttpServer``)."""

from __future__ import annotations

import functools
import http
import multiprocessing
import os
import pathlib
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class RangeRequestHandler(SimpleHTTPRequestHandler):
    """``SimpleHTTPRequestHandler`` that answers ``Range: bytes=a-b`` with 206 and that range,
    and stores the body of a ``PUT`` as the file at its path.

    One range per request (what gpufile and KvikIO send); a range past the end gets 416.
    """

    protocol_version = "HTTP/1.1"  # keep-alive, so that a client's workers reuse connections
    # TCP_NODELAY: the headers and a short body go out at once. With Nagle's algorithm a body
    # sent after the headers waits for the client's delayed ACK: 40 ms per small range.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def end_headers(self) -> None:
        # As range-capable servers do (nginx, Apache, S3): a client learns from a HEAD that it
        # may read ranges in parallel.
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def send_head(self):  # type: ignore[override]
        header = self.headers.get("Range")
        if header is None:
            return super().send_head()
        m = _RANGE.match(header.strip())
        path = self.translate_path(self.path)
        if m is None or os.path.isdir(path):
            return super().send_head()
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(http.HTTPStatus.NOT_FOUND, "File not found")
            return None
        size = os.fstat(f.fileno()).st_size
        first, last = m.groups()
        if first == "":
            start, end = max(size - int(last or 0), 0), size - 1
        else:
            start = int(first)
            end = min(int(last), size - 1) if last else size - 1
        if start >= size or end < start:
            f.close()
            self.send_response(http.HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        self.send_response(http.HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self._range = (start, end - start + 1)
        return f

    def do_PUT(self) -> None:
        """Stores the body (``Content-Length`` bytes) as the file at the path: 201 Created, or
        204 where it replaced a file; 411 without a length, 400 for a directory."""
        length = self.headers.get("Content-Length")
        if length is None:
            self.send_error(http.HTTPStatus.LENGTH_REQUIRED)
            return
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            self.send_error(http.HTTPStatus.BAD_REQUEST, "Is a directory")
            return
        existed = os.path.exists(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        remaining = int(length)
        tmp = f"{path}.part-{os.getpid()}-{threading.get_ident()}"
        with open(tmp, "wb") as f:
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                f.write(chunk)
                remaining -= len(chunk)
        if remaining:
            os.unlink(tmp)
            self.close_connection = True
            return
        os.replace(tmp, path)  # readers see the old file or the whole new one
        self.send_response(http.HTTPStatus.NO_CONTENT if existed else http.HTTPStatus.CREATED)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def copyfile(self, source, outputfile) -> None:  # type: ignore[override]
        # sendfile(2): the kernel copies page cache to the socket, so the server is not the
        # bottleneck of a benchmark (and the GIL is released meanwhile).
        rng, self._range = getattr(self, "_range", None), None
        if rng is None:
            try:
                rng = (0, os.fstat(source.fileno()).st_size)
            except (AttributeError, OSError, ValueError):  # a directory listing (BytesIO)
                return super().copyfile(source, outputfile)
        start, count = rng
        outputfile.flush()
        self.connection.sendfile(source, start, count)


class _QuietHandler(SimpleHTTPRequestHandler):
    """The standard library's handler (no range support), without request logging."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class LocalHttpServer:
    """A threading HTTP server on 127.0.0.1 in a child process, serving a directory.

    Use it as a context manager; ``url`` is ``http://127.0.0.1:<port>``.

    Example
    -------
    >>> with LocalHttpServer(root_path="/my/server/") as server:
    ...     with gpufile.RemoteFile.open_http(f"{server.url}/myfile") as f:
    ...         f.read(buf)
    """

    def __init__(
        self,
        root_path: str | pathlib.Path,
        range_support: bool = True,
        max_lifetime: int = 120,
        handler: type[BaseHTTPRequestHandler] | None = None,
        handler_options: dict[str, Any] | None = None,
    ) -> None:
        """Describes the server; ``__enter__`` starts it.

        Parameters
        ----------
        root_path
            The directory served.
        range_support
            Answer ``Range`` requests with 206 (needed by ``RemoteFile``); False serves whole
            files only (to test servers without ranges).
        max_lifetime
            Seconds after which the server stops by itself (a guard for tests that hang).
        handler
            A request handler class to use instead (e.g. one that injects faults); it gets
            ``directory=root_path`` and ``handler_options`` as keyword arguments.
        handler_options
            Extra keyword arguments for ``handler``.
        """
        self.root_path = root_path
        self.range_support = range_support
        self.max_lifetime = max_lifetime
        self.handler = handler
        self.handler_options = handler_options or {}

    @staticmethod
    def _serve(queue: Any, handler: Any, options: dict[str, Any], max_lifetime: int) -> None:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, **options))
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        queue.put(httpd.server_address)
        time.sleep(max_lifetime)
        print(f"LocalHttpServer shutting down after its max_lifetime ({max_lifetime} s)")

    def __enter__(self) -> LocalHttpServer:
        if self.handler is not None:
            handler = self.handler
        elif self.range_support:
            handler = RangeRequestHandler
        else:
            handler = _QuietHandler
        options = {**self.handler_options, "directory": str(self.root_path)}
        queue: Any = multiprocessing.Queue()
        self.process = multiprocessing.Process(
            target=LocalHttpServer._serve,
            args=(queue, handler, options, self.max_lifetime),
            daemon=True,
        )
        self.process.start()
        self.ip, self.port = queue.get(timeout=30)
        self.url = f"http://{self.ip}:{self.port}"
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self.process.kill()
        self.process.join()
