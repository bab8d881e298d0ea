"""What tests/test_nixl_plugin.py and benches/nixl_bench.py share: NIXL's Python API from the
nixl-cu13 wheel, the GPUFILE plugin built by scripts/build_nixl_plugin.sh, and a plugin
directory holding it beside the wheel's own POSIX plugin (NIXL_PLUGIN_DIR names one folder)."""

from __future__ import annotations

import ctypes
import importlib
import os
import re
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


def vtable_methods(so: Path, vtable: str) -> list[str]:
    """The methods of the vtable `vtable` (a mangled `_ZTV...` name) of the shared object `so`,
    slot by slot after the offset and type slots, without their class (`prepXfer(...) const`,
    `~()` for a destructor): what NIXL's agent calls through a plugin's engine pointer. Read
    from its relocations (binutils' nm and readelf)."""
    syms, where = {}, None
    for line in subprocess.run(["nm", "-S", "--defined-only", str(so)], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] == vtable:
            where = (int(parts[0], 16), int(parts[1], 16))
        if len(parts) >= 3:
            syms.setdefault(int(parts[0], 16), parts[-1])
    assert where, f"{so} has no {vtable}"
    start, length = where
    slots: list[str] = [""] * (length // 8)
    for line in subprocess.run(["readelf", "-rW", str(so)], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) < 4 or len(parts[0]) != 16:
            continue
        try:
            off = int(parts[0], 16)
        except ValueError:
            continue
        if not start <= off < start + length:
            continue
        if "RELATIVE" in parts[2]:
            slots[(off - start) // 8] = syms.get(int(parts[-1], 16), parts[-1])
        else:
            slots[(off - start) // 8] = parts[4]
    names = subprocess.run(["c++filt"], input="\n".join(slots[2:]), capture_output=True,
                           text=True, check=True).stdout.splitlines()
    out = []
    for name in names:
        method = re.match(r"^[\w:]*?::(~?\w+\(.*)$", name)
        text = method.group(1) if method else name
        out.append(re.sub(r"^~\w+\(", "~(", text))
    return out
