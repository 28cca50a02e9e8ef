"""Process conventions shared by the launcher (:mod:`sglang_pask.launch_server`) and the plugin
(:mod:`sglang_pask.srt.plugin`), which runs in every process the launcher's server starts.

Light on purpose: the standard library only, so both sides import it without loading SGLang.
"""

from __future__ import annotations

import os

#: set by the launcher, inherited by the server's child processes (:func:`child_ignores_ctrl_c`)
ENV_LAUNCHER = "SGLANG_PASK_LAUNCHER"


def child_ignores_ctrl_c() -> None:
    """In a child process of the launcher (the plugin calls this in every process): ignore SIGINT.
    Ctrl-C in a terminal reaches the whole process group; the launcher alone handles it (SGLang's
    shutdown then kills its children by PID), so the scheduler and detokenizer no longer die
    mid-loop printing KeyboardInterrupt tracebacks."""
    import multiprocessing
    import signal

    if os.environ.get(ENV_LAUNCHER) == "1" and multiprocessing.parent_process() is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
