"""gpufile.utils: KvikIO's deprecation helpers and call_once, and the deprecated
clear_page_cache they mark."""

import subprocess
import sys
import threading
import time
import warnings

import pytest

import gpufile
from gpufile import utils


def test_deprecation_notice_warns_and_documents():
    @utils.kvikio_deprecation_notice("Use bar() instead.", since="1.2")
    def foo(x, *, y=1):
        """Adds."""
        return x + y

    with pytest.warns(FutureWarning, match=r"Use bar\(\) instead\.") as record:
        assert foo(1, y=2) == 3
    assert record[0].filename == __file__  # the warning points at the caller
    assert foo.__doc__.startswith(".. deprecated:: 1.2 Use bar() instead.\n\nAdds.")
    assert foo.__name__ == "foo" and foo.__wrapped__.__name__ == "foo"
    assert gpufile.kvikio_deprecation_notice is utils.kvikio_deprecation_notice


def test_deprecate_module_warns_with_version():
    with pytest.warns(FutureWarning, match="deprecated since 9.9. Use gpufile.x instead."):
        utils.kvikio_deprecate_module("Use gpufile.x instead.", since="9.9")


def test_call_once_runs_once_across_threads():
    calls = []

    @utils.call_once
    def slow(value):
        calls.append(value)
        time.sleep(0.05)
        return value * 10

    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(slow(i))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [calls[0] * 10] * 8
    assert slow(123) == calls[0] * 10  # later arguments are ignored, as in KvikIO


def test_call_once_retries_after_an_exception():
    attempts = []

    @utils.call_once
    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first call fails")
        return "ok"

    with pytest.raises(RuntimeError, match="first call fails"):
        flaky()
    assert flaky() == "ok" and flaky() == "ok" and len(attempts) == 2


def test_clear_page_cache_is_deprecated_alias():
    with pytest.warns(FutureWarning, match="Use :func:`drop_system_page_cache` instead"):
        assert isinstance(gpufile.clear_page_cache(True, False), bool)
    assert gpufile.clear_page_cache.__doc__.startswith(".. deprecated:: 26.04")


def test_import_gpufile_loads_no_http_server():
    code = "import sys, gpufile; print('http.server' in sys.modules, " \
           "'multiprocessing' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        utils.nope  # noqa: B018
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set(utils.__all__) >= {"call_once", "kvikio_deprecate_module",
                                      "kvikio_deprecation_notice"}
