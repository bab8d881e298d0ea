#!/usr/bin/env bash
# Builds libplugin_GPUFILE.so, NIXL's GPUFILE backend (docs/nixl.md), into BUILD_DIR/nixl/:
#
#   scripts/build_nixl_plugin.sh [BUILD_DIR]          # default build/nixl-plugin
#
# NIXL_REF (default v1.5.1) picks the NIXL headers, fetched by scripts/nixl_headers.sh into
# build/nixl-headers/NIXL_REF unless NIXL_INCLUDE_DIR names a folder that has them already.
# GPUFILE_CARGO_PROFILE (default release) is the profile libgpufile is built with; cargo's
# target directory is $CARGO_TARGET_DIR or target/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ref=${NIXL_REF:-v1.5.1}
# Paths given by the caller are the caller's (relative to where it runs).
build=$(realpath -m "${1:-$root/build/nixl-plugin}")
inc=$(realpath -m "${NIXL_INCLUDE_DIR:-$root/build/nixl-headers/$ref}")
target=$(realpath -m "${CARGO_TARGET_DIR:-$root/target}")
cd "$root"
if [ ! -e "$inc/backend/backend_plugin.h" ]; then
  scripts/nixl_headers.sh "$ref" "$inc"
fi
cmake -S . -B "$build" -DGPUFILE_BUILD_NIXL_PLUGIN=ON -DNIXL_INCLUDE_DIR="$inc" \
  -DGPUFILE_CARGO_PROFILE="${GPUFILE_CARGO_PROFILE:-release}" \
  -DGPUFILE_CARGO_TARGET_DIR="$target" >/dev/null
cmake --build "$build" --target plugin_GPUFILE -j "${GPUFILE_BUILD_JOBS:-2}"
echo "$build/nixl/libplugin_GPUFILE.so"
