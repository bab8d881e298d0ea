#!/usr/bin/env bash
# Puts NIXL's backend plugin headers (the files a `make install` of NIXL puts under
# include/) into an ignored folder, for building the GPUFILE plugin against a NIXL that came as
# a wheel, which ships no headers (docs/nixl.md):
#
#   scripts/nixl_headers.sh [REF] [DEST]      # REF: a tag or commit of ai-dynamo/nixl
#   cmake -S . -B build -DGPUFILE_BUILD_NIXL_PLUGIN=ON -DNIXL_INCLUDE_DIR=DEST
#
# REF defaults to v1.5.1 (the nixl-cu13 wheel the tests use), DEST to build/nixl-headers/REF.
# The headers come from GitHub's tarball of REF, or from a local clone when NIXL_GIT_DIR names
# its git directory (no network then). Nothing of NIXL's is committed to this project.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:-v1.5.1}
dest=${2:-build/nixl-headers/$ref}
# Source path in NIXL's tree -> path under include/ (the layout NIXL's meson install gives).
files=(
  "src/api/cpp/nixl_types.h nixl_types.h"
  "src/api/cpp/nixl_params.h nixl_params.h"
  "src/api/cpp/nixl_descriptors.h nixl_descriptors.h"
  "src/api/cpp/backend/backend_engine.h backend/backend_engine.h"
  "src/api/cpp/backend/backend_aux.h backend/backend_aux.h"
  "src/api/cpp/backend/backend_plugin.h backend/backend_plugin.h"
  "src/core/telemetry/telemetry_event.h telemetry_event.h"
  "src/utils/common/nixl_log.h utils/common/nixl_log.h"
  "src/utils/common/nixl_time.h utils/common/nixl_time.h"
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${NIXL_GIT_DIR:-}" ]; then
  for f in "${files[@]}"; do
    set -- $f
    mkdir -p "$tmp/src/$(dirname "$1")"
    git --git-dir="$NIXL_GIT_DIR" show "$ref:$1" > "$tmp/src/$1"
  done
else
  url="https://github.com/ai-dynamo/nixl/archive/$ref.tar.gz"
  echo "downloading $url"
  if ! curl -fsSL "$url" -o "$tmp/nixl.tar.gz"; then
    echo "FAILED: could not download $url (no way to GitHub from here?); set NIXL_GIT_DIR to" \
      "the git directory of a clone of ai-dynamo/nixl, or give cmake NIXL_INCLUDE_DIR" \
      "(docs/nixl.md)" >&2
    exit 1
  fi
  tar -xzf "$tmp/nixl.tar.gz" -C "$tmp" --strip-components=1 --wildcards \
    '*/src/api/cpp/*' '*/src/core/telemetry/*' '*/src/utils/common/*'
fi
rm -rf "$dest"
for f in "${files[@]}"; do
  set -- $f
  mkdir -p "$dest/$(dirname "$2")"
  cp "$tmp/src/$1" "$dest/$2"
done
echo "$ref" > "$dest/NIXL_REF"
echo "NIXL $ref headers in $dest (cmake -DNIXL_INCLUDE_DIR=$dest)"
