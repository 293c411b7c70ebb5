"""spectower: observability and live control of EAGLE-3 speculation on SGLang servers.

The repository keeps one top-level folder per part (plugin/ storage/ collectors/ control/ simulator/
console/); the distribution installs them under this one namespace (``spectower.collectors`` ...), so
nothing generic lands in site-packages, SGLang's environment included (what SGLang loads is
``spectower.plugin``).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("spectower")
except PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"
