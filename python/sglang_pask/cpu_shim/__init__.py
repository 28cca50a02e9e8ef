"""CPU compatibility shim for SGLang 0.5.23 on machines without CUDA.

SGLang's CPU path (``SGLANG_USE_CPU_ENGINE=1``) imports two packages that cannot be installed on a
CPU-only machine of this kind:

* ``torchvision``: imported unconditionally by multimodal config modules; only CUDA wheels exist.
* ``sgl_kernel``: SGLang's CPU kernel build, which is not on the package index; modules import op
  names from it at import time (``if _is_cpu: from sgl_kernel import X``).

``activate()`` installs an import finder that serves *stand-in* modules for exactly these two
names, and only when the real package cannot be found. Every attribute of a stand-in is a class
whose instantiation/call raises :class:`StandInCalled` naming the op, so a code path that really
needs a kernel fails loudly instead of silently doing nothing.

It must be active at interpreter start in every SGLang process (the scheduler and detokenizer are
spawned and import SGLang before plugins load), so the install target writes a ``.pth`` file that
imports :mod:`sglang_pask.cpu_shim.boot`. Nothing here imports torch: start-up stays cheap.

Invariant: with CUDA present (an NVIDIA device node), ``activate()`` does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

from sglang_pask.environ import envs

#: Top-level package names the shim may stand in for.
STANDIN_PACKAGES = ("torchvision", "sgl_kernel")
_MARK = "__pask_standin__"


#: Import-time warnings of SGLang modules that cannot apply on a machine without CUDA (each says a
#: GPU kernel family is unavailable; the CPU path never calls those kernels): message regexes,
#: all UserWarning. ``activate()`` silences them; nothing else is filtered.
CPU_ONLY_WARNINGS = (r"Only CUDA", r"Triton is not supported on current platform")


class StandInCalled(RuntimeError):
    """Raised when code calls into a CPU stand-in (an op that has no CPU implementation here)."""


class _StandInMeta(type):
    """Metaclass of stand-in objects: attribute chains resolve lazily, calls raise."""

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _standin(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        raise StandInCalled(
            f"{cls.__qualname__} was called, but it is only an import stand-in installed by "
            "sglang_pask.cpu_shim (no CUDA here; the real package is not installed). "
            "This code path needs the real kernel or a native fallback."
        )

    def __repr__(cls) -> str:
        return f"<pask cpu stand-in {cls.__qualname__}>"


def _standin(qualname: str) -> type:
    cls = _StandInMeta(qualname.rsplit(".", 1)[-1], (), {_MARK: True})
    cls.__qualname__ = qualname
    return cls


class _StandInModule(types.ModuleType):
    """A stand-in module: any missing attribute is a stand-in object named after its path."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        obj = _standin(f"{self.__name__}.{name}")
        setattr(self, name, obj)
        return obj


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec):
        mod = _StandInModule(spec.name)
        mod.__path__ = []  # a package, so any submodule import also resolves to a stand-in
        setattr(mod, _MARK, True)
        if spec.name == "torchvision":
            mod.__version__ = "0.0.0+pask.standin"
        return mod

    def exec_module(self, module):
        return None


class StandInFinder(importlib.abc.MetaPathFinder):
    """Serves stand-ins for ``packages`` when no real finder can. Appended last to
    ``sys.meta_path``, so a real installation always wins."""

    def __init__(self, packages: tuple[str, ...] = STANDIN_PACKAGES):
        self.packages = tuple(packages)

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".", 1)[0]
        if top not in self.packages:
            return None
        return importlib.machinery.ModuleSpec(fullname, _StandInLoader(), is_package=True)


def cuda_present() -> bool:
    """True when an NVIDIA device node exists. Cheap and torch-free on purpose (runs at start-up)."""
    if envs.SGLANG_PASK_ASSUME_CUDA.get():
        return True
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")


def is_standin(module_or_obj) -> bool:
    return bool(getattr(module_or_obj, _MARK, False))


def activate() -> bool:
    """Enable the shim in this interpreter. Idempotent. Returns True when it is (now) active.

    Effects: sets ``SGLANG_USE_CPU_ENGINE=1`` unless the user set it, appends the stand-in finder
    to ``sys.meta_path`` and ignores :data:`CPU_ONLY_WARNINGS`. Set ``SGLANG_PASK_CPU_SHIM=0`` to
    disable it.
    """
    if not envs.SGLANG_PASK_CPU_SHIM.get() or cuda_present():
        return False
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    add_standins(STANDIN_PACKAGES)
    import warnings

    for message in CPU_ONLY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    return True


def add_standins(packages: tuple[str, ...]) -> None:
    """Serve stand-ins for these top-level packages too (when they are not installed)."""
    known = {p for f in sys.meta_path if isinstance(f, StandInFinder) for p in f.packages}
    missing = tuple(p for p in packages if p not in known)
    if missing:
        sys.meta_path.append(StandInFinder(missing))
