"""The CPU shim: active at interpreter start, stand-ins raise naming the op, inert with CUDA."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import run_python


def test_pth_hook_installed():
    pth = Path(sysconfig.get_paths()["purelib"]) / "zz_sglang_pask_cpu_shim.pth"
    assert pth.read_text().strip() == "import sglang_pask.cpu_shim.boot"


def test_standins_active_at_start_and_raise_naming_the_op():
    code = (
        "import os, torchvision, torchvision.transforms.functional as F, sgl_kernel\n"
        "from sgl_kernel.sub.mod import some_op\n"
        "from torchvision.transforms import InterpolationMode\n"
        "from sglang_pask.cpu_shim import StandInCalled, is_standin\n"
        "assert is_standin(torchvision) and is_standin(sgl_kernel)\n"
        "assert os.environ['SGLANG_USE_CPU_ENGINE'] == '1'\n"
        "_ = InterpolationMode.BICUBIC\n"
        "for fn, name in ((sgl_kernel.copy_all_layer_kv_cache_cpu, 'sgl_kernel.copy_all_layer_kv_cache_cpu'),\n"
        "                 (some_op, 'sgl_kernel.sub.mod.some_op'),\n"
        "                 (F.resize, 'torchvision.transforms.functional.resize')):\n"
        "    try:\n"
        "        fn(1, 2)\n"
        "    except StandInCalled as e:\n"
        "        assert name in str(e), e\n"
        "    else:\n"
        "        raise AssertionError('stand-in did not raise')\n"
        "print('ok')\n"
    )
    r = run_python("-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def _env_without_cpu_engine(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    return {**env, **extra}


def test_env_default_is_cpu_engine():
    r = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('SGLANG_USE_CPU_ENGINE'))"],
        capture_output=True, text=True, env=_env_without_cpu_engine(),
    )
    assert r.stdout.strip() == "1"


def test_inert_when_cuda_present():
    code = (
        "import os\n"
        "try:\n"
        "    import sgl_kernel\n"
        "except ModuleNotFoundError:\n"
        "    print('absent', os.environ.get('SGLANG_USE_CPU_ENGINE'))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env=_env_without_cpu_engine(SGLANG_PASK_ASSUME_CUDA="1"),
    )
    assert r.stdout.strip() == "absent None", r.stdout + r.stderr


def test_sglang_cpu_modules_import():
    """The modules that need the stand-ins at import time import cleanly in a fresh interpreter."""
    r = run_python(
        "-c",
        "import sglang.srt.multimodal.internvl_utils, sglang.srt.mem_cache.allocation, "
        "sglang.kernels.ops.kvcache.cache_move; print('ok')",
    )
    assert r.returncode == 0, r.stderr[-2000:]


def test_cpu_only_warnings_silenced_and_nothing_else():
    """In a fresh interpreter (the .pth shim active): SGLang's import-time CPU-only warnings are
    ignored, any other UserWarning still prints; with CUDA present the shim filters nothing."""
    code = ("import warnings\n"
            "warnings.warn('Only CUDA, HIP and XPU support AWQ currently.')\n"
            "warnings.warn('Triton is not supported on current platform, roll back to CPU.')\n"
            "warnings.warn('another warning')\n")
    r = run_python("-c", code)
    assert r.returncode == 0 and "Only CUDA" not in r.stderr and "Triton" not in r.stderr, r.stderr
    assert "another warning" in r.stderr
    cuda = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env_without_cpu_engine(SGLANG_PASK_ASSUME_CUDA="1"))
    assert "Only CUDA" in cuda.stderr and "Triton" in cuda.stderr, cuda.stderr
