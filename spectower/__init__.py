"""spectower: observability and live control of EAGLE-3 speculation on SGLang servers.

The repository keeps one top-level folder per part (plugin/ storage/ collectors/ control/ simulator/
console/); the distribution installs them under this one namespace (``spectower.collectors`` ...), so
nothing generic lands in site-packages, SGLang's environment included (what SGLang loads is
``spectower.plugin``).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """``__version__``, read from the installed metadata when first asked for: every process that imports
    any part of spectower (the plugin in each SGLang process, a simulator, each command) imports this
    package, and importlib.metadata costs about 50 ms of CPU to import."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("spectower")
    except PackageNotFoundError:  # a source tree on sys.path without an install
        value = "0+unknown"
    globals()["__version__"] = value
    return value
