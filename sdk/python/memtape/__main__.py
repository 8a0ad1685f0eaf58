"""`python -m memtape ...`: runs the bundled `memtape` binary with the same arguments."""

from __future__ import annotations

import os
import subprocess
import sys

from ._binary import find_memtape_bin


def main() -> int:
    """Runs the binary; on POSIX the process becomes it."""
    binary = find_memtape_bin()
    if os.name == "posix":
        os.execv(binary, [binary, *sys.argv[1:]])
    return subprocess.run([binary, *sys.argv[1:]]).returncode


if __name__ == "__main__":
    sys.exit(main())
