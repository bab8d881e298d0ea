#!/usr/bin/env bash
# Every CPU test, from a fresh clone: lints, Rust tests, then pytest against a build of the
# Python extension in a virtualenv (.venv, or $GPUFILE_VENV). Needs cargo and python3 >= 3.11;
# installs tests/requirements.txt into the virtualenv. GPU tests skip with a reason here.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${GPUFILE_VENV:-.venv}

echo "== lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== cargo test"
cargo test --workspace --quiet 2>&1

echo "== valgrind memcheck over the host-path Rust tests"
if command -v valgrind >/dev/null; then bash scripts/sanitize.sh; else echo "skipped: no valgrind"; fi

echo "== python package"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
VIRTUAL_ENV="$PWD/$venv" "$venv/bin/maturin" develop --quiet

echo "== pytest"
"$venv/bin/python" -m pytest -q tests "$@"
