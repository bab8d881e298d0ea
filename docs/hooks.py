"""mkdocs hook: replaces ``<!-- gpufile-help: SUBCOMMAND -->`` in a page with the output of
``python -m gpufile SUBCOMMAND --help``, so the command-line reference is the command's own help
and never goes stale. The gpufile package must be importable (scripts/test.sh builds it first)."""

from __future__ import annotations

import re
import subprocess
import sys

_MARK = re.compile(r"<!-- gpufile-help:\s*([a-z-]*)\s*-->")


def _help(sub: str) -> str:
    args = [sys.executable, "-m", "gpufile", *([sub] if sub else []), "--help"]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[1:])} failed ({done.returncode}): {done.stderr}")
    return done.stdout.rstrip()


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - mkdocs API
    return _MARK.sub(lambda m: f"```text\n{_help(m.group(1))}\n```", markdown)
