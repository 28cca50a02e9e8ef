"""Test-only helpers: a real SGLang server in a subprocess, stopped by PID.

    with running_server(model_dir, extra_args=["--pask-policy", path]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="none")

Invariants: the server is started on a free port with the project's launcher
(``python -m sglang_pask.launch_server``); ``/health`` must answer 200 and the log must not show
``Errno 98`` (port taken: a stale server would answer health checks) before the server counts as
ready; on exit (normal or exception) the launcher PID gets SIGTERM (SGLang then stops its
scheduler/detokenizer) and any child still alive after a grace period is killed by PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from typing import Iterator, Sequence

#: Flags every test server gets: the CPU pool cap (else ~16 GB) and the tool parser.
DEFAULT_ARGS = (
    "--tool-call-parser", "qwen",
    "--max-total-tokens", "65536",
    "--constrained-json-disable-any-whitespace",
)


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy; the message carries the log tail."""


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log_path: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def launch_command(model: str, port: int, extra_args: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable, "-m", "sglang_pask.launch_server",
        "--model-path", model, "--host", "127.0.0.1", "--port", str(port),
        *DEFAULT_ARGS, *extra_args,
    ]


def stop(proc: subprocess.Popen, grace: float = 20.0, graceful: bool = True) -> None:
    """SIGTERM the launcher by PID, then kill by PID whatever of its tree survives the grace.
    ``graceful=False``: SIGKILL the launcher and every process of its tree by PID at once (a test
    server whose shutdown is not under test: SGLang's SIGTERM path polls every 5 s and then waits
    for its scheduler, about 10 s a server)."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if not graceful:
        for p in [*children]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        psutil.wait_procs(children, timeout=10)
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    _, alive = psutil.wait_procs(children, timeout=5)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


class _PortTaken(ServerStartError):
    """The chosen port was taken between :func:`free_port` and the server's bind."""


def free_port_in(ports: Sequence[int]) -> int:
    """The first port of ``ports`` nothing on this machine listens on (OSError when none is)."""
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {ports[0]}-{ports[-1]}" if len(ports) else "no ports given")


def _start(model: str, extra_args: Sequence[str], timeout: float, env: dict | None,
           ports: Sequence[int] | None = None) -> Server:
    """A healthy server on a fresh free port (the first free one of ``ports`` when given; stopped
    before any error is raised)."""
    port = free_port_in(ports) if ports else free_port()
    fd, log_path = tempfile.mkstemp(prefix=f"pask-server-{port}-", suffix=".log")
    os.close(fd)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            launch_command(model, port, extra_args),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
    server = Server(proc, port, log_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise ServerStartError(f"server exited with {proc.returncode}:\n{server.log()[-4000:]}")
            if "Errno 98" in server.log():
                raise _PortTaken(f"port {port} already in use:\n{server.log()[-2000:]}")
            if _healthy(server.url):
                return server
            if time.monotonic() > deadline:
                raise ServerStartError(f"server not healthy after {timeout}s:\n{server.log()[-4000:]}")
            time.sleep(0.5)
    except BaseException:
        stop(proc)
        raise


@contextlib.contextmanager
def running_server(
    model: str, extra_args: Sequence[str] = (), timeout: float = 240.0, env: dict | None = None,
    port_tries: int = 3, graceful: bool = False, ports: Sequence[int] | None = None,
) -> Iterator[Server]:
    """A healthy server, stopped by PID on exit (also on failure; killed at once unless
    ``graceful``: :func:`stop`). A port taken between choosing and binding it (another process,
    e.g. a server's internal sockets, took it first) is retried on a new free port, up to
    ``port_tries`` starts. ``ports``: choose from these only (a range a firewall allows)."""
    for attempt in range(port_tries):
        try:
            server = _start(model, extra_args, timeout, env, ports)
            break
        except _PortTaken:
            if attempt == port_tries - 1:
                raise
    try:
        yield server
    finally:
        stop(server.proc, graceful=graceful)


#: ``<!-- MARKER expect="REGEX" ... -->`` right above a fenced bash or python block of the README
_README_BLOCK = r'^<!-- {marker}((?: expect="[^"]*")+) -->\n```(bash|python)\n(.*?)^```'
#: the address the README's examples talk to: ``make serve``'s, its port from ``$PORT`` as the
#: Makefile's (``${PORT:-30000}`` in bash, ``os.environ.get('PORT', '30000')`` in Python)
README_HOST = "127.0.0.1:"
README_PORT = ("${PORT:-30000}", "{os.environ.get('PORT', '30000')}")
#: a port written into an example (the examples must follow ``$PORT``: test_readme_examples.py)
HARD_PORT = "127.0.0.1:30000"


@dataclass(frozen=True)
class ReadmeBlock:
    """One marked example of a markdown file: where it is (``README.md:LINE``), the regexes its
    output must hold, its language and its code as written."""

    where: str
    expects: tuple
    kind: str
    code: str

    @property
    def needs_server(self) -> bool:
        return any(README_HOST + p in self.code for p in README_PORT)


def readme_blocks(path, marker: str = "readme-test") -> list[ReadmeBlock]:
    """Every block of ``path`` marked ``<!-- MARKER expect=... -->``, in file order."""
    import re
    from pathlib import Path

    text = Path(path).read_text()
    out = []
    for m in re.finditer(_README_BLOCK.format(marker=re.escape(marker)), text, re.M | re.S):
        line = text[: m.start()].count("\n") + 1
        out.append(ReadmeBlock(f"{Path(path).name}:{line}", tuple(re.findall(r'expect="([^"]*)"', m.group(1))),
                               m.group(2), m.group(3)))
    return out


def documented_blocks(root, marker: str = "readme-test") -> list[ReadmeBlock]:
    """Every marked block of the README and of the pages under ``docs/`` (where the README's
    reference sections live), README first, then the pages by name."""
    from pathlib import Path

    pages = [Path(root) / "README.md", *sorted((Path(root) / "docs").glob("*.md"))]
    return [b for page in pages for b in readme_blocks(page, marker)]


def run_readme_block(block: ReadmeBlock, cwd, tmp, port: int | None = None,
                     timeout: float = 900) -> tuple[subprocess.CompletedProcess, float, list[str]]:
    """Run ``block`` as written from ``cwd`` (``$PORT`` set to ``port``, as a user sets it;
    ``runs/`` at ``tmp/runs/``); returns the finished process, its wall seconds, and the expected
    regexes missing from its output (stdout and stderr)."""
    import re
    from pathlib import Path

    code = block.code.replace("runs/", f"{tmp}/runs/")
    env = {**os.environ, "PORT": str(port)} if port is not None else None
    script = Path(tmp) / ("example.sh" if block.kind == "bash" else "example.py")
    script.write_text(code)
    cmd = ["bash", "-euo", "pipefail", str(script)] if block.kind == "bash" else [sys.executable, str(script)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    seconds = time.monotonic() - t0
    missing = [e for e in block.expects if not re.search(e, r.stdout + r.stderr)]
    return r, seconds, missing
