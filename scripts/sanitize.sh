#!/usr/bin/env bash
# The host-path Rust tests (the unsafe pread/pwrite loops, the pool, raw-pointer tasks) under
# valgrind memcheck: any invalid read or write, or use of uninitialised memory, fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
bin=$(cargo test -p gpufile --test host_io --no-run --message-format=json 2>"$logs/build.log" \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])') || { cat "$logs/build.log"; exit 1; }
[ -x "$bin" ] || { echo "no host_io test binary was built"; exit 1; }
log=$logs/memcheck.log
valgrind --quiet --error-exitcode=99 --errors-for-leak-kinds=definite --show-leak-kinds=definite --leak-check=full \
  "$bin" --test-threads=2 >"$log" 2>&1 || { tail -40 "$log"; echo "valgrind memcheck: FAILED"; exit 1; }
tail -20 "$log"
# A run that printed no passing summary ran nothing under memcheck.
grep -q "^test result: ok\. [1-9]" "$log" || { echo "valgrind memcheck: no test ran"; exit 1; }
echo "valgrind memcheck: host-path tests clean"
