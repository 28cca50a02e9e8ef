"""``python -m sglang_pask.launch_server [SGLang flags] [--pask-policy PATH]``.

Runs SGLang's own ``sglang.launch_server`` with every flag forwarded untouched; the plugin (loaded
by SGLang through its entry point) adds ``--pask-policy``. The CPU shim is activated first, so this
also works from an interpreter that was not started from the project venv's ``.pth``. Before any
of that, the plugin's seam is checked against the installed SGLang (``python -m
sglang_pask.srt.preflight``, well under a second): a version or a hook target that does not fit is
refused with one line, exit status 1.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import warnings

from sglang_pask.process import ENV_LAUNCHER


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


def _path_error(argv: list[str]) -> str | None:
    """A missing model folder or policy file, found before SGLang (seconds of imports) loads."""
    from sglang_pask.paths import argv_values, file_error, model_dir_error  # light: no torch, no SGLang

    for flag in ("--model-path", "--model"):
        for value in argv_values(argv, flag):
            if err := model_dir_error(value, flag):
                return err
    for value in argv_values(argv, "--pask-policy"):
        if file_error(value, "--pask-policy"):  # the plugin's own wording (policy.document)
            return f"--pask-policy: policy file {value!r} does not exist"
    return None


def main() -> None:
    if err := _path_error(sys.argv[1:]):
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if err := _seam_error():
        print(err, file=sys.stderr)
        sys.exit(1)
    from sglang_pask.cpu_shim import activate

    activate()
    # SGLang warns that `sglang serve` is preferred; this wrapper deliberately keeps launch_server.
    warnings.filterwarnings("ignore", message=".*sglang.launch_server.*", category=UserWarning)
    os.environ[ENV_LAUNCHER] = "1"
    try:
        runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    except KeyboardInterrupt:  # Ctrl-C: SGLang has shut down and stopped its children already;
        sys.exit(0)  # a requested stop (as uvicorn's own Ctrl-C), so `make serve` adds no error line


if __name__ == "__main__":
    main()
