"""benches/submit_bench.py runs end to end on a tiny workload (every group, data verified)."""

import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_group_runs_and_writes_its_rows(tmp_path):
    spec = importlib.util.spec_from_file_location("submit_bench",
                                                  ROOT / "benches" / "submit_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "rows.json"
    bench.main(["--runs", "1", "--requests", "64", "--sizes", "4KiB", "--py-threads", "2",
                "--depth", "4", "--num-threads", "2", "--file-size", "1MiB",
                "--files-count", "3", "--files-size", "64KiB", "--libs", "gpufile",
                "--dir", str(tmp_path), "--json", str(out)])
    names = [r["name"] for r in json.loads(out.read_text())["rows"]]
    for part in ("gpufile read() 4 KiB, 1 py thread", "gpufile pread().get() 4 KiB, 2 py threads",
                 "gpufile pread 4 KiB, 4 in flight", "gpufile open/read/close loop (3 x 64 KiB)",
                 "gpufile read_batch, open CuFiles"):
        assert any(n.startswith(part) for n in names), (part, names)


def test_device_group_runs_on_a_gpu_or_says_why_not(tmp_path, capsys):
    """The device group (not in the default set) times GPU destinations where CuPy and a GPU
    exist, and otherwise says why its rows are skipped."""
    spec = importlib.util.spec_from_file_location("submit_bench",
                                                  ROOT / "benches" / "submit_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "rows.json"
    bench.main(["--runs", "1", "--requests", "64", "--sizes", "4KiB", "--depth", "4",
                "--num-threads", "2", "--file-size", "1MiB", "--libs", "gpufile",
                "--only", "device", "--dir", str(tmp_path), "--json", str(out)])
    names = [r["name"] for r in json.loads(out.read_text())["rows"]]
    if names:
        for kind in ("CuPy views", "fixed CAI, stream 1", "fixed CAI, no stream"):
            assert any(kind in n for n in names), (kind, names)
        assert any("pread().get()" in n and "one at a time" in n for n in names), names
        assert any("read()" in n and "one at a time" in n for n in names), names
    else:
        assert "note: device rows skipped" in capsys.readouterr().out
