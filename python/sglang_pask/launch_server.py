"""``python -m sglang_pask.launch_server [SGLang flags] [--pask-policy PATH]``.

Runs SGLang's own ``sglang.launch_server`` with every flag forwarded untouched; the plugin (loaded
by SGLang through its entry point) adds ``--pask-policy``. The CPU shim is activated first, so this
also works from an interpreter that was not started from the project venv's ``.pth``.
"""

from __future__ import annotations

import os
import runpy
import sys
import warnings

#: set by this launcher, inherited by the server's child processes (:func:`child_ignores_ctrl_c`)
ENV_LAUNCHER = "SGLANG_PASK_LAUNCHER"


def child_ignores_ctrl_c() -> None:
    """In a child process of this launcher (the plugin calls this in every process): ignore SIGINT.
    Ctrl-C in a terminal reaches the whole process group; the launcher alone handles it (SGLang's
    shutdown then kills its children by PID), so the scheduler and detokenizer no longer die
    mid-loop printing KeyboardInterrupt tracebacks."""
    import multiprocessing
    import signal

    if os.environ.get(ENV_LAUNCHER) == "1" and multiprocessing.parent_process() is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


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
