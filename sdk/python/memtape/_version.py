"""The package version: the installed distribution's, which maturin takes from the Rust
workspace (one version for the binary and the package)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("memtape")
except PackageNotFoundError:  # run from a source tree, not installed
    __version__ = "0+unknown"
