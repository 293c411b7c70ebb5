"""Write the `triton` and `torchvision` stand-ins into a site-packages folder (used by tests/sglang_env.sh).

SGLang 0.5.23 imports both unconditionally on the paths the plugin tests reach (`sglang.srt.utils.common`
imports triton at module level; `internal_state.py` reaches `sglang.srt.multimodal.internvl_utils`, which
imports torchvision). Neither can run here (no GPU; PyPI's torchvision does not load beside a CPU torch), and
no kernel or image transform ever runs in these tests, so the stand-ins only need to survive import and
decoration: every attribute resolves, CamelCase names are classes (usable as base classes and in `except`),
lower-case names are sub-modules that also work as pass-through decorators (`@triton.jit`,
`@triton.autotune(...)`), and class attributes resolve as well. transformers finds the torchvision stand-in
(its availability check is `importlib.util.find_spec`) and builds import-time tables from it
(`InterpolationMode.NEAREST_EXACT`, ...), which is why classes resolve any attribute.

Usage: python install_stubs.py SITE_PACKAGES_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

STANDIN = '''"""Stand-in module trees for tests on a CPU-only machine (spectower tests/sglang_env.sh)."""

import importlib.abc
import importlib.machinery
import sys
import types


class StandInMeta(type):
    """Classes whose every attribute exists too (``InterpolationMode.NEAREST_EXACT``)."""

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = StandInMeta(attr, (Exception,), {"__module__": cls.__module__})
        setattr(cls, attr, value)
        return value


class StandInModule(types.ModuleType):
    """Every attribute exists: CamelCase -> an exception-derived class, anything else -> a child module."""

    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []
        self.__spec__ = importlib.machinery.ModuleSpec(name, _FINDER, is_package=True)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr[:1].isupper():
            value = StandInMeta(attr, (Exception,), {"__module__": self.__name__})
        else:
            value = _module(self.__name__ + "." + attr)
        setattr(self, attr, value)
        return value

    def __call__(self, *args, **kwargs):
        # @x.jit -> the function itself; @x.autotune(...) -> a decorator returning the function.
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    roots = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots and fullname not in sys.modules and "." in fullname:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _module(spec.name)

    def exec_module(self, module):
        return None


_FINDER = _Finder()
sys.meta_path.insert(0, _FINDER)


def _module(name):
    existing = sys.modules.get(name)
    if isinstance(existing, StandInModule):
        return existing
    module = StandInModule(name)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module


def install(package_module, version):
    """Turn the real package module (``triton/__init__.py``) into a stand-in root."""
    root = package_module.__name__
    _Finder.roots.add(root)
    package_module.__class__ = StandInModule
    package_module.__path__ = []
    package_module.__version__ = version
    return package_module
'''

TRITON = '''"""Stand-in for triton (spectower tests on CPU): import-only, no kernel ever runs."""
import sys as _sys

import _spectower_standin

_spectower_standin.install(_sys.modules[__name__], "3.0.0")


def cdiv(a, b):
    return -(a // -b)


def next_power_of_2(n):
    return 1 << (n - 1).bit_length() if n > 0 else 1


class Config:
    def __init__(self, kwargs=None, num_warps=4, num_stages=2, **extra):
        self.kwargs = kwargs or {}
        self.num_warps = num_warps
        self.num_stages = num_stages
'''

TORCHVISION = '''"""Stand-in for torchvision (spectower tests on CPU): import-only, no transform ever runs."""
import sys as _sys

import _spectower_standin

# The version torch 2.13 pairs with; transformers compares it when it finds torchvision.
_spectower_standin.install(_sys.modules[__name__], "0.28.0")
'''


def main() -> int:
    site = Path(sys.argv[1])
    (site / "_spectower_standin.py").write_text(STANDIN)
    for name, text in (("triton", TRITON), ("torchvision", TORCHVISION)):
        pkg = site / name
        if pkg.exists() and not (pkg / ".spectower-standin").exists():
            print(f"install_stubs: {pkg} is a real package; leaving it", file=sys.stderr)
            continue
        pkg.mkdir(exist_ok=True)
        (pkg / "__init__.py").write_text(text)
        (pkg / ".spectower-standin").write_text("written by spectower tests/sglang_env.sh\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
