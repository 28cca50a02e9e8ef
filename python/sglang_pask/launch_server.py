"""``python -m sglang_pask.launch_server [SGLang flags] [--pask-policy PATH]``.

Runs SGLang's own ``sglang.launch_server`` with every flag forwarded untouched; the plugin (loaded
by SGLang through its entry point) adds ``--pask-policy``. The CPU shim is activated first, so this
also works from an interpreter that was not started from the project venv's ``.pth``. Before any
of that, and before SGLang is imported (its imports alone take seconds), the command line is
checked, each problem refused with one line on stderr:

* a missing model folder or policy file (exit status 2, as ``pask`` refuses a path);
* a policy that does not load or is not bound to the model, or ``--pask-tag-log`` without a
  policy (exit status 1): the plugin's own check (:func:`sglang_pask.policy.flag.flag_error`), so
  the line is the one ``python -m sglang.launch_server`` gives;
* the plugin's seam against the installed SGLang (``python -m sglang_pask.srt.preflight``, well
  under a second): a version or a hook target that does not fit (exit status 1).

On a machine without CUDA, a float32 checkpoint served without ``--dtype`` runs in float32
(:func:`cpu_dtype_args`, one line on stderr says so): SGLang's ``auto`` casts float32 checkpoints
to float16, a GPU default; on CPUs without float16 arithmetic its GEMMs run several times slower
than float32 (6x on these machines' AVX-512 cores) and drift from the float32 reference runner.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import warnings

from sglang_pask.environ import envs


def _seam_error() -> str | None:
    """The plugin's pre-flight, before SGLang is imported (that alone takes seconds): the
    installed SGLang is the version the plugin is written for, and every SGLang name its seam
    declares resolves in the installed sources. Run as its own process: ``srt`` (the plugin) is
    loaded by SGLang, never imported by the launcher."""
    r = subprocess.run([sys.executable, "-m", "sglang_pask.srt.preflight"], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode == 0:
        return None
    lines = r.stderr.strip().splitlines()
    return lines[-1] if lines else f"error: sglang_pask: the seam check exited with {r.returncode}"


#: SGLang's registry then imports only the model modules of :mod:`sglang_pask.srt.models` at start
#: and the rest on demand (an architecture not there loads them all, as stock): about 2.5 s of CPU
#: less per scheduler, and no "Ignore import error" line per GPU-only model module
ENV_MODEL_PACKAGE, MODEL_PACKAGE = "SGLANG_EXTERNAL_MODEL_PACKAGE", "sglang_pask.srt.models"

#: SGLang's ``--model-path`` and its alias
_MODEL_FLAGS = ("--model-path", "--model")


def _path_error(argv: list[str]) -> str | None:
    """A missing model folder or policy file: the one line, or None."""
    from sglang_pask.paths import argv_values, file_error, model_dir_error  # light: no torch, no SGLang
    from sglang_pask.policy.flag import FLAG, flag_error

    for flag in _MODEL_FLAGS:
        for value in argv_values(argv, flag):
            if err := model_dir_error(value, flag):
                return f"error: {err}"
    for value in argv_values(argv, FLAG):
        if value and file_error(value, FLAG) and (err := flag_error(value)):
            return err  # the plugin's line for a file that is not there
    return None


def _flag_error(argv: list[str]) -> str | None:
    """The plugin's check of ``--pask-policy`` (every value given: each must load and be bound to
    the model SGLang will serve) and ``--pask-tag-log``, made before SGLang loads: the one line, or None."""
    from sglang_pask.paths import argv_values
    from sglang_pask.policy.flag import FLAG, TAG_LOG_FLAG, flag_error  # light: no torch, no SGLang

    # the values argparse keeps: the last given
    model, tag_log = ((argv_values(argv, *flags) or [None])[-1] for flags in (_MODEL_FLAGS, (TAG_LOG_FLAG,)))
    policies = argv_values(argv, FLAG)
    for value in dict.fromkeys(policies[:-1]):
        if err := flag_error(value, model):
            return err
    return flag_error(policies[-1] if policies else None, model, tag_log)


def checkpoint_dtype(model_dir: str) -> str | None:
    """The dtype a checkpoint's ``config.json`` names (``dtype``, else ``torch_dtype``), or None."""
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    value = config.get("dtype") or config.get("torch_dtype")
    return value if isinstance(value, str) else None


def cpu_dtype_args(argv: list[str], cuda: bool) -> list[str]:
    """``["--dtype", "float32"]`` when the server runs on CPU (``--device cpu``, or no device
    flag and no CUDA), no ``--dtype`` is given and the checkpoint is float32; else ``[]``."""
    from sglang_pask.paths import argv_values

    device = (argv_values(argv, "--device") or ["cpu" if not cuda else "cuda"])[-1]
    if device != "cpu" or argv_values(argv, "--dtype"):
        return []
    model = (argv_values(argv, *_MODEL_FLAGS) or [None])[-1]
    return ["--dtype", "float32"] if model and checkpoint_dtype(model) == "float32" else []


def main() -> None:
    argv = sys.argv[1:]
    if err := _path_error(argv):
        print(err, file=sys.stderr)
        sys.exit(2)
    if err := _flag_error(argv):
        print(err, file=sys.stderr)
        sys.exit(1)
    if err := _seam_error():
        print(err, file=sys.stderr)
        sys.exit(1)
    from sglang_pask.cpu_shim import activate, cuda_present

    activate()
    if extra := cpu_dtype_args(argv, cuda_present()):
        print("sglang_pask: serving the float32 checkpoint in float32 on CPU (SGLang's --dtype auto would "
              "cast it to float16, several times slower here); pass --dtype to choose", file=sys.stderr)
        sys.argv.extend(extra)
    # SGLang warns that `sglang serve` is preferred; this wrapper deliberately keeps launch_server.
    warnings.filterwarnings("ignore", message=".*sglang.launch_server.*", category=UserWarning)
    envs.SGLANG_PASK_LAUNCHER.set(True)
    os.environ.setdefault(ENV_MODEL_PACKAGE, MODEL_PACKAGE)  # the user's choice wins
    try:
        runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    except KeyboardInterrupt:  # Ctrl-C: SGLang has shut down and stopped its children already;
        sys.exit(0)  # a requested stop (as uvicorn's own Ctrl-C), so `make serve` adds no error line


if __name__ == "__main__":
    main()
