"""The README's examples run and mean something: every code block marked
``<!-- readme-test expect="REGEX" ... -->`` runs as written (bash or python, from the repository
root) and must exit 0 with each REGEX found in its output. Blocks that talk to
``127.0.0.1:30000`` (``make serve``'s address) get a live server of the default model started
here with ``make serve``'s flags (and stopped by PID); ``runs/`` becomes a temp folder."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

MARK = re.compile(r"^<!-- readme-test((?: expect=\"[^\"]*\")+) -->\n```(bash|python)\n(.*?)^```", re.M | re.S)
ADDRESS = "127.0.0.1:30000"


def _blocks() -> list[tuple[str, list[str], str, str]]:
    text = (ROOT / "README.md").read_text()
    out = []
    for m in MARK.finditer(text):
        line = text[: m.start()].count("\n") + 1
        expects = re.findall(r'expect="([^"]*)"', m.group(1))
        out.append((f"README.md:{line}", expects, m.group(2), m.group(3)))
    return out


BLOCKS = _blocks()


def test_examples_are_marked():
    kinds = {kind for _, _, kind, _ in BLOCKS}
    assert len(BLOCKS) >= 6 and kinds == {"bash", "python"}
    assert any(ADDRESS in code for *_, code in BLOCKS)  # the openai example


@pytest.mark.parametrize("where, expects, kind, code", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_readme_example(where, expects, kind, code, tmp_path, request):
    if ADDRESS in code:
        srv = request.getfixturevalue("fc_server")  # the stock server `make serve` starts (conftest)
        code = code.replace(ADDRESS, f"127.0.0.1:{srv.port}")
    code = code.replace("runs/", f"{tmp_path}/runs/")
    script = tmp_path / ("example.sh" if kind == "bash" else "example.py")
    script.write_text(code)
    cmd = ["bash", "-euo", "pipefail", str(script)] if kind == "bash" else [sys.executable, str(script)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    print(f"{where}: rc {r.returncode}\n{r.stdout[-1500:]}")
    assert r.returncode == 0, f"{where} failed:\n{out[-3000:]}"
    for e in expects:
        assert re.search(e, out), f"{where}: {e!r} not in the output:\n{out[-3000:]}"
