"""``python -m sglang_pask.launch_server [SGLang flags] [--pask-policy PATH]``.

Runs SGLang's own ``sglang.launch_server`` with every flag forwarded untouched; the plugin (loaded
by SGLang through its entry point) adds ``--pask-policy``. The CPU shim is activated first, so this
also works from an interpreter that was not started from the project venv's ``.pth``.
"""

from __future__ import annotations

import runpy
import warnings


def main() -> None:
    from sglang_pask.cpu_shim import activate

    activate()
    # SGLang warns that `sglang serve` is preferred; this wrapper deliberately keeps launch_server.
    warnings.filterwarnings("ignore", message=".*sglang.launch_server.*", category=UserWarning)
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
