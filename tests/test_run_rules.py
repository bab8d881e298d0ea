"""The rules tests/conftest.py holds a test run to (the interface of scripts/test.sh and
scripts/device_round.sh): skips checked against the machine's allow-list, GPUFILE_REQUIRE_GPU,
GPUFILE_TEST_SHUFFLE and GPUFILE_TEST_TIME_SCALE. Each case runs pytest in a child over a folder
holding a copy of the conftest and a few small test files."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

CONFTEST = pathlib.Path(__file__).with_name("conftest.py")


def run_pytest(tmp_path, files: dict[str, str], **env) -> subprocess.CompletedProcess:
    for name, code in files.items():
        (tmp_path / name).write_text(textwrap.dedent(code))
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs",
                           "-o", "addopts=", str(tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**clean, **env})


SKIPS = """
import pytest

def test_runs():
    pass

def test_no_gpu():
    pytest.skip("no GPU: the CUDA driver finds no device")

def test_two_gpus():
    pytest.skip("needs 2 or more GPUs; this machine has 1")
"""


def test_skips_on_the_machines_list_pass_and_others_fail_the_run_listed(tmp_path):
    r = run_pytest(tmp_path, {"test_a.py": SKIPS})
    assert r.returncode == 0, r.stdout
    r = run_pytest(tmp_path, {"test_b.py": """
        import pytest

        def test_missing_package():
            pytest.importorskip("no_such_package_here")
    """})
    assert r.returncode == 1, r.stdout
    assert "skips not allowed on the cpu machine" in r.stdout
    assert re.search(r"test_b.py::test_missing_package: could not import "
                     r"'no_such_package_here'", r.stdout), r.stdout
    # On the GPU machine the no-GPU skip is no longer allowed; two GPUs still are.
    (tmp_path / "test_b.py").unlink()
    r = run_pytest(tmp_path, {}, GPUFILE_TEST_MACHINE="gpu")
    assert r.returncode == 1, r.stdout
    assert "test_a.py::test_no_gpu: no GPU: the CUDA driver" in r.stdout
    assert "test_two_gpus" not in r.stdout.split("skips not allowed")[1]


def test_require_gpu_fails_each_test_skipped_for_want_of_a_gpu_with_the_reason(tmp_path):
    r = run_pytest(tmp_path, {"test_a.py": SKIPS}, GPUFILE_REQUIRE_GPU="1")
    assert r.returncode == 1, r.stdout
    assert "test_a.py::test_runs PASSED" in r.stdout
    assert "test_a.py::test_two_gpus SKIPPED" in r.stdout
    assert "test_a.py::test_no_gpu FAILED" in r.stdout
    assert ("GPUFILE_REQUIRE_GPU=1, and this test would have skipped for want of a GPU: no GPU: "
            "the CUDA driver finds no device") in r.stdout


def _order(stdout: str) -> list[str]:
    return re.findall(r"^(test_\w+\.py::\w+) PASSED", stdout, re.M)


def test_shuffle_is_the_same_for_a_seed_and_keeps_each_module_together(tmp_path):
    files = {f"test_m{m}.py": "\n".join(f"def test_{m}_{i}():\n    pass\n" for i in range(8))
             for m in range(4)}
    plain = _order(run_pytest(tmp_path, files).stdout)
    assert len(plain) == 32
    runs = {seed: run_pytest(tmp_path, {}, GPUFILE_TEST_SHUFFLE=seed) for seed in ("1", "2")}
    for seed, r in runs.items():
        assert f"GPUFILE_TEST_SHUFFLE={seed}" in r.stdout  # the seed is shown
        order = _order(r.stdout)
        assert sorted(order) == sorted(plain) and order != plain
        modules = [name.split("::")[0] for name in order]
        assert len([m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]) == 4
    again = _order(run_pytest(tmp_path, {}, GPUFILE_TEST_SHUFFLE="1").stdout)
    assert again == _order(runs["1"].stdout)
    assert _order(runs["1"].stdout) != _order(runs["2"].stdout)


def test_time_scale_multiplies_the_limits_and_a_bad_value_stops_the_run(tmp_path):
    files = {"test_t.py": """
        from conftest import time_scale

        def test_scale():
            print("limit", 0.5 * time_scale())
            assert 0.5 * time_scale() == 1.5
    """}
    assert run_pytest(tmp_path, files, GPUFILE_TEST_TIME_SCALE="3").returncode == 0
    r = run_pytest(tmp_path, {}, GPUFILE_TEST_TIME_SCALE="fast")
    assert r.returncode == pytest.ExitCode.USAGE_ERROR
    assert "GPUFILE_TEST_TIME_SCALE='fast': a number above 0" in r.stderr
