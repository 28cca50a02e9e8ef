"""Draws docs/flow.png: how a request flows through PASK, and what it keeps for one real request.

    .venv/bin/python docs/draw_flow.py            # writes docs/flow.png (about 30 s on 2 cores)

Top: the data path (request -> rendering and tags -> policy -> kept slots per layer group ->
attention). Bottom: not a sketch but a run: the README's first-run request (``get_playlist``,
code K5) through the reference runner with ``policies/pask-tiny-fc.b0.33.json`` at b = 0.33, prefill
schedule; each prompt token coloured by its structural class, and which of them each layer
group still holds after the prefill-end compression. Every count in the picture is computed here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = "models/pask-tiny-fc"
POLICY = "policies/pask-tiny-fc.b0.33.json"
BUDGET = 0.33
REQUEST = {
    "messages": [{"role": "user", "content": "Get the playlist with code K5."}], "tool_choice": "required",
    "tools": [{"type": "function", "function": {
        "name": "get_playlist", "description": "Get a playlist record.",
        "parameters": {"type": "object", "properties": {"reference": {"type": "string"}},
                       "required": ["reference"]}}}],
}
#: classes whose tokens get their text written over the strip
LABELLED = ("TOOL_NAME", "PARAM_NAME", "REQUIRED_LIST", "QUERY_TEXT", "QUERY_VALUE")
STAGES = [
    ("chat request", "messages + tools\n(OpenAI API)"),
    ("render + tag", "rendering.render_chat:\ntoken ids and one\nstructural class per token"),
    ("policy", "policies/*.json: per layer\ngroup class floors, priority,\nresidual share; operating point"),
    ("kept slots", "methods/pask.py at budget b:\nwhich positions each\nlayer group keeps"),
    ("attention", "reads only the kept slots\n(srt/attention/ in the server,\nhf/attention.py in the runner)"),
]


def run_example():
    """(prompt token texts, classes, {group: kept prompt positions}, groups) of the example."""
    import sglang_pask
    from transformers import AutoTokenizer

    res = sglang_pask.generate(str(ROOT / MODEL), REQUEST, method="pask", policy=str(ROOT / POLICY),
                               budget=BUDGET, schedule="prefill")
    tok = AutoTokenizer.from_pretrained(str(ROOT / MODEL))
    n = len(res.prompt_ids)
    first = res.compressions[0]  # prefill end: the prompt compressed to b of its slots
    kept = {g: {int(p) for p in first.kept[layers[0]] if p < n} for g, layers in enumerate(res.groups)}
    texts = [tok.decode([i]) for i in res.prompt_ids]
    return texts, res.classes[:n], kept, res.groups


def draw(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch
    from sglang_pask.structure.classes import COLOURS, StructClass

    texts, classes, kept, groups = run_example()
    n = len(classes)
    fig = plt.figure(figsize=(13, 6.6))
    top = fig.add_axes([0.01, 0.64, 0.98, 0.34])
    top.set_xlim(0, len(STAGES) * 3)
    top.set_ylim(0, 2)
    top.axis("off")
    for i, (title, body) in enumerate(STAGES):
        x = i * 3 + 0.15
        top.add_patch(FancyBboxPatch((x, 0.15), 2.4, 1.6, boxstyle="round,pad=0.05", fc="#eef3f8", ec="#37474f"))
        top.text(x + 1.2, 1.45, title, ha="center", va="center", fontsize=12, weight="bold")
        top.text(x + 1.2, 0.75, body, ha="center", va="center", fontsize=8.5)
        if i:
            top.add_patch(FancyArrowPatch((x - 0.55, 0.95), (x - 0.05, 0.95), arrowstyle="-|>",
                                          mutation_scale=16, color="#37474f"))

    rows = [("class of each prompt token", None)]
    rows += [(f"group {g} ({'layer' if len(layers) == 1 else 'layers'} "
              f"{'-'.join(str(x) for x in sorted({layers[0], layers[-1]}))}) keeps {len(kept[g])} of {n}", g)
             for g, layers in enumerate(groups)]
    # rows from y = 0 (the last group) up to len(rows) - 1 (the classes); the token labels above them
    # reach out of the axes, under the caption
    bottom, height, span = 0.10, 0.34, len(rows) + 0.7
    ax = fig.add_axes([0.22, bottom, 0.77, height])
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(-0.6, span - 0.6)
    ax.axis("off")
    for r, (label, g) in enumerate(rows):
        y = len(rows) - 1 - r
        fig.text(0.215, bottom + height * (y + 1.0) / span, label, ha="right", va="center", fontsize=9)
        for p in range(n):
            if g is None:
                colour = COLOURS[StructClass(classes[p])]
            else:
                colour = COLOURS[StructClass(classes[p])] if p in kept[g] else "white"
            ax.add_patch(plt.Rectangle((p - 0.5, y), 1, 0.8, fc=colour, ec="#b0bec5", lw=0.3))
    labelled = [p for p in range(n) if StructClass(classes[p]).name in LABELLED]
    for p in labelled:
        ax.text(p, len(rows) - 0.1, texts[p].strip() or repr(texts[p]), rotation=60, ha="left", va="bottom",
                fontsize=7)
    present = sorted({int(c) for c in classes}, key=int)
    handles = [Patch(fc=COLOURS[StructClass(c)], ec="#78909c", label=StructClass(c).name) for c in present]
    handles.append(Patch(fc="white", ec="#78909c", label="dropped"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 7), fontsize=7.5, frameon=False)
    fig.text(0.5, 0.575, f"One request, measured: the first-run request through the reference runner with "
             f"{POLICY} at b = {BUDGET}, prefill schedule\n{n} prompt tokens; what each layer group "
             f"holds after the prefill-end compression (white: dropped)", ha="center", fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, metadata={"Software": None})
    print(f"draw_flow: wrote {out} ({n} prompt tokens; kept per group {[len(kept[g]) for g in kept]})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "flow.png")
    draw(ap.parse_args().out)
