#!/usr/bin/env bash
# Every CPU test, from a fresh clone: lints, Rust tests, pytest against a debug build of the
# Python extension, its type stubs checked against that build (mypy stubtest), and the
# documentation site built with warnings as errors. Needs cargo >= 1.85 and python3 >= 3.11.
# GPU tests skip here, each with its reason (a skip whose reason is not allowed on a CPU machine
# fails the run: tests/conftest.py, GPUFILE_TEST_MACHINE). pytest runs in a shuffled order, its
# seed printed; GPUFILE_TEST_SHUFFLE=SEED repeats an order, GPUFILE_TEST_SHUFFLE= keeps the
# file order.
#
# A part that cannot run here (no cmake, GoogleTest or valgrind) fails the run with the reason.
# For a developer's local run only, GPUFILE_SKIP_CPP=1 (the C and C++ API tests) and
# GPUFILE_SKIP_VALGRIND=1 (memcheck) leave a part out, said loudly at the start and the end; CI
# (.ci/run) never sets them.
#
# It uses a virtualenv of its own (.venv-test, or $GPUFILE_TEST_VENV), so the release build the
# demo installed in .venv stays as it is; the test build is a debug build, so pytest also runs
# the binding with Rust's overflow checks and debug assertions on.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${GPUFILE_TEST_VENV:-.venv-test}
left_out=()

# can_run PART OPT_OUT_VAR MISSING...: succeeds when nothing is missing. Else the run fails with
# the reason, unless the developer set OPT_OUT_VAR=1: then the part is left out (returns 1), and
# said so now and at the end.
can_run() {
  local part=$1 opt_out=$2
  shift 2
  [ $# -eq 0 ] && return 0
  if [ "${!opt_out:-}" = 1 ]; then
    echo "!! LEFT OUT ($opt_out=1): $part; missing here: $*"
    left_out+=("$part ($opt_out=1; missing: $*)")
    return 1
  fi
  echo "FAILED: $part cannot run here; missing: $*"
  echo "        install it (Debian: apt-get install $(debian_packages "$@")), or, for a local run"
  echo "        only, set $opt_out=1 to leave this part out"
  exit 1
}
debian_packages() {  # the Debian packages of what can_run names missing
  local m pkgs=()
  for m in "$@"; do
    case "$m" in
      GoogleTest) pkgs+=(libgtest-dev libgmock-dev) ;;
      c++) pkgs+=(g++) ;;
      *) pkgs+=("$m") ;;
    esac
  done
  echo "${pkgs[*]}"
}
missing_for_cpp() {  # what scripts/cpp_test.sh needs and this machine lacks
  command -v cmake >/dev/null || echo cmake
  command -v c++ >/dev/null || echo c++
  command -v pkg-config >/dev/null || echo pkg-config
  [ -e /usr/include/gtest/gtest.h ] && [ -e /usr/include/gmock/gmock.h ] || echo GoogleTest
}

# What the C/C++ and valgrind parts need, checked first: a run that cannot be whole fails now,
# not after the build.
run_cpp=0 run_valgrind=0
mapfile -t missing < <(missing_for_cpp)
can_run "the C and C++ API tests" GPUFILE_SKIP_CPP "${missing[@]}" && run_cpp=1
missing=()
command -v valgrind >/dev/null || missing=(valgrind)
can_run "valgrind memcheck" GPUFILE_SKIP_VALGRIND "${missing[@]}" && run_valgrind=1

# The run needs about 12 GB of free disk (the Rust builds, then PyTorch's wheels); what is free
# is printed so that a run that fails for want of space says so.
disk_free() { df -h . | awk 'NR == 2 {print $4 " free on " $6}'; }
echo "== disk: $(disk_free)"
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

echo "== examples/rust: the program a Rust user copies, a project of its own over the crate"
# The workspace's target directory: the crate and its dependencies are built already. --locked:
# where the crate's dependencies changed, refresh its lock file (cp Cargo.lock examples/rust/,
# then one plain `cargo run` there prunes it).
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" \
    cargo run --quiet --locked --manifest-path examples/rust/Cargo.toml

echo "== C and C++ APIs: CMake build, GoogleTest (plain and ASan+UBSan), install, examples/cpp"
if [ $run_cpp = 1 ]; then bash scripts/cpp_test.sh; else echo "!! left out (GPUFILE_SKIP_CPP=1)"; fi

echo "== valgrind memcheck over the host-path Rust tests"
if [ $run_valgrind = 1 ]; then bash scripts/sanitize.sh; else echo "!! left out (GPUFILE_SKIP_VALGRIND=1)"; fi

echo "== python test and docs requirements into $venv (disk: $(disk_free))"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# --no-cache-dir: pip's cache would hold a second copy of PyTorch's 3 GB of wheels.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
    -r tests/requirements.txt -r docs/requirements.txt
echo "== building the Rust extension into $venv (debug build; cargo's progress follows)"
# (pip's "Ignoring ...: markers 'extra == ...'" lines are the optional extras, not a failure)
VIRTUAL_ENV="$PWD/$venv" "$venv/bin/maturin" develop 2>&1 | { grep -v "^Ignoring .*: markers" || true; }
echo "   built: $("$venv/bin/python" -c 'import gpufile; print("gpufile", gpufile.__version__)')"

# One pass, in an order shuffled with a seed chosen per run (tests that pass only in file order
# show up); GPUFILE_TEST_SHUFFLE=SEED repeats a run's order, GPUFILE_TEST_SHUFFLE= (empty) keeps
# the file order.
seed=${GPUFILE_TEST_SHUFFLE-$((RANDOM * 32768 + RANDOM))}
if [ -n "$seed" ]; then
  echo "== pytest (order shuffled, seed $seed: GPUFILE_TEST_SHUFFLE=$seed repeats it)"
else
  echo "== pytest (file order: GPUFILE_TEST_SHUFFLE is empty)"
fi
# pytest gets a TMPDIR of its own: a passing run leaves nothing there but pytest's own (emptied)
# folder, as a user's machine must be left (pyproject.toml: tmp_path_retention_policy).
test_tmp=$(mktemp -d)
chmod 1777 "$test_tmp"  # as /tmp: tests that drop root make and open files there too
GPUFILE_TEST_SHUFFLE=$seed GPUFILE_TEST_MACHINE=${GPUFILE_TEST_MACHINE:-cpu} TMPDIR=$test_tmp \
  "$venv/bin/python" -m pytest -q -rs tests "$@"
left=$(find "$test_tmp" -mindepth 1 ! -path "$test_tmp/pytest-of-*" -o -path "$test_tmp/pytest-of-*/*" \
  ! -name pytest-current)
if [ -n "$left" ]; then
  echo "FAILED: the tests left files behind in their TMPDIR ($(du -sh "$test_tmp" | cut -f1)):"
  echo "$left" | head -20
  exit 1
fi
rm -rf "$test_tmp"

echo "== type stubs: python/gpufile/_native.pyi against the built extension (mypy stubtest)"
"$venv/bin/python" -m mypy.stubtest gpufile._native

echo "== documentation (mkdocs build --strict: any warning fails it)"
MKDOCS="$venv/bin/mkdocs" bash scripts/docs.sh

if [ ${#left_out[@]} -gt 0 ]; then
  echo "!! PASSED WITHOUT ${#left_out[@]} part(s) of the test command, left out on request:"
  printf '!!   %s\n' "${left_out[@]}"
fi
