"""Tool JSON in the rendered prompt -> tool-schema classes (see :mod:`.schema_painter`).

Each request tool is located by parsing: candidate ``{`` positions are parsed with the
span-recording parser and accepted when the parsed value equals the tool (or its ``function``),
in request order. Tools the template did not render as JSON are reported in ``ctx.notes``.
"""

from __future__ import annotations

from .base import PromptContext, RegionTagger
from .classes import StructClass as C
from .json_spans import find_objects
from .schema_painter import paint_schema, paint_tool
from .spans import RankMap


class ToolsTagger(RegionTagger):
    name = "tools"

    def paint(self, ctx: PromptContext, rmap: RankMap) -> None:
        if not ctx.tools:
            return
        found = 0
        for _i, node in find_objects(ctx.text, ctx.tools):
            paint_tool(node, rmap)
            found += 1
        if found < len(ctx.tools):
            ctx.notes.append(
                f"tools[{found}] and later: JSON not found in the rendered prompt; not tagged")


class JsonSchemaTagger(RegionTagger):
    """The ``response_format`` JSON schema, *if* the prompt contains it (the stock Qwen3
    template does not render it; a user may paste it into a message). Not found -> nothing is
    tagged as schema and a note says so; the output tracker still tags the bare JSON output."""

    name = "json_schema"

    def paint(self, ctx: PromptContext, rmap: RankMap) -> None:
        if not ctx.schema:
            return
        for _i, node in find_objects(ctx.text, [ctx.schema]):
            rmap.paint(node.start, node.end, C.SCHEMA_PUNCT)
            paint_schema(node, rmap)
            return
        ctx.notes.append("response_format schema does not appear in the rendered prompt; not tagged")
