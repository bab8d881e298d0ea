"""The GPU benchmark's helpers that run without a GPU (benches/gpu_bench.py): argument checks,
row-group selection, random offsets, the pipelined pread loop, the plain-POSIX O_DIRECT reader,
the measurement loop and the dry run. Real files and gpufile's host path; no CuPy needed."""

import errno
import importlib.util
import json
import pathlib

import numpy as np
import pytest

import gpufile

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benches" / "gpu_bench.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_parse_size_and_lists():
    assert bench.parse_size("4GiB") == 4 << 30
    assert bench.parse_size("64k") == 64 << 10
    assert bench.parse_size("1M") == 1 << 20
    assert bench.parse_size("4096") == 4096
    with pytest.raises(ValueError, match="not a size: '4 parsecs'"):
        bench.parse_size("4 parsecs")
    assert bench.parse_list("1, 4,16") == [1, 4, 16]
    assert bench.parse_list("4KiB,1MiB", bench.parse_size) == [4096, 1 << 20]
    with pytest.raises(ValueError, match="--threads: '0' must be positive"):
        bench.parse_list("1,0", name="--threads")
    with pytest.raises(ValueError, match="empty list"):
        bench.parse_list(",")


def test_select_groups():
    default = bench.select_groups(None, "", False)
    assert "cold-sweep" not in default and {"hot", "cold", "files", "random", "writes", "cpu",
                                            "first", "host"} <= set(default)
    assert bench.select_groups(None, "", True)[-1] == "cold-sweep"
    # canonical order whatever the order asked; "write" is the old --skip name
    assert bench.select_groups("random,hot,cold-sweep", "", False) == ["hot", "random",
                                                                      "cold-sweep"]
    assert "writes" not in bench.select_groups(None, "write,host", False)
    with pytest.raises(ValueError, match="unknown row group 'hott'; known: ceilings, hot"):
        bench.select_groups("hott", "", False)


def test_random_offsets_are_seeded_aligned_and_inside_the_file():
    a = bench.random_offsets(1 << 30, 64 << 10, 1000, seed=7)
    assert a == bench.random_offsets(1 << 30, 64 << 10, 1000, seed=7)
    assert a != bench.random_offsets(1 << 30, 64 << 10, 1000, seed=8)
    assert len(a) == 1000 and all(o % 4096 == 0 and 0 <= o <= (1 << 30) - (64 << 10) for o in a)
    assert len(set(a)) > 900  # spread over the file, not a handful of places
    # a read as large as the file has one place to go
    assert set(bench.random_offsets(1 << 20, 1 << 20, 5, seed=0)) == {0}
    with pytest.raises(ValueError, match="do not fit in a file of 4096 bytes"):
        bench.random_offsets(4096, 8192, 1, seed=0)


def test_pipelined_reads_land_in_their_slots(data_file):
    path, data = data_file(1 << 20, seed=3)
    size, depth, count = 4096, 8, 50
    offsets = bench.random_offsets(len(data), size, count, seed=1)
    slots = [np.zeros(size, dtype=np.uint8) for _ in range(depth)]
    with gpufile.defaults.set({"num_threads": 4}), gpufile.CuFile(path) as f:
        assert bench.pipelined_reads(f.pread, slots, offsets, size) == count
    last = bench.last_read_per_slot(count, depth)
    assert sorted(last) == list(range(depth))
    for slot, i in last.items():
        assert np.array_equal(slots[slot], data[offsets[i]:offsets[i] + size]), (slot, i)
    # fewer reads than slots: only the slots used are named
    assert bench.last_read_per_slot(3, 8) == {0: 0, 1: 1, 2: 2}


@pytest.mark.parametrize("direct", [True, False])
def test_posix_direct_reader_reads_every_byte(data_file, direct):
    nbytes = 5 * 8192 + 1234  # not a whole number of pages: the last O_DIRECT read is short
    path, data = data_file(nbytes, seed=5)
    got = np.zeros(nbytes, dtype=np.uint8)
    seen = []

    def sink(off, piece):
        seen.append(off)
        got[off:off + len(piece)] = np.frombuffer(piece, dtype=np.uint8)

    try:
        reader = bench.PosixDirectReader(str(path), threads=3, block=8192, direct=direct)
    except OSError as e:
        if direct and e.errno == errno.EINVAL:
            pytest.skip(f"the file system of {path.parent} refuses O_DIRECT")
        raise
    with reader:
        assert reader.read(nbytes, sink) == nbytes
        assert np.array_equal(got, data)
        assert sorted(seen) == list(range(0, nbytes, 8192))
        assert reader.read(8192) == 8192  # reusable: the buffers stay
        with pytest.raises(ValueError, match=f"has {nbytes} bytes, not {nbytes + 1}"):
            reader.read(nbytes + 1)
    with pytest.raises(ValueError, match="closed"):
        reader.read(1)
    with pytest.raises(ValueError, match="multiple of 4096"):
        bench.PosixDirectReader(str(path), 1, 1000)
    with pytest.raises(FileNotFoundError):
        bench.posix_direct_read(str(path) + ".missing", 1, 1, 4096, direct=direct)


def test_equality_helpers(data_file):
    path, data = data_file(10_000, seed=2)
    same = data.copy()
    assert bench.arrays_equal(same, data, chunk=3000)
    assert bench.equal_to_file(str(path), len(data), lambda o, n: same[o:o + n], chunk=3000)
    same[-1] ^= 0xFF  # the last byte of the last, partial, chunk
    assert not bench.arrays_equal(same, data, chunk=3000)
    assert not bench.equal_to_file(str(path), len(data), lambda o, n: same[o:o + n], chunk=3000)
    assert not bench.arrays_equal(data[:10], data[:11])


def test_files_layout_wraps_inside_the_file():
    assert bench.files_layout(5, 4, 10) == [0, 4, 0, 4, 0]
    assert bench.files_layout(3, 4 << 20, 4 << 30) == [0, 4 << 20, 8 << 20]
    with pytest.raises(ValueError, match="smaller than one small file"):
        bench.files_layout(1, 100, 99)


def test_drop_page_cache_of_the_file(data_file):
    path, _ = data_file(1 << 20)
    assert bench.cached_fraction(str(path)) == 1.0  # just written
    assert bench.drop_page_cache(str(path), "file") == "file"
    left = bench.cached_fraction(str(path))
    if left > 0:
        pytest.skip(f"the file system of {path.parent} keeps its pages (tmpfs?)")
    assert left == 0.0


def test_measure_verifies_and_reports(data_file):
    path, data = data_file(1 << 20, seed=9)
    args = bench.parse_args(["--runs", "2", "--size", str(len(data)), "--file", str(path),
                             "--only", "host"])
    b = bench.Bench(args)
    host = np.zeros(len(data), dtype=np.uint8)

    def run():
        with gpufile.CuFile(path) as f:
            return f.read(host)

    b.measure("gpufile host", "read host hot", lambda: host.fill(0), run,
              lambda: bench.arrays_equal(host, data))
    (row,) = b.rows
    assert row["case"] == "gpufile host" and row["unit"] == "GB/s" and row["value"] > 0
    assert len(row["runs_s"]) == 2 and len(row["cpu_s"]) == 2 and row["cpu_s_per_gb"] >= 0
    # wrong bytes void the row and are reported, the run goes on
    b.measure("wrong", "read host hot", lambda: host.fill(0), run, lambda: False)
    assert len(b.rows) == 1 and b.failures == ["read host hot / wrong: DATA DIFFER from the file"]
    # a wrong count too
    b.measure("short", "read host hot", lambda: None, lambda: 5, lambda: True)
    assert "short: moved 5 bytes" in b.failures[-1]
    # an error is a note, not a failure of the data
    b.measure("raises", "read host hot", lambda: None, lambda: 1 / 0, lambda: True)
    assert any("raises failed: ZeroDivisionError" in n for n in b.notes)
    assert len(b.failures) == 2


def test_dry_run_lists_every_row_and_touches_nothing(tmp_path, capsys):
    target = tmp_path / "never-made.bin"
    out = tmp_path / "rows.json"
    rc = bench.main(["--dry-run", "--cold-sweep", "--file", str(target), "--json", str(out)])
    assert rc == 0 and not target.exists()
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["groups"][-1] == "cold-sweep"
    kinds = {}
    for r in report["rows"]:
        kinds.setdefault(r["group"], []).append(r["case"])
    assert set(kinds) == set(bench.GROUPS)
    # 2 x 5 x 3 gpufile strategies, 5 x 3 plain-POSIX references, 5 KvikIO thread counts
    assert len(kinds["cold-sweep"]) == 30 + 15 + 5
    assert "gpufile random 64 KiB, 16 thr, 64 in flight" in kinds["random"]
    assert "gpufile read_batch, paths (256 x 4 MiB)" in kinds["files"]
    printed = capsys.readouterr().out
    assert "| workload | gpufile | KvikIO | gpufile / KvikIO | limit |" in printed


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        bench.parse_args(["--only", "hot,bogus"])
    assert e.value.code == 2
    assert "unknown row group 'bogus'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--size", "1KiB"])  # smaller than the 1 MiB random reads
    assert "smaller than the largest --random-sizes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--sweep-task-sizes", "4MiB,5000"])
    assert "multiples of 4096" in capsys.readouterr().err


def test_remote_bench_runs_interleaved_and_verifies(tmp_path):
    """benches/remote_bench.py end to end on a tiny object, host memory: every reader's row
    verified, gpufile's two rows measured in the same rounds as the plain client."""
    import os
    import subprocess
    import sys
    out = tmp_path / "remote.json"
    # The gpufile this test imported (an installed wheel, or the source tree's built package).
    site = str(pathlib.Path(gpufile.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [site] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benches" / "remote_bench.py"), "--size", "8MiB",
         "--threads", "2", "--runs", "2", "--server-procs", "1", "--host-only",
         "--json", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {(r["reader"], r["settings"].split(" (")[0]): r
            for r in json.loads(out.read_text())["rows"]}
    for key in (("plain client", "2 threads, 16 MiB ranges"), ("gpufile", "defaults"),
                ("gpufile", "equal threads")):
        assert key in rows, (key, sorted(rows))
        assert rows[key]["verified"] is True and len(rows[key]["runs"]) == 2
        assert rows[key]["gbps"] > 0


def test_copy_probe_measures_and_verifies_the_host_rows(tmp_path):
    """benches/copy_probe.py on a small file: the pageable-memory rows need no GPU, are verified
    against the file, and land in the JSON (the GPU rows say why they did not run here)."""
    import subprocess
    import sys
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benches" / "copy_probe.py"), "--file",
         str(tmp_path / "probe.bin"), "--size", "8MiB", "--sizes", "64KiB,1MiB", "--threads",
         "1,2", "--ops", "40", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    host = [r for r in rows if r["dest"] == "pageable"]
    assert {(r["size"], r["threads"]) for r in host} == {(65536, 1), (65536, 2), (1 << 20, 1),
                                                         (1 << 20, 2)}
    assert all(r["verified"] and r["ops_per_s"] > 0 for r in host)
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert "failed" in proc.stdout and "cupy" in proc.stdout.lower()
