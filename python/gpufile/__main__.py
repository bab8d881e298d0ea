"""``python -m gpufile`` and the ``gpufile`` script: the same command line as the Rust binary."""

from __future__ import annotations

import sys

from . import _native


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    sys.stdout.flush()
    return _native.cli_main(["gpufile", *args])


if __name__ == "__main__":
    sys.exit(main())
