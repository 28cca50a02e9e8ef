"""docs/results.md is bench/results/ rendered (no drift), every results folder with a report is on
it with the command that wrote it, and the README, docs/ and the notebook index point only inside the
repository.
No model and no server: seconds."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT

RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "results.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "experiments" / "README.md",
        ROOT / "experiments" / "runs" / "README.md"]


def _generate(tmp_path) -> str:
    out = tmp_path / "results.md"
    r = subprocess.run([sys.executable, "bench/results_page.py", "--out", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return out.read_text()


def test_results_page_is_current(tmp_path):
    assert _generate(tmp_path) == PAGE.read_text(), \
        "docs/results.md differs from bench/results/: run `make results-page` and commit the page"


def test_every_report_folder_is_on_the_page():
    text = PAGE.read_text()
    reports = [d for d in sorted(RESULTS.iterdir())
               if d.is_dir() and ((d / "report.json").exists() or any(d.glob("*.md")))]
    assert len(reports) >= 10, [d.name for d in reports]
    for d in reports:
        m = re.search(rf"^## {re.escape(d.name)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
        assert m, f"bench/results/{d.name}/ has a report but no section in docs/results.md"
        body = m.group(1)
        assert "Written by `" in body and "not recorded" not in body, f"{d.name}: no command"
        if (d / "report.json").exists():
            assert "| mean % [95% CI] |" in body, f"{d.name}: report.json not rendered"


def _anchors(path) -> set[str]:
    """GitHub's heading anchors of a markdown file (lower case, punctuation dropped, spaces -> -)."""
    heads = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_docs_point_inside_the_repository():
    """No tracker numbers (a reader cannot see them), no paths outside the repository, and every
    relative link of README.md and docs/*.md resolves to a file or folder of the repository (and
    to a heading of it, when the link names one)."""
    for doc in DOCS:
        text = doc.read_text()
        name = doc.relative_to(ROOT)
        for bad in (r"\bissue[- ]?#?\d+", r"\bthe issue's\b", r"\bseam issue\b", r"/work/", r"shared folder"):
            m = re.search(bad, text, re.I)
            assert not m, f"{name}: {m.group(0)!r} points outside the repository"
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if re.match(r"[a-z]+://", target) or (target and not re.search(r"[./]", target)):
                continue  # a web address, or no link: math such as D[g](b)
            path = doc.parent / target if target else doc
            assert path.exists(), f"{name}: link {target!r} does not resolve"
            if anchor and path.suffix == ".md":
                assert anchor in _anchors(path), f"{name}: no heading #{anchor} in {target or name}"
