"""``python -m gpufile.safetensors``: see ``_cli``."""

from ._cli import main

raise SystemExit(main())
