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
