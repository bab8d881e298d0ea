#!/usr/bin/env bash
# Every CPU test, from a fresh clone: lints, Rust tests, pytest against a debug build of the
# Python extension, its type stubs checked against that build (mypy stubtest), and the
# documentation site built with warnings as errors. Needs cargo >= 1.85 and python3 >= 3.11.
# GPU tests skip here, each with its reason.
#
# It uses a virtualenv of its own (.venv-test, or $GPUFILE_TEST_VENV), so the release build the
# demo installed in .venv stays as it is; the test build is a debug build, so pytest also runs
# the binding with Rust's overflow checks and debug assertions on.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${GPUFILE_TEST_VENV:-.venv-test}

echo "== lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# Intra-doc links stay valid (rustdoc's warnings are errors), and cargo's own warnings about the
# docs (two targets writing the same page) fail too: --quiet would hide them.
doc_log=$(RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps 2>&1) || { echo "$doc_log"; exit 1; }
if grep -q "^warning" <<<"$doc_log"; then echo "$doc_log"; echo "cargo doc warned: fix it"; exit 1; fi

echo "== cargo test"
# Cargo names each test binary ("Running tests/cli.rs (.../cli-...)", "Doc-tests gpufile") before
# its tests; the harness prints a dot per test.
cargo test --workspace 2>&1 -- --quiet

echo "== C and C++ APIs: CMake build, GoogleTest (plain and ASan+UBSan), install, examples/cpp"
if command -v cmake >/dev/null && [ -e /usr/include/gtest/gtest.h ]; then
  bash scripts/cpp_test.sh
else
  echo "skipped: needs cmake and GoogleTest (Debian: cmake libgtest-dev libgmock-dev)"
fi

echo "== valgrind memcheck over the host-path Rust tests"
if command -v valgrind >/dev/null; then bash scripts/sanitize.sh; else echo "skipped: no valgrind"; fi

echo "== python test and docs requirements into $venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r tests/requirements.txt -r docs/requirements.txt
echo "== building the Rust extension into $venv (debug build; cargo's progress follows)"
# (pip's "Ignoring ...: markers 'extra == ...'" lines are the optional extras, not a failure)
VIRTUAL_ENV="$PWD/$venv" "$venv/bin/maturin" develop 2>&1 | { grep -v "^Ignoring .*: markers" || true; }
echo "   built: $("$venv/bin/python" -c 'import gpufile; print("gpufile", gpufile.__version__)')"

echo "== pytest"
"$venv/bin/python" -m pytest -q -rs tests "$@"

echo "== type stubs: python/gpufile/_native.pyi against the built extension (mypy stubtest)"
"$venv/bin/python" -m mypy.stubtest gpufile._native

echo "== documentation (mkdocs build --strict: any warning fails it)"
MKDOCS="$venv/bin/mkdocs" bash scripts/docs.sh
