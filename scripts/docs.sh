#!/usr/bin/env bash
# Builds the documentation site with every warning an error; scripts/test.sh runs it, and
# tests/test_docs.py runs it on a copy with a warning put in, which must fail.
#   bash scripts/docs.sh [SITE_DIR]      (default: ${TMPDIR:-/tmp}/gpufile-site)
# mkdocs is $MKDOCS, else the one on PATH (pip install -r docs/requirements.txt). No --quiet:
# it hides warnings from the log, and with them from --strict's count, so nothing would fail.
set -euo pipefail
cd "$(dirname "$0")/.."
site=${1:-${TMPDIR:-/tmp}/gpufile-site}
NO_MKDOCS_2_WARNING=1 "${MKDOCS:-mkdocs}" build --strict --site-dir "$site"
echo "   built into $site"
