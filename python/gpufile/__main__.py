"""``python -m gpufile`` and the ``gpufile`` script: the same command line as the Rust binary.

Arguments travel as OS strings (bytes that are not UTF-8 included, through Python's
surrogateescape), so a bad argument ends in the command's own error, never a traceback.
``bench --plot`` draws with this interpreter: ``GPUFILE_PYTHON`` is set to ``sys.executable``
unless it names one already.

Ctrl-C: ``read``, ``load`` and ``bench`` catch it themselves (they stop the I/O in flight and
end with one line and status 130); a command that does not (``check``, ``config``,
``explain``) finishes its short work, then ends the same way, never with a traceback.
"""

from __future__ import annotations

import os
import sys

from . import _native


def main(argv: list[str] | None = None) -> int:
    """Run the ``gpufile`` command line in this process.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        The exit status: 0 success, 1 an error (a bad value included), 2 a command line of
        the wrong shape (docs/cli.md).
    """
    args = sys.argv[1:] if argv is None else argv
    if sys.executable and not os.environ.get("GPUFILE_PYTHON"):
        os.environ["GPUFILE_PYTHON"] = sys.executable
    sys.stdout.flush()
    try:
        return _native.cli_main(["gpufile", *args])
    except KeyboardInterrupt:
        # Raised once the command returned: Python's handler, not the command's, saw the
        # signal. One line, as the commands that catch it print, and 128 + SIGINT.
        print("gpufile: error: interrupted (SIGINT)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
