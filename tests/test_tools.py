"""gpufile check, explain and bench, from Python and the command line."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import gpufile


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gpufile", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def test_check_reports_machine_file_and_verdicts(tmp_path):
    f = tmp_path / "c.bin"
    f.write_bytes(b"x" * 4096)
    r = gpufile.check(f)
    d = r.as_dict()
    assert d["gpufile_version"] == gpufile.__version__
    assert [v["compat_mode"] for v in d["verdicts"]] == ["AUTO", "ON", "OFF"]
    assert d["verdicts"][1]["path"]["backend"] == "gpufile-posix"
    assert d["verdicts"][1]["path"]["reason"]["text"] == "compat_mode is ON"
    assert d["file"]["fs_type"]
    assert isinstance(d["file"]["o_direct"], bool)
    text = str(r)
    assert "verdict" in text and "AUTO" in text and str(f) in text
    if not d["gpus"]:
        assert "host-memory I/O works" in text


def test_check_cli_json_and_text(tmp_path):
    r = cli("check", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert "libcufile" in d and "iommu" in d and "cufile_json" in d
    r = cli("check")
    assert r.returncode == 0 and "IOMMU" in r.stdout


@pytest.mark.parametrize("size,task,pieces", [
    (1 << 30, 4 << 20, [(256, [4 << 20])]),
    (1 << 30, 1 << 30, [(1, [256 << 20] * 4)]),
    (16 << 20, 16 << 20, [(1, [8 << 20] * 2)]),
])
def test_explain_reproduces_the_spec(tmp_path, size, task, pieces):
    cfg = tmp_path / "cufile.json"
    cfg.write_text('{"execution": {"parallel_io": true, "max_io_threads": 4, '
                   '"min_io_threshold_size_kb": 8192, "max_request_parallelism": 4}}')
    e = gpufile.explain(size, task_size=task, compat_mode="off", cufile="nvfs",
                        cufile_json=cfg, device=True)
    p = e["prediction"]
    assert p["path"]["backend"] == "cufile"
    assert p["cufile"]["requests"] == size // task
    assert p["cufile"]["pieces"] == [{"requests": n, "piece_bytes": ps} for n, ps in pieces]
    assert p["cufile"]["execution"]["source"] == str(cfg)


def test_explain_posix_and_failure():
    e = gpufile.explain(1 << 20, compat_mode="on", device=True)
    assert e["prediction"]["path"]["backend"] == "gpufile-posix"
    assert e["prediction"]["bounce_chunk"] > 0
    e = gpufile.explain(1 << 20, compat_mode="off", cufile="none", device=True)
    assert e["prediction"]["path"] is None and "would fail" in str(e)
    assert "compat_mode is OFF" in e["prediction"]["error"]
    h = gpufile.explain(1 << 20, device=False, task_size=199)
    assert h["prediction"]["tasks"]["count"] == (1 << 20) // 199 + 1
    with pytest.raises(ValueError):
        gpufile.explain(1 << 20, cufile="maybe")
    with pytest.raises(ValueError):
        gpufile.explain(1 << 20, compat_mode="sometimes")


def test_explain_run_observes_the_same_tasks(tmp_path):
    f = tmp_path / "r.bin"
    np.arange(1 << 20, dtype=np.uint32).tofile(f)
    e = gpufile.explain(4 << 20, device=False, task_size=1 << 20, file=f, run=True)
    assert e["observed"]["by_path"]["gpufile-posix"]["tasks"] == 4
    assert e["prediction"]["tasks"]["count"] == 4
    assert "predicted" in str(e) and "observed" in str(e)
    r = cli("explain", "--size", "4MiB", "--host", "--task-size", "1MiB", str(f), "--run")
    assert r.returncode == 0, r.stderr
    assert "predicted" in r.stdout


@pytest.mark.parametrize("task_size", [199, 4096, 65536, 4 << 20])
def test_explained_tasks_cover_the_request_once(task_size):
    p = gpufile.explain(1_000_003, device=False, task_size=task_size)["prediction"]
    assert sum(run["count"] * run["bytes"] for run in p["tasks"]["runs"]) == 1_000_003
    assert p["tasks"]["count"] == -(-1_000_003 // task_size)


def test_bench_smoke(tmp_path):
    f = tmp_path / "bench.bin"
    r = cli("bench", "--file", str(f), "--sizes", "1MiB,3MiB", "--threads", "1,3",
            "--task-sizes", "256KiB", "--ops", "read,write", "--memory", "host", "--runs", "2",
            "--json", "--create")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    assert len(rows) == 2 * 2 * 2
    assert all(row["verified"] and row["throughput_gb_per_s"] > 0 for row in rows)
    assert {row["op"] for row in rows} == {"read", "write"}
    assert f.stat().st_size == 3 << 20
    r = cli("bench", "--file", str(f), "--sizes", "1MiB", "--runs", "1", "--memory", "host")
    assert r.returncode == 0 and "verified byte for byte" in r.stdout


def test_bench_never_overwrites_a_users_file(tmp_path):
    small = tmp_path / "notes.txt"
    small.write_bytes(b"hello\n")
    r = cli("bench", "--file", str(small), "--sizes", "1MiB", "--memory", "host", "--create")
    assert r.returncode == 1 and "never modifies a file it did not make" in r.stderr
    assert small.read_bytes() == b"hello\n"
    missing = tmp_path / "typo.bin"
    r = cli("bench", "--file", str(missing), "--sizes", "1MiB", "--memory", "host")
    assert r.returncode == 1 and "--create" in r.stderr and not missing.exists()
    r = cli("bench", "--file", "/dev/null", "--sizes", "1MiB", "--memory", "host")
    assert r.returncode == 1 and "not a regular file" in r.stderr
    # Writes go to a scratch file bench makes and removes: the data file and its ".write"
    # neighbour stay as they were.
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * 4096)
    neighbour = tmp_path / "data.bin.write"
    neighbour.write_bytes(b"keep me")
    before = set(tmp_path.iterdir())
    r = cli("bench", "--file", str(data), "--sizes", "1MiB", "--ops", "write", "--memory",
            "host", "--runs", "1")
    assert r.returncode == 0, r.stderr
    assert data.read_bytes() == bytes(range(256)) * 4096
    assert neighbour.read_bytes() == b"keep me"
    assert set(tmp_path.iterdir()) == before


def test_bench_never_writes_through_a_symlink(tmp_path):
    # Its own default file in TMPDIR is a link to a user's file (small: bench would grow it;
    # large: bench would read it): refused either way, the file untouched.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    for content in (b"precious\n", b"large" * (1 << 19)):
        user = tmp_path / "user.txt"
        user.write_bytes(content)
        link = tmp / "gpufile-bench.bin"
        link.symlink_to(user)
        r = cli("bench", "--sizes", "1MiB", "--memory", "host", "--runs", "1",
                "--json", env={"TMPDIR": str(tmp)})
        assert r.returncode == 1, r.stderr
        assert "is a symbolic link" in r.stderr and "never writes through a link" in r.stderr
        err = json.loads(r.stdout)["error"]
        assert (err["type"], err["path"]) == ("symlink", str(link))
        assert user.read_bytes() == content and link.is_symlink()
        assert sorted(p.name for p in tmp.iterdir()) == ["gpufile-bench.bin"]
        link.unlink()
    # --create on a dangling link creates nothing (not its target).
    dangling = tmp_path / "dangling.bin"
    dangling.symlink_to(tmp_path / "target.bin")
    r = cli("bench", "--file", str(dangling), "--create", "--sizes", "1MiB", "--memory", "host",
            "--runs", "1")
    assert r.returncode == 1 and "is a symbolic link" in r.stderr, r.stderr
    assert not (tmp_path / "target.bin").exists() and dangling.is_symlink()
    # Its own file, made where nothing was: a regular file, reused by the next run.
    r = cli("bench", "--sizes", "1MiB", "--memory", "host", "--runs", "1",
            env={"TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr
    own = tmp / "gpufile-bench.bin"
    assert own.is_file() and not own.is_symlink() and own.stat().st_size == 1 << 20
    assert sorted(p.name for p in tmp.iterdir()) == ["gpufile-bench.bin"]


def test_an_interrupted_bench_leaves_no_file_behind(tmp_path):
    data = tmp_path / "data.bin"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufile", "bench", "--file", str(data), "--create",
         "--sizes", "16MiB", "--ops", "write", "--memory", "host", "--runs", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(p.name.startswith(".gpufile-bench-write-") for p in tmp_path.iterdir()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no write file after 120 s"
            time.sleep(0.02)
        time.sleep(0.3)  # the sweep is writing it now
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted (SIGINT)" in err
    # The data file it made stays (complete); the write file is gone.
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]
    assert data.stat().st_size == 16 << 20


def test_bench_bad_arguments(tmp_path):
    r = cli("bench", "--file", str(tmp_path / "b.bin"), "--ops", "fly", "--memory", "host")
    assert r.returncode == 1 and "--ops" in r.stderr


def test_bench_cold_runs_need_no_root(tmp_path):
    r = cli("bench", "--file", str(tmp_path / "c.bin"), "--sizes", "2MiB", "--cache", "cold",
            "--memory", "host", "--runs", "2", "--json", "--create")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    assert rows[0]["cache"] == "cold" and rows[0]["verified"]


def test_bench_plot(tmp_path):
    png = tmp_path / "b.png"
    # PATH without python3: `python -m gpufile` plots with its own interpreter.
    r = cli("bench", "--file", str(tmp_path / "b.bin"), "--sizes", "64k,256k", "--threads",
            "1,2", "--runs", "2", "--memory", "host", "--plot", str(png), "--create",
            env={"PATH": "/nonexistent", "GPUFILE_PYTHON": ""})
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert r.returncode == 1 and "matplotlib" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert png.read_bytes()[:4] == b"\x89PNG"
        assert f"plot written to {png}" in r.stdout


def test_bench_plot_checks_its_interpreter_before_the_sweep(tmp_path):
    data = tmp_path / "never.bin"
    r = cli("bench", "--file", str(data), "--sizes", "1MiB", "--memory", "host", "--create",
            "--plot", str(tmp_path / "p.png"), env={"GPUFILE_PYTHON": "/nonexistent/python"})
    assert r.returncode == 1
    assert "/nonexistent/python" in r.stderr and "GPUFILE_PYTHON" in r.stderr
    assert not data.exists()  # refused before the sweep made (or read) anything


def test_python_explain_run_falls_back_to_host_memory_without_a_gpu(tmp_path):
    """As `gpufile explain --run`: with no memory named, a run goes to GPU 0 where CUDA has a
    device, else to host memory with a note saying why (it used to fail with a CUDA error)."""
    p = tmp_path / "e.bin"
    p.write_bytes(b"\1" * (1 << 20))
    r = gpufile.explain(1 << 20, file=p, run=True)
    assert r.as_dict()["observed"] is not None  # the read ran
    if _cuda_devices() == 0:
        assert "host memory" in str(r) and "into host memory" in str(r)


def _cuda_devices() -> int:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0
