"""The test server helper reports a failed start with the server's log; Ctrl-C or SIGTERM stops `make serve`.
(That it stops the whole server tree by PID when the test body fails is checked on the server
test_eval_server_dies.py starts anyway: one server start fewer.)"""

from __future__ import annotations

import psutil
import pytest
from conftest import TINY_RANDOM
from sglang_pask.environ import envs
from sglang_pask.testing import ServerStartError, running_server


def test_start_failure_reports_log():
    with pytest.raises(ServerStartError, match="server exited"):
        with running_server(str(TINY_RANDOM), ["--no-such-flag"]):
            pass


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_stops_make_serve_cleanly(tmp_path, sig):
    """Ctrl-C in the terminal (SIGINT to the whole foreground process group), or SIGTERM to the
    group (a container or service manager stopping it), stops `make serve` with a policy: every
    process exits, nothing prints a traceback or reports a crashed child, the launcher exits 0."""
    import os
    import signal
    import subprocess
    import time

    import requests
    from conftest import DEFAULT_POLICY, ROOT
    from sglang_pask.testing import free_port

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["make", "-s", "serve", f"MODEL={TINY_RANDOM}", f"PORT={port}",
                                 f"POLICY={DEFAULT_POLICY}"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                # a terminal's default: SIGINT kills. A runner that started us in the
                                # background (nohup ... &) hands SIGINT down ignored, and make then never sees it.
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        pids = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(pids) >= 3, log.read_text()[-2000:]
        signum = getattr(signal, sig)
        os.killpg(proc.pid, signum)
        # GNU make, on SIGINT or SIGTERM, waits for its recipe and then re-raises the signal on itself,
        # so its own status is -signum (what a shell shows as nothing). The server under it must exit 0:
        # make prints "make: *** [...] Error N" or "Interrupt"/"Terminated" for a recipe that failed or
        # died by signal.
        assert proc.wait(timeout=60) in (0, -signum)
        time.sleep(1)
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        text = log.read_text()
        assert not alive, f"still alive: {alive}"
        assert "make: ***" not in text, text[-3000:]
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
        assert "crashed with exit code" not in text and "SIGQUIT received" not in text, text[-3000:]
        # Ctrl-C stops through uvicorn, where only the seam's hook stops the watchdog; on SIGTERM
        # SGLang's graceful path stops it itself (then the hook has nothing to do or say)
        stopped = text.count("SGLang's subprocess watchdog stopped before the final cleanup")
        assert stopped == (1 if sig == "SIGINT" else 0), text[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("launcher", [True, False])
def test_the_final_kill_stops_sglangs_watchdog_first(monkeypatch, launcher):
    """SGLang's last act after a requested stop, ``kill_process_tree(os.getpid(),
    include_parent=False)``, SIGKILLs the scheduler while its ``SubprocessWatchdog`` may still poll
    (it then logs a crash and sends SIGQUIT). The seam's BEFORE hook stops that watchdog first, in
    our launcher only (``$SGLANG_PASK_LAUNCHER``); elsewhere it leaves it running."""
    import multiprocessing
    import os
    import sys
    import time
    import types

    from sglang.srt.utils.watchdog import SubprocessWatchdog
    from sglang_pask import process

    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()
    watchdog = SubprocessWatchdog([child], ["scheduler_0"], interval=0.2)
    watchdog.start()
    state = types.SimpleNamespace(tokenizer_manager=types.SimpleNamespace(_subprocess_watchdog=watchdog))
    monkeypatch.setitem(sys.modules, "sglang.srt.entrypoints.http_server", types.SimpleNamespace(_global_state=state))
    monkeypatch.setenv(envs.SGLANG_PASK_LAUNCHER.name, "1" if launcher else "0")
    try:
        assert process.before_final_kill(os.getpid(), include_parent=False) is None  # args unchanged
        process.before_final_kill(os.getpid())  # include_parent=True: not the final cleanup, nothing
        assert watchdog._stop_event.is_set() is launcher and (watchdog._thread is None) is launcher
    finally:
        watchdog.stop()  # before the kill below, or the watchdog would SIGQUIT this test process
        child.kill()
        child.join()
