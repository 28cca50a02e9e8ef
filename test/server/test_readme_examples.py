"""The README's examples run and mean something: every code block of README.md and docs/*.md marked
``<!-- readme-test expect="REGEX" ... -->`` runs as written (bash or python, from the repository
root) and must exit 0 with each REGEX found in its output. Blocks that talk to ``make serve``'s
address follow ``$PORT`` as the Makefile does (no example hard-codes a port: a user who serves with
``PORT=`` runs them unedited); they get a live server of the default model started here with
``make serve``'s flags (stopped by PID) and run with ``PORT`` set to its port; ``runs/`` becomes a
temp folder."""

from __future__ import annotations

import pytest
from conftest import ROOT
from sglang_pask.testing import HARD_PORT, documented_blocks, readme_blocks, run_readme_block

#: the blocks that need a server look fc_server up (request.getfixturevalue), which the collection
#: hook cannot see: the module names its group itself
pytestmark = pytest.mark.xdist_group("fc_server")

BLOCKS = documented_blocks(ROOT)


def test_examples_are_marked():
    kinds = {b.kind for b in BLOCKS}
    assert len(BLOCKS) >= 6 and kinds == {"bash", "python"}
    assert any(b.needs_server for b in readme_blocks(ROOT / "README.md"))  # the first run's openai example
    for marker in ("readme-test", "real-model-test"):
        for b in documented_blocks(ROOT, marker):
            assert HARD_PORT not in b.code, f"{b.where}: a hard-coded port (follow $PORT as make serve does)"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_readme_example(block, tmp_path, request):
    port = request.getfixturevalue("fc_server").port if block.needs_server else None  # `make serve`'s server
    r, _, missing = run_readme_block(block, ROOT, tmp_path, port, timeout=600)
    out = r.stdout + r.stderr
    print(f"{block.where}: rc {r.returncode}\n{r.stdout[-1500:]}")
    assert r.returncode == 0, f"{block.where} failed:\n{out[-3000:]}"
    assert not missing, f"{block.where}: {missing} not in the output:\n{out[-3000:]}"
