"""The README's commands, timed as a user runs them, on this machine (writes the times the README
quotes: ``report.md``, ``times.json``, ``meta.json`` into ``--out``).

What runs, in order (each server stopped with SIGTERM to its process group, as a service manager
does, also on failure):

* :data:`COMMANDS`: ``make install`` and ``make real-model`` when both are done already (what a
  second run costs), ``make lint``, ``make results-page``, ``make model``, the two micro-benches;
* ``make serve`` (the default model): seconds to a healthy server, then every README / docs block marked
  ``readme-test`` that talks to it, each timed, then the stop;
* ``make serve POLICY=policies/pask-tiny-fc.b0.33.json`` (the recommended line): start and the same
  blocks again; ``make serve POLICY=experiments/policies/pask-tiny-fc.segment.b0.33.json
  SERVE_ARGS="--pask-segment-prefill full"`` (the radix line): start;
* every other ``readme-test`` block, timed;
* with ``models/qwen2.5-coder-0.5b-instruct`` built: ``make serve MODEL=...`` start and the
  ``real-model-test`` block.

Times depend on load: ``meta.json`` records the load average before and after.

    .venv/bin/python bench/readme_times.py --out bench/results/readme-times
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from sglang_pask.testing import documented_blocks, free_port, run_readme_block

ROOT = Path(__file__).resolve().parents[1]
REAL = "models/qwen2.5-coder-0.5b-instruct"
#: the README's other quick commands, run as written: (command, what the row adds)
COMMANDS = (("make -s install", " (done already)"), ("make -s real-model", " (done already)"),
            ("make -s lint", ""), ("make -s results-page", ""), ("make -s model", ""),
            (".venv/bin/python bench/bench_tagging.py", ""), (".venv/bin/python bench/bench_runner.py", ""))


def timed(cmd: list[str]) -> tuple[float, int, str]:
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return time.monotonic() - t0, r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1:]


class MakeServe:
    """``make -s serve ARGS... PORT=<free>`` in its own process group: ``ready_s`` to a healthy
    ``/health``; on exit SIGTERM to the group, ``stop_s`` until make exits."""

    def __init__(self, args: list[str], log: Path, timeout: float = 600):
        self.args, self.log, self.timeout = args, log, timeout
        self.port = free_port()

    def __enter__(self):
        self.out = open(self.log, "w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(["make", "-s", "serve", *self.args, f"PORT={self.port}"], cwd=ROOT,
                                     stdout=self.out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"make serve {self.args} exited {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            if time.monotonic() - t0 > self.timeout:
                self._stop()
                raise RuntimeError(f"make serve {self.args}: not healthy after {self.timeout:.0f} s")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.25)
        self.ready_s = time.monotonic() - t0
        return self

    def _stop(self) -> None:
        t0 = time.monotonic()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
        self.stop_s = time.monotonic() - t0
        self.out.close()

    def __exit__(self, *exc):
        self._stop()
        return False


def run_blocks(blocks, port, rows: list, label: str, tmp: Path, expects: bool = True) -> None:
    """Each block timed; ``ok``: exit 0 and (``expects``) every regex of its marker in its output
    (the README states them for the server it names, so another server's run checks the exit only;
    its ``mean`` line, if any, is recorded)."""
    for b in blocks:
        with tempfile.TemporaryDirectory(dir=tmp) as d:
            r, seconds, missing = run_readme_block(b, ROOT, d, port)
        ok = r.returncode == 0 and (not missing or not expects)
        mean = [ln.strip() for ln in r.stdout.splitlines() if ln.startswith("| **mean**")]
        first = next((ln.strip() for ln in b.code.splitlines() if ln.strip() and not ln.startswith("import")), "")
        first = first[:60] + ("..." if len(first) > 60 else "")
        rows.append({"command": f"{b.where} {first} ({b.kind} block{label})", "seconds": round(seconds, 1), "ok": ok,
                     "note": mean[-1] if mean else ""})
        print(f"  {rows[-1]['command']}: {seconds:.1f} s{'' if ok else ' FAILED'}", flush=True)


def serve_row(rows: list, args: list[str], log: Path, blocks=(), tmp: Path | None = None, label: str = "",
              expects: bool = True) -> None:
    shown = " ".join(["make serve", *args])
    print(f"{shown}: starting", flush=True)
    rows_after: list[dict] = []
    with MakeServe(args, log) as srv:
        print(f"  ready after {srv.ready_s:.1f} s", flush=True)
        run_blocks(blocks, srv.port, rows_after, label, tmp, expects)
    rows.append({"command": f"{shown} (start to healthy)", "seconds": round(srv.ready_s, 1), "ok": True})
    rows.extend(rows_after)
    rows.append({"command": f"{shown} (SIGTERM to exit)", "seconds": round(srv.stop_s, 1),
                 "ok": srv.proc.returncode in (0, -signal.SIGTERM)})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for report.md, times.json, meta.json")
    a = p.parse_args(argv)
    from sglang_pask.calibrate.pipeline import code_version

    t0, load0 = time.time(), os.getloadavg()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    blocks = documented_blocks(ROOT)
    served = [b for b in blocks if b.needs_server]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for cmd, label in COMMANDS:
            s, rc, last = timed(cmd.split())
            rows.append({"command": f"{cmd}{label}", "seconds": round(s, 1), "ok": rc == 0})
            print(f"{cmd}: {s:.1f} s {last}", flush=True)
        serve_row(rows, [], tmp / "serve.log", served, tmp)
        serve_row(rows, ["POLICY=policies/pask-tiny-fc.b0.33.json"], tmp / "serve-policy.log", served, tmp,
                  ", against the policy server", expects=False)
        serve_row(rows, ["POLICY=experiments/policies/pask-tiny-fc.segment.b0.33.json",
                         "SERVE_ARGS=--pask-segment-prefill full"],
                  tmp / "serve-radix.log")
        print("blocks without a server", flush=True)
        run_blocks([b for b in blocks if not b.needs_server], None, rows, "", tmp)
        if (ROOT / REAL / "config.json").exists():
            serve_row(rows, [f"MODEL={REAL}"], tmp / "serve-real.log",
                      documented_blocks(ROOT, marker="real-model-test"), tmp)
    meta = {"command": " ".join(["python", *sys.argv]), "code": code_version()[0],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load0], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(time.time() - t0, 1)}
    lines = ["# The README's commands, timed (written by bench/readme_times.py)", "",
             f"Command: `{meta['command']}` ({meta['code']}, {meta['date']}, {meta['cpus']} cpus, load average "
             f"before {meta['loadavg_before'][0]}, after {meta['loadavg_after'][0]}; {meta['wall_s']:.0f} s in all).",
             "", "| command | seconds | ok | its mean row |", "|---|---:|---|---|"]
    lines += [f"| `{r['command']}` | {r['seconds']:.1f} | {'yes' if r['ok'] else 'NO'} | "
              f"{r.get('note', '').replace('|', ' ').replace('*', '')} |" for r in rows]
    text = "\n".join(lines) + "\n"
    (out / "times.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    (out / "report.md").write_text(text)
    print(text)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
