"""sglang_pask: parser-aware, structure-conditioned KV persistence (PASK) for SGLang.

On CPU machines install with `make install` (pinned set, --no-deps; see requirements/).
On CUDA machines: `pip install -e .[gpu]` installs SGLang with its normal dependencies.

The compiled operators in csrc/ (torch.ops.sglang_pask.*, see csrc/README.md) are built here with
torch's extension tooling when torch is importable at build time (`make install` installs it
first and builds with --no-build-isolation): the CPU sources always, the CUDA ones too when the
installed torch has CUDA and nvcc is found. They are optional: a failed or skipped build
(SGLANG_PASK_NO_CSRC=1) prints why and the install goes on; at run time the pure-torch reference
(python/sglang_pask/ops/reference.py) runs instead and the server's start-up line says which.
"""

import os
import sys

from setuptools import find_packages, setup

CPU_SOURCES = ["csrc/cpu/pask_ops.cpp"]
CUDA_SOURCES = ["csrc/cuda/pask_ops_kernels.cu", "csrc/cuda/pask_ops_cuda.cpp"]
HEADERS = ["csrc/pask_ops_checks.h"]
EXT = "sglang_pask._pask_ops"


def _envs():
    """The package's registry of environment variables (python/sglang_pask/environ.py, standard
    library only), loaded by path: the package is not installed yet."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("_pask_environ", os.path.join(here, "python", "sglang_pask",
                                                                               "environ.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module.envs


def _extension_args() -> dict:
    envs = _envs()
    if envs.SGLANG_PASK_NO_CSRC.get():
        print("sglang_pask: csrc not built (SGLANG_PASK_NO_CSRC=1); the torch reference runs", file=sys.stderr)
        return {}
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as e:  # an isolated build without torch: nothing to build against
        print(f"sglang_pask: csrc not built (torch not importable: {e}); the torch reference runs", file=sys.stderr)
        return {}
    # built where it runs (make install, the GPU script): the host's vector units; -fopenmp-simd
    # lets the decode-attention dot products vectorize (a float reduction) without OpenMP's runtime
    flags = {"cxx": ["-O3", "-std=c++20", "-fopenmp-simd",
                     *([] if envs.SGLANG_PASK_PORTABLE.get() else ["-march=native"])]}
    if torch.cuda.is_available() and cpp_extension.CUDA_HOME:
        ext = cpp_extension.CUDAExtension(EXT, CPU_SOURCES + CUDA_SOURCES,
                                          extra_compile_args={**flags, "nvcc": ["-O3", "-std=c++20"]}, depends=HEADERS)
    else:
        ext = cpp_extension.CppExtension(EXT, CPU_SOURCES, extra_compile_args=flags["cxx"], depends=HEADERS)

    class OptionalBuild(cpp_extension.BuildExtension):
        """A compiler error leaves the package installed without the extension (and says so)."""

        def run(self):
            try:
                super().run()
            except Exception as e:  # noqa: BLE001 -- any build failure (no compiler, a compile error) falls back
                print(f"sglang_pask: csrc not built ({type(e).__name__}: {e}); the torch reference runs",
                      file=sys.stderr)

    return {"ext_modules": [ext], "cmdclass": {"build_ext": OptionalBuild.with_options(use_ninja=False)}}


setup(
    name="sglang_pask",
    version="0.1.0",
    description="Parser-aware, structure-conditioned KV persistence for structured generation (SGLang plugin)",
    package_dir={"": "python"},
    packages=find_packages("python"),
    python_requires=">=3.10",
    # Core runtime dependencies are pinned in requirements/cpu.txt and installed with --no-deps by
    # `make install`; declaring them here would let pip resolve torch to a CUDA build.
    install_requires=[],
    extras_require={
        # For CUDA machines: SGLang with its normal dependency set (not exercisable on CPU).
        "gpu": ["sglang==0.5.23", "xgrammar==0.2.8"],
    },
    entry_points={
        "console_scripts": ["pask = sglang_pask.cli:main"],
        "sglang.srt.plugins": ["pask = sglang_pask.srt.plugin:register"],
    },
    **_extension_args(),
)
