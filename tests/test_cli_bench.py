"""`gpufile bench`'s one statistic: the median run time (for an even --runs, the mean of the middle
two), named and shown alike in its table, its JSON and its plot."""

import json
import os
import statistics
import subprocess
import sys

import pytest


def cli(*args):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    return subprocess.run([sys.executable, "-m", "gpufile", *args], capture_output=True,
                          text=True, env=clean, timeout=300)


def test_bench_json_throughput_is_the_size_over_the_median_run_time(tmp_path):
    r = cli("bench", "--file", str(tmp_path / "b.bin"), "--create", "--sizes", "64k,256k",
            "--runs", "2", "--memory", "host", "--json")
    assert r.returncode == 0, r.stderr
    for row in json.loads(r.stdout)["results"]:
        median = statistics.median(row["seconds_per_run"])  # the mean of the middle two
        assert row["seconds"] == pytest.approx(median)
        assert row["throughput_gb_per_s"] == pytest.approx(row["size"] / median / 1e9)


def test_bench_table_and_plot_show_the_same_numbers_and_name_the_statistic(tmp_path):
    pytest.importorskip("matplotlib")
    svg = tmp_path / "b.svg"
    r = cli("bench", "--file", str(tmp_path / "b.bin"), "--create", "--sizes", "64k,256k",
            "--runs", "2", "--memory", "host", "--plot", str(svg))
    assert r.returncode == 0, r.stderr
    named = "the median of 2 runs, the mean of the middle two run times"
    assert f"throughput: {named};" in r.stdout, r.stdout
    table = [line.split()[-2] for line in r.stdout.splitlines() if line.startswith("read ")]
    assert len(table) == 4, r.stdout  # sizes × the default threads 1,4
    drawn = svg.read_text()
    assert named in drawn
    for value in table:  # each point is labelled with the table's number
        assert f">{value}</text>" in drawn, (value, table)


def bench_json(tmp_path, *args, env=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVIKIO_", "GPUFILE_"))}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpufile", "bench", "--file",
                           str(tmp_path / "b.bin"), "--create", "--sizes", "64k", "--runs", "1",
                           "--threads", "1", "--memory", "host", "--json", *args],
                          capture_output=True, text=True, env=clean, timeout=300)


def test_bench_plot_to_an_unwritable_path_fails_before_the_sweep_with_one_json_object(tmp_path):
    """`bench --json --plot BAD`: the path is found bad before the sweep (no data file made),
    and stdout is one JSON object, the error (it was the results, then the error, after the
    whole sweep)."""
    image = tmp_path / "no-such-dir" / "b.png"
    r = bench_json(tmp_path, "--plot", str(image))
    assert r.returncode == 1, (r.stdout, r.stderr)
    out = json.loads(r.stdout)  # exactly one object: a second one is "Extra data"
    assert out["error"]["type"] == "os" and out["error"]["errno"] == 2, out
    assert out["error"]["message"] == f"--plot: open {image}: No such file or directory"
    assert "results" not in out
    assert r.stderr == f"gpufile: error: --plot: open {image}: No such file or directory\n"
    assert not (tmp_path / "b.bin").exists()  # the sweep never started


def test_bench_plot_with_a_format_matplotlib_is_not_asked_for_is_refused_before_the_sweep(
        tmp_path):
    r = bench_json(tmp_path, "--plot", str(tmp_path / "b.weird"))
    assert r.returncode == 1, (r.stdout, r.stderr)
    out = json.loads(r.stdout)
    assert out["error"]["type"] == "invalid-argument", out
    assert "extension" in out["error"]["message"] and ".png, .svg or .pdf" in r.stderr
    assert not (tmp_path / "b.bin").exists() and not (tmp_path / "b.weird").exists()


def test_bench_plot_failing_after_the_sweep_is_one_json_object_with_the_results(tmp_path):
    """An interpreter that has matplotlib (the check before the sweep passes) but fails to
    draw: one object, the results and the error in it, exit 1."""
    py = tmp_path / "python"
    py.write_text('#!/bin/sh\n[ "$2" = "import matplotlib" ] && exit 0\n'
                  'echo "plotting crashed" >&2\nexit 1\n')
    py.chmod(0o755)
    r = bench_json(tmp_path, "--plot", str(tmp_path / "b.png"), env={"GPUFILE_PYTHON": str(py)})
    assert r.returncode == 1, (r.stdout, r.stderr)
    out = json.loads(r.stdout)
    assert len(out["results"]) == 1 and out["results"][0]["verified"] is True, out
    assert out["plot"] is None
    assert out["error"]["type"] == "plot-failed", out
    assert "gpufile: error: --plot failed (exit status: 1)" in r.stderr


def test_bench_json_names_the_plot_it_wrote(tmp_path):
    pytest.importorskip("matplotlib")
    image = tmp_path / "b.svg"
    r = bench_json(tmp_path, "--plot", str(image))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["plot"] == str(image) and out["error"] is None
    assert image.read_text().startswith("<?xml")
