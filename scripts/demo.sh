#!/usr/bin/env bash
# The main job on a fresh machine: install gpufile (release build) into a virtualenv, make a test
# file if none is given, read it and print the path report and throughput.
#   bash scripts/demo.sh [FILE] [extra `gpufile read` options]
# Default file: 1 GiB of random bytes at ${TMPDIR:-/tmp}/gpufile-demo.bin (made once).
set -euo pipefail

# Only the demo's own default file is ever made; a FILE the user names must exist (a mistyped path
# must not become a new 1 GiB file), which is checked before minutes of building, from the
# folder the demo was started in.
default=${TMPDIR:-/tmp}/gpufile-demo.bin
file=${1:-$default}
[ $# -gt 0 ] && shift
if [ ! -e "$file" ] && [ "$file" != "$default" ]; then
    echo "demo: $file does not exist (give an existing file, or no FILE for the demo's own)" >&2
    exit 1
fi
case $file in /*) ;; *) file=$PWD/$file ;; esac

cd "$(dirname "$0")/.."
venv=${GPUFILE_VENV:-.venv}

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
echo "== installing maturin and numpy into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "maturin>=1.7,<2" numpy
echo "== building the Rust extension into $venv (release build; cargo's progress follows)"
# (pip's "Ignoring ...: markers 'extra == ...'" lines are the optional extras, not a failure)
VIRTUAL_ENV="$PWD/$venv" "$venv/bin/maturin" develop --release 2>&1 \
    | { grep -v "^Ignoring .*: markers" || true; }
echo "   built: $("$venv/bin/python" -c 'import gpufile; print("gpufile", gpufile.__version__)')"

if [ ! -e "$file" ]; then
    echo "making $file (1 GiB of random bytes)"
    head -c $((1 << 30)) /dev/urandom > "$file"
fi

echo "== gpufile read $file (3 runs, median; the file is in the page cache after the first)"
"$venv/bin/gpufile" read "$file" --repeat 3 "$@"
echo
echo "== the same read from Python (import gpufile as kvikio), with the path report"
"$venv/bin/python" - "$file" <<'PY'
import statistics, sys, time
from pathlib import Path
import numpy as np
import gpufile as kvikio

path = Path(sys.argv[1])
try:
    import cupy as xp
    xp.cuda.runtime.getDeviceCount()
except Exception:
    xp = np  # no GPU here: host memory
where = "GPU memory" if xp is not np else "host memory"
buf = xp.empty(path.stat().st_size, dtype=xp.uint8)
runs = 3
with kvikio.CuFile(path, "r") as f:
    # Untimed: the first read into a fresh buffer also faults its pages in (or maps them for the
    # GPU), a one-off cost of new memory, not of reading.
    f.read(buf)
    times = []
    for _ in range(runs):
        with kvikio.observe() as obs:
            t = time.perf_counter()
            n = f.read(buf)
            times.append(time.perf_counter() - t)
        assert n == buf.nbytes
    backend, reason = f.io_path_for(buf)
dt = statistics.median(times)
print(f"warm read: {n} bytes into {where} in {dt:.3f} s = {n / dt / 1e9:.2f} GB/s (median of "
      f"{runs} reads after an untimed first one, which also maps the fresh buffer in)")
print(f"into {where} via {backend} ({reason}); the last read's path report:")
print(obs.report)
PY
