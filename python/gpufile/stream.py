"""cuFile stream registration, as ``kvikio.stream``: :func:`stream_register` and
:func:`stream_deregister` (also at ``gpufile.`` top level)."""

from .cufile import stream_deregister, stream_register

__all__ = ["stream_deregister", "stream_register"]
