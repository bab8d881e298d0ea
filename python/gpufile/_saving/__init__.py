"""Saving safetensors files and checkpoints, in one place: the entry points of
``gpufile.safetensors`` (``api``), local saves (``local``), saves by URL (``remote``),
the tensors described for the core (``rows``) and ``async_save``'s snapshot and background
write (``background``). Private: users import these from ``gpufile.safetensors`` (and its
``torch``, ``numpy`` and ``flax`` modules) and ``gpufile.torch``."""
