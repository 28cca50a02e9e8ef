"""Views of tagged tokens for ``pask tag``: JSON lines, a coloured terminal view, an HTML page.

A *row* is ``{"i", "id", "token", "start", "end", "class", "part"}``: ``i`` counts tokens over
the whole request (prompt then output), ``id`` is the token id; ``start``/``end`` are char
offsets into the rendered prompt (``part == "prompt"``) or into the output text
(``part == "output"``).
"""

from __future__ import annotations

import html
import json
from typing import Iterable, Sequence

from .classes import COLOURS, StructClass


def rows(part: str, text: str, offsets: Sequence[tuple[int, int]], classes: Iterable[int],
         first: int = 0, ids: Sequence[int] | None = None) -> list[dict]:
    """One row per token; ``ids``: the token ids (one per offset), else ``"id"`` is None."""
    if ids is not None and len(ids) != len(offsets):
        raise ValueError(f"{len(ids)} token ids for {len(offsets)} offsets")
    return [
        {"i": first + k, "id": None if ids is None else int(ids[k]), "token": text[s:e], "start": s,
         "end": e, "class": StructClass(c).name, "part": part}
        for k, ((s, e), c) in enumerate(zip(offsets, classes))
    ]


def as_json(all_rows: list[dict]) -> str:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in all_rows)


def _rgb(hex_: str) -> tuple[int, int, int]:
    return int(hex_[1:3], 16), int(hex_[3:5], 16), int(hex_[5:7], 16)


def as_text(all_rows: list[dict]) -> str:
    """Each token on a 24-bit background of its class colour, then a legend."""
    out, part = [], None
    for r in all_rows:
        if r["part"] != part:
            part = r["part"]
            out.append(f"\n\x1b[1m== {part} ==\x1b[0m\n")
        red, green, blue = _rgb(COLOURS[StructClass[r["class"]]])
        fg = "30" if red * 0.3 + green * 0.59 + blue * 0.11 > 140 else "97"
        out.append(f"\x1b[48;2;{red};{green};{blue}m\x1b[{fg}m{r['token']}\x1b[0m")
    used = sorted({StructClass[r["class"]] for r in all_rows})
    legend = " ".join(
        f"\x1b[48;2;{';'.join(map(str, _rgb(COLOURS[c])))}m  \x1b[0m {c.name}" for c in used)
    return "".join(out) + "\n\nlegend: " + legend + "\n"


def as_html(all_rows: list[dict], title: str = "pask tag") -> str:
    """A standalone page: tokens coloured by class (hover shows index and class), a legend."""
    used = sorted({StructClass[r["class"]] for r in all_rows})
    css = "\n".join(f".c{int(c)} {{ background: {COLOURS[c]}; }}" for c in used)
    body, part = [], None
    for r in all_rows:
        if r["part"] != part:
            if part is not None:
                body.append("</pre>")
            part = r["part"]
            body.append(f"<h2>{part}</h2><pre>")
        c = StructClass[r["class"]]
        body.append(f'<span class="t c{int(c)}" title="{r["i"]}: {c.name}">'
                    f"{html.escape(r['token'])}</span>")
    body.append("</pre>")
    legend = "".join(f'<span class="t c{int(c)}">{c.name}</span> ' for c in used)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>body{{font-family:sans-serif}} pre{{white-space:pre-wrap;line-height:1.6}}"
            f" .t{{border-radius:2px;margin:0 1px;padding:0 1px}}\n{css}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>legend: {legend}</p>{''.join(body)}</body></html>\n")
