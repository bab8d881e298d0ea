#!/usr/bin/env bash
# Release build: the sdist and manylinux_2_28 (RHEL 8 and newer) abi3 wheels for x86_64 and aarch64
# (GH200 / Grace), into dist/, each checked with `twine check` and `auditwheel show`.
#   bash scripts/build_wheels.sh [TARGET ...]     default: x86_64 and aarch64
# Needs cargo with the rustup targets (added here when rustup is present) and Python >= 3.11;
# maturin, ziglang (the linker, targeting glibc 2.28 through --compatibility; below 0.15
# because maturin reads `zig env` as JSON, which zig 0.15 changed), twine and
# auditwheel are installed into a virtualenv of their own ($GPUFILE_RELEASE_VENV, default
# .venv-release). Slow (a release build per target): not part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${GPUFILE_RELEASE_VENV:-.venv-release}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
venv=$(cd "$venv" && pwd)
echo "== installing the release tools into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "maturin>=1.7,<2" "ziglang>=0.13,<0.15" twine auditwheel
# maturin looks for a `zig` on PATH: the ziglang wheel's binary.
zig_dir=$("$venv/bin/python" -c 'import os, ziglang; print(os.path.dirname(ziglang.__file__))')
export PATH="$venv/bin:$zig_dir:$PATH"

rm -rf dist
mkdir -p dist
echo "== sdist"
maturin sdist --out dist

for target in "${targets[@]}"; do
    if command -v rustup >/dev/null; then
        rustup target list --installed | grep -qx "$target" || rustup target add "$target"
    fi
    echo "== wheel for $target (manylinux_2_28, release build: several minutes the first time)"
    maturin build --release --zig --compatibility manylinux_2_28 --target "$target" --out dist
done

echo "== checks"
twine check --strict dist/*
for whl in dist/*.whl; do
    echo "-- $whl"
    auditwheel show "$whl"
done
ls -l dist
