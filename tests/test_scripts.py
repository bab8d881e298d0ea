"""The test scripts fail when a check crashed, printed no summary or did not run.

Each script is run (or sourced, for its functions) by bash, with real programs standing in for
the test programs: one killed by SIGSEGV, one that exits 0 printing no summary, one whose
GoogleTest cases skipped. Nothing here needs a GPU, CMake or a conformance folder.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BASH = shutil.which("bash") or "/bin/bash"


def bash(script: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BASH, "-c", script], cwd=cwd, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=60,
    )


def program(path: Path, body: str) -> Path:
    path.write_text("#!" + BASH + "\n" + body)
    path.chmod(0o755)
    return path


GTEST_OK = ('echo "[==========] 2 tests from 1 test suite ran. (1 ms total)"\n'
            'echo "[  PASSED  ] 2 tests."\n')
SEGFAULT = ('echo "[==========] Running 3 tests from 1 test suite."\n'
            'echo "[ RUN      ] A.b"\nkill -SEGV $$\n')


# ---- scripts/kvikio_cpp_conformance.sh: its counting of GoogleTest programs

def conformance(tmp_path: Path, calls: str) -> subprocess.CompletedProcess:
    return bash(
        f'source {ROOT}/scripts/kvikio_cpp_conformance.sh; passed=0 failed=0 failed_names=();'
        f' tmp={tmp_path}; {calls}; summary', cwd=tmp_path)


def test_conformance_program_killed_by_a_signal_fails_the_run(tmp_path):
    program(tmp_path / "ok", GTEST_OK)
    program(tmp_path / "crash", SEGFAULT)
    r = conformance(tmp_path, f"run_gtest ok {tmp_path}/ok '*'; run_gtest crash {tmp_path}/crash '*'")
    assert r.returncode == 1, r.stdout
    assert "crash: 0 passed, 0 failed; FAILED: killed by signal 11" in r.stdout
    assert "== KvikIO C++ conformance: 2 passed, 1 failed" in r.stdout


@pytest.mark.parametrize("body, why", [
    ("echo hello\n", "no GoogleTest summary (exit 0)"),
    ('echo "[==========] 0 tests from 0 test suites ran. (0 ms total)"; echo "[  PASSED  ] 0 tests."\n',
     "ran no test"),
    (GTEST_OK + "exit 3\n", "exit 3 with no failed test"),
])
def test_conformance_program_without_a_passing_summary_fails(tmp_path, body, why):
    program(tmp_path / "t", body)
    r = conformance(tmp_path, f"run_gtest t {tmp_path}/t '*'")
    assert r.returncode == 1, r.stdout
    assert f"failed: t: {why}" in r.stdout


def test_conformance_clean_programs_pass(tmp_path):
    program(tmp_path / "ok", GTEST_OK)
    program(tmp_path / "example", "exit 0\n")
    r = conformance(tmp_path, f"run_gtest ok {tmp_path}/ok '*'; run_example ex {tmp_path}/example")
    assert r.returncode == 0, r.stdout
    assert "== KvikIO C++ conformance: 3 passed, 0 failed" in r.stdout


# ---- scripts/device_round.sh: every part's status kept, a failing one fails the round

def device_round(tmp_path: Path, calls: str) -> subprocess.CompletedProcess:
    return bash(f"source {ROOT}/scripts/device_round.sh; out={tmp_path}; {calls}; report", cwd=tmp_path)


def test_device_round_fails_when_one_part_fails_or_crashes(tmp_path):
    crash = program(tmp_path / "crash", SEGFAULT)
    r = device_round(tmp_path, f"run_part good true; run_part bad false; run_part crash {crash}")
    assert r.returncode == 1, r.stdout
    rows = {p["part"]: p["status"] for p in json.loads((tmp_path / "round.json").read_text())["parts"]}
    assert rows == {"good": "ok", "bad": "FAILED (exit 1)", "crash": "FAILED (exit 139)"}
    assert "== round FAILED: 2 part(s) failed or did not run" in r.stdout


def test_device_round_passes_when_every_part_passes(tmp_path):
    r = device_round(tmp_path, "run_part a true; record b 'skipped: GPUFILE_SKIP_CPP=1 (not built)'")
    assert r.returncode == 0, r.stdout
    assert "== round passed" in r.stdout


def test_device_round_part_that_did_not_run_fails_it(tmp_path):
    r = device_round(tmp_path, "run_part a true; record b 'NOT RUN: no test_device'")
    assert r.returncode == 1, r.stdout


def test_device_round_rust_binary_without_summary_fails(tmp_path):
    quiet = program(tmp_path / "gpu_io", "exit 0\n")
    ok = program(tmp_path / "gpu_stream", 'echo "test result: ok. 4 passed; 0 failed; 0 ignored"\n')
    r = device_round(tmp_path, f"run_part q rust_tests {tmp_path}/q.log {quiet};"
                               f" run_part o rust_tests {tmp_path}/o.log {ok}")
    assert r.returncode == 1, r.stdout
    rows = {p["part"]: p["status"] for p in json.loads((tmp_path / "round.json").read_text())["parts"]}
    assert rows == {"q": "FAILED (exit 1)", "o": "ok"}


def test_device_round_cpp_device_test_that_skips_fails(tmp_path):
    (tmp_path / "target/gpu-tests-cpp").mkdir(parents=True)
    program(tmp_path / "target/gpu-tests-cpp/test_device",
            GTEST_OK + 'echo "[  SKIPPED ] 1 test, listed below:"\n')
    r = device_round(tmp_path, "run_part cpp cpp_device")
    assert r.returncode == 1, r.stdout
    assert "C++ device tests skipped on the GPU machine" in r.stdout


# ---- scripts/kvikio_suite_verdict.py: KvikIO's suite, beyond its runner's exit status

ENV = {"kind": "env", "kvikio_is_gpufile": True, "gpufile": "x"}
END = {"kind": "end", "exitstatus": 1}


def verdict(tmp_path: Path, records: list[dict]) -> subprocess.CompletedProcess:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return subprocess.run([sys.executable, str(ROOT / "scripts/kvikio_suite_verdict.py"), str(path)],
                          capture_output=True, text=True, timeout=60)


def outcome_of(nodeid: str, outcome: str) -> dict:
    return {"kind": "test", "nodeid": nodeid, "when": "call", "outcome": outcome, "reason": ""}


PASSED = outcome_of("tests/test_numpy.py::test_a", "passed")


def test_kvikio_suite_known_differences_pass(tmp_path):
    r = verdict(tmp_path, [ENV, PASSED,
                           outcome_of("tests/test_http_io.py::test_retry_http_503_fails[1]", "failed"),
                           {"kind": "collect", "nodeid": "tests/test_zarr_v3.py", "outcome": "error",
                            "reason": "ModuleNotFoundError: No module named 'zarr'"}, END])
    assert r.returncode == 0, r.stdout
    assert "third-party module zarr missing" in r.stdout


@pytest.mark.parametrize("records, problem", [
    ([ENV, PASSED, outcome_of("tests/test_mmap.py::test_b", "failed"), END],
     "failed: tests/test_mmap.py::test_b"),
    ([ENV, PASSED, {"kind": "start", "nodeid": "tests/t.py::hang"}],
     "the run did not finish"),
    ([ENV, PASSED,
      {"kind": "collect", "nodeid": "tests/test_nvcomp.py", "outcome": "error",
       "reason": "ModuleNotFoundError: No module named 'kvikio.nvcomp'"}, END],
     "not collectable: tests/test_nvcomp.py"),
    ([{**ENV, "kvikio_is_gpufile": False}, PASSED, END],
     "`kvikio` is not gpufile"),
    ([ENV, END], "no test passed"),
])
def test_kvikio_suite_regression_or_unfinished_run_fails(tmp_path, records, problem):
    r = verdict(tmp_path, records)
    assert r.returncode == 1, r.stdout
    assert problem in r.stdout
    assert "kvikio-suite verdict: FAIL" in r.stdout


# ---- scripts/test.sh: a part it cannot run fails the run, unless opted out

@pytest.fixture
def bare_path(tmp_path):
    """A PATH with bash and dirname only: no cmake, no C++ compiler, no valgrind, no cargo."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return str(bin_dir)


def test_test_sh_fails_at_once_without_cmake_or_valgrind(tmp_path, bare_path):
    env = {"PATH": bare_path, "GPUFILE_SKIP_CPP": "", "GPUFILE_SKIP_VALGRIND": ""}
    r = bash(f"bash {ROOT}/scripts/test.sh", cwd=tmp_path, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED: the C and C++ API tests cannot run here; missing: cmake c++" in r.stdout
    assert "== lints" not in r.stdout  # before the long part

    r = bash(f"bash {ROOT}/scripts/test.sh", cwd=tmp_path, env={**env, "GPUFILE_SKIP_CPP": "1"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "!! LEFT OUT (GPUFILE_SKIP_CPP=1): the C and C++ API tests" in r.stdout
    assert "FAILED: valgrind memcheck cannot run here; missing: valgrind" in r.stdout


# ---- the variables the scripts set are gpufile's own, not misspelt settings

SCRIPT_VARS = ("GPUFILE_TEST_MACHINE", "GPUFILE_TEST_SHUFFLE", "GPUFILE_TEST_TIME_SCALE",
               "GPUFILE_REQUIRE_GPU", "GPUFILE_SKIP_CPP", "GPUFILE_SKIP_VALGRIND")


def test_the_test_commands_variables_are_not_flagged(tmp_path):
    """scripts/test.sh and device_round.sh run every test under them: an `import gpufile` that
    warned of each (GPUFILE_REQUIRE_GPU: "did you mean GPUFILE_REQUIRE_GDS?") would put a warning
    into every test's subprocess."""
    env = {**os.environ, **{v: "1" for v in SCRIPT_VARS}}
    r = subprocess.run([sys.executable, "-W", "error", "-c", "import gpufile"], env=env,
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "not one gpufile reads" not in r.stderr
    # a misspelling of one is still a warning
    env["GPUFILE_REQUIRE_GPUS"] = "1"
    r = subprocess.run([sys.executable, "-c", "import gpufile"], env=env,
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "GPUFILE_REQUIRE_GPUS is not one gpufile reads" in r.stderr
