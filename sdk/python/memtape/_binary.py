"""Finds the `memtape` binary: the one this package's wheel installed, or one on PATH."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

from ._errors import MemtapeError

EXE = "memtape" + (sysconfig.get_config_var("EXE") or "")


def find_memtape_bin() -> str:
    """The path of the `memtape` binary: `MEMTAPE_BIN` if set, else the one installed with
    this package (the environment's scripts folder, or the user's), else the first on PATH."""
    explicit = os.environ.get("MEMTAPE_BIN")
    if explicit:
        return explicit
    places = [sysconfig.get_path("scripts")]
    scheme = {"nt": "nt_user", "posix": "posix_user"}.get(os.name)
    if sys.platform == "darwin" and sys._framework:  # type: ignore[attr-defined]
        scheme = "osx_framework_user"
    if scheme and scheme in sysconfig.get_scheme_names():
        places.append(sysconfig.get_path("scripts", scheme=scheme))
    for place in places:
        path = os.path.join(place, EXE)
        if os.path.isfile(path):
            return path
    found = shutil.which(EXE)
    if found:
        return found
    raise MemtapeError(
        "the memtape binary is not installed with this package nor on PATH: install the wheel "
        "(`pip install memtape`), or set MEMTAPE_BIN to its path"
    )
