"""gpufile.benchmarks.utils: the helpers KvikIO's benchmark scripts import, at KvikIO's place."""

import argparse
import pathlib

import pytest

from gpufile.benchmarks import utils
from conftest import without_root


def test_parse_directory_takes_a_directory_and_passes_none_through(tmp_path):
    assert utils.parse_directory(None) is None
    assert utils.parse_directory(str(tmp_path)) == pathlib.Path(tmp_path)
    (tmp_path / "f").write_bytes(b"x")
    for bad in (tmp_path / "f", tmp_path / "missing"):
        with pytest.raises(argparse.ArgumentTypeError, match="Must be a directory"):
            utils.parse_directory(str(bad))


def test_parse_directory_as_an_argparse_type(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    parser.add_argument("-d", type=utils.parse_directory, default=None)
    assert parser.parse_args(["-d", str(tmp_path)]).d == pathlib.Path(tmp_path)
    with pytest.raises(SystemExit):
        parser.parse_args(["-d", str(tmp_path / "missing")])
    assert "Must be a directory" in capsys.readouterr().err


def test_pprint_sys_info_prints_what_the_figures_depend_on(capsys):
    utils.pprint_sys_info()
    lines = capsys.readouterr().out.splitlines()
    keys = [line.split("|")[0].strip() for line in lines]
    assert keys == ["GPU", "GPU Memory Total", "libcufile version", "GDS driver",
                    "GDS config.json", "compat_mode"]
    assert lines[-1].split("|")[1].strip() in ("ON", "OFF", "AUTO")


def test_drop_vm_cache_without_root_says_why():
    def check():  # as root it would drop this machine's page cache
        with pytest.raises(PermissionError, match="needs root"):
            utils.drop_vm_cache()

    without_root(check)
