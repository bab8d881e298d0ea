"""Every KvikIO 26.10 module and public name that docs/compatibility.md marks "same" or "better"
resolves in gpufile at the same place (``import gpufile as kvikio`` code finds it)."""

import importlib

import pytest

# module (relative to gpufile) -> names, as KvikIO 26.10 exports them.
LAYOUT = {
    "": ["CompatMode", "__version__", "__git_commit__", "bounce_buffer_free", "memory_deregister",
         "memory_register", "CuFile", "clear_page_cache", "drop_file_page_cache",
         "drop_system_page_cache", "get_page_cache_info", "stream_deregister", "stream_register",
         "kvikio_deprecation_notice", "Mmap", "RemoteIOBackend", "RemoteReactorDispatch",
         "nsys_plugin_search_dir", "Summary", "SummaryMonitor"],
    "benchmarks.utils": ["drop_vm_cache", "pprint_sys_info", "parse_directory"],
    "buffer": ["memory_register", "memory_deregister", "bounce_buffer_free"],
    "cufile": ["IOFutureStream", "IOFuture", "CuFile", "get_page_cache_info",
               "drop_file_page_cache", "drop_system_page_cache", "clear_page_cache"],
    "cufile_driver": ["properties", "libcufile_version", "driver_open", "driver_close",
                      "initialize", "get", "set", "ConfigContextManager"],
    "defaults": ["set", "get", "is_compat_mode_preferred", "ConfigContextManager"],
    "mmap": ["Mmap"],
    "numcodecs": ["CudaCodec"],
    "nsys": ["nsys_plugin_search_dir"],
    "numpy": ["FileLike", "LikeWrapper", "fromfile", "tofile"],
    "statistics": ["Summary", "SummaryMonitor"],
    "stream": ["stream_register", "stream_deregister"],
    "utils": ["call_once", "kvikio_deprecation_notice", "kvikio_deprecate_module"],
    "zarr": ["GDSStore"],
}


@pytest.mark.parametrize("module", sorted(LAYOUT))
def test_kvikio_names_resolve(module):
    if module == "zarr":
        pytest.importorskip("zarr", minversion="3.0.0")
    if module == "numcodecs":
        pytest.importorskip("numcodecs")
    mod = importlib.import_module("gpufile" + (f".{module}" if module else ""))
    missing = [name for name in LAYOUT[module] if not hasattr(mod, name)]
    assert not missing, f"gpufile.{module} lacks {missing}"


def test_reexports_are_the_same_objects():
    import gpufile
    import gpufile.buffer
    import gpufile.stream

    assert gpufile.buffer.memory_register is gpufile.memory_register
    assert gpufile.stream.stream_deregister is gpufile.stream_deregister
    assert gpufile.cufile.clear_page_cache is gpufile.clear_page_cache
    assert gpufile.statistics.SummaryMonitor is gpufile.SummaryMonitor


def test_cuda_codec_is_an_abstract_numcodecs_codec():
    numcodecs = pytest.importorskip("numcodecs")
    from gpufile.numcodecs import CudaCodec

    assert issubclass(CudaCodec, numcodecs.abc.Codec)
    with pytest.raises(TypeError, match="abstract"):
        CudaCodec()

    class Identity(CudaCodec):
        codec_id = "identity-test"

        def encode(self, buf):
            return buf

        def decode(self, buf, out=None):
            return buf

    assert Identity().decode(Identity().encode(b"ab")) == b"ab"
