"""Process conventions shared by the launcher (:mod:`sglang_pask.launch_server`) and the plugin
(:mod:`sglang_pask.srt.plugin`), which runs in every process the launcher's server starts.

Light on purpose: the standard library only, so both sides import it without loading SGLang.
"""

from __future__ import annotations

import os

from sglang_pask.environ import envs


def child_leaves_stop_to_launcher() -> None:
    """In a child process of the launcher (the plugin calls this in every process): ignore SIGINT
    and SIGTERM. Ctrl-C in a terminal, and a stop sent to the whole process group (``kill --
    -PGID``, a container or service manager), reach every process; the launcher alone handles
    them (SGLang drains, asks the schedulers to exit, then kills its children by PID), so the
    scheduler and detokenizer no longer die first -- which SGLang reports as a crashed child,
    answers with SIGQUIT and ends with the launcher killed (-9). A child still dies with the
    launcher: SGLang sets SIGKILL as its parent-death signal."""
    import multiprocessing
    import signal

    if envs.SGLANG_PASK_LAUNCHER.get() and multiprocessing.parent_process() is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def before_final_kill(parent_pid=None, include_parent: bool = True, *args, **kwargs):
    """Before ``kill_process_tree`` (a BEFORE hook, :mod:`sglang_pask.srt.seam`): in our
    launcher, when SGLang's ``launch_server`` ends with its final ``kill_process_tree(os.getpid(),
    include_parent=False)`` (uvicorn has shut down after Ctrl-C or SIGTERM), stop SGLang's
    subprocess watchdog first. SGLang stops it on its own graceful path, not on this one: the
    SIGKILL then reaches the scheduler while the watchdog (1 s poll) may still be looking, and on a
    loaded machine it reports "Subprocess scheduler_0 crashed with exit code -9" and sends SIGQUIT
    although the stop was requested. Anywhere else: nothing."""
    if (envs.SGLANG_PASK_LAUNCHER.get() and parent_pid == os.getpid() and not include_parent):
        import sys

        http = sys.modules.get("sglang.srt.entrypoints.http_server")
        state = getattr(http, "_global_state", None)
        watchdog = getattr(getattr(state, "tokenizer_manager", None), "_subprocess_watchdog", None)
        # still polling (SGLang's graceful SIGTERM path has stopped it already: then nothing to say)
        if watchdog is not None and not watchdog._stop_event.is_set():
            watchdog.stop()
            import logging

            logging.getLogger("sglang_pask").info("sglang_pask: stop requested: SGLang's subprocess watchdog "
                                                  "stopped before the final cleanup")
    return None
