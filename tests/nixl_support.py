"""What tests/test_nixl_plugin.py and benches/nixl_bench.py share: NIXL's Python API from the
nixl-cu13 wheel, the GPUFILE plugin built by scripts/build_nixl_plugin.sh, and a plugin
directory holding it beside the wheel's own POSIX plugin (NIXL_PLUGIN_DIR names one folder)."""

from __future__ import annotations

import ctypes
import importlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nixl_api():
    """NIXL's Python API (`nixl_agent`, `nixl_agent_config`), or None where the wheel is not
    installed. The `nixl` meta package picks `nixl_cu12`/`nixl_cu13` by the CUDA it finds; the
    CUDA 13 wheel alone imports on a machine without CUDA."""
    for name in ("nixl_cu13._api", "nixl._api"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def headers_dir() -> Path | None:
    """NIXL's plugin headers: $NIXL_INCLUDE_DIR, or a folder scripts/nixl_headers.sh filled
    under build/nixl-headers (the first, by name, that has them)."""
    env = os.environ.get("NIXL_INCLUDE_DIR")
    if env:
        path = Path(env).resolve()
        return path if (path / "backend/backend_plugin.h").exists() else None
    found = sorted((ROOT / "build/nixl-headers").glob("*/backend/backend_plugin.h"))
    return found[0].parent.parent if found else None


def build_plugin(profile: str = "dev") -> Path:
    """libplugin_GPUFILE.so: $GPUFILE_NIXL_PLUGIN, or built now by scripts/build_nixl_plugin.sh
    against libgpufile's `profile` build (cargo and the compiler decide what is out of date)."""
    env = os.environ.get("GPUFILE_NIXL_PLUGIN")
    if env:
        return Path(env)
    headers = headers_dir()
    assert headers is not None, "no NIXL headers (headers_dir)"
    build = ROOT / ("build/nixl-plugin-test" if profile == "dev" else f"build/nixl-plugin-{profile}")
    env = dict(os.environ, NIXL_INCLUDE_DIR=str(headers), GPUFILE_CARGO_PROFILE=profile)
    out = subprocess.run([str(ROOT / "scripts/build_nixl_plugin.sh"), str(build)], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, f"scripts/build_nixl_plugin.sh failed:\n{out.stdout}\n{out.stderr}"
    return build / "nixl/libplugin_GPUFILE.so"


def plugin_dir(plugin: Path, where: Path) -> Path:
    """A NIXL_PLUGIN_DIR with the GPUFILE plugin and the wheel's POSIX plugin. The wheel's
    plugins find their libraries at $ORIGIN/.. and $ORIGIN/../../nixl_cu13.libs, and $ORIGIN is
    the folder a plugin is loaded from (not where a link points): the folder mirrors the
    wheel's layout with links. The GPUFILE plugin finds libgpufile.so beside it ($ORIGIN)."""
    api = nixl_api()
    pkg = Path(api.__file__).resolve().parent  # .../site-packages/nixl_cu13
    libs = pkg.parent / f".{pkg.name}.mesonpy.libs"
    lib = where / "lib"
    plugins = lib / "plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    for so in libs.glob("*.so*"):
        (lib / so.name).unlink(missing_ok=True)
        (lib / so.name).symlink_to(so)
    bundled = pkg.parent / f"{pkg.name}.libs"
    (where / bundled.name).unlink(missing_ok=True)
    (where / bundled.name).symlink_to(bundled)
    for so in [libs / "plugins/libplugin_POSIX.so", plugin, plugin.parent / "libgpufile.so"]:
        (plugins / so.name).unlink(missing_ok=True)
        (plugins / so.name).symlink_to(so.resolve())
    return plugins


class PluginReport:
    """The GPUFILE plugin's own report functions (`gpufile_nixl_last_error`,
    `gpufile_nixl_last_path`): loading the plugin's file again gives the copy NIXL loaded."""

    def __init__(self, plugin: Path):
        self.lib = ctypes.CDLL(str(plugin))

    def _text(self, fn) -> str:
        fn.restype = ctypes.c_size_t
        need = fn(None, 0)
        buf = ctypes.create_string_buffer(need)
        fn(buf, need)
        return buf.value.decode()

    def last_error(self) -> str:
        return self._text(self.lib.gpufile_nixl_last_error)

    def last_path(self) -> str:
        return self._text(self.lib.gpufile_nixl_last_path)
