"""``pask tag``: show the structural class of every token of a chat request (and an output)."""

from __future__ import annotations

import argparse

from sglang_pask.cli import command


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model / tokenizer directory (HF format)")
    p.add_argument("--request", required=True, help="an OpenAI chat request body (JSON file)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--output", default=None, help="generated text to tag with the output tracker "
                     "(tokenized here; a model may have generated other token boundaries)")
    out.add_argument("--output-ids", default=None, metavar="JSON",
                     help="generated token ids as the engine produced them, a JSON list (e.g. the "
                          "token_ids of a tag-log output record); tagged exactly as the server does")
    p.add_argument("--format", choices=("json", "text", "html"), default="text")
    from sglang_pask.structure import TRACKERS  # light: the registry, no model code

    p.add_argument("--tracker", default=None, choices=sorted(TRACKERS),
                   help="output tracker (default: chosen from the request)")


@command("tag", "tag every token of a chat request (and an output) with its structural class", _setup)
def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from transformers import AutoTokenizer

    from sglang_pask.rendering import render_chat
    from sglang_pask.structure import ToolSchemaError
    from sglang_pask.structure.render import as_html, as_json, as_text, rows
    from sglang_pask.structure.token_bytes import tag_output, tag_output_ids

    try:
        with open(args.request, encoding="utf-8") as f:
            request = json.load(f)
    except (OSError, ValueError) as e:
        print(f"pask tag: cannot read request {args.request}: {e}", file=sys.stderr)
        return 2
    if not isinstance(request, dict):
        print("pask tag: the request must be a JSON object (an OpenAI chat request body)",
              file=sys.stderr)
        return 2
    tok = AutoTokenizer.from_pretrained(args.model)
    try:
        rendered = render_chat(tok, request)  # exactly as the server renders it
    except (ToolSchemaError, ValueError) as e:
        print(f"pask tag: invalid request: {e}", file=sys.stderr)
        return 2
    tags, request = rendered.tags, rendered.view
    all_rows = rows("prompt", tags.text, tags.offsets, tags.classes, ids=tags.token_ids)
    for note in tags.notes:
        print(f"pask tag: note: {note}", file=sys.stderr)
    if args.output is not None or args.output_ids is not None:
        tracker = rendered.tracker(args.tracker)
        if args.output_ids is not None:
            try:
                ids = json.loads(args.output_ids)
                assert isinstance(ids, list) and all(isinstance(i, int) and i >= 0 for i in ids)
            except (ValueError, AssertionError):
                print("pask tag: --output-ids must be a JSON list of token ids", file=sys.stderr)
                return 2
            text, offsets = tag_output_ids(tok, ids, tracker)
        else:
            text = args.output
            ids, offsets = tag_output(tok, text, tracker)
        all_rows += rows("output", text, offsets, tracker.classes, first=len(all_rows), ids=ids)
    view = {"json": as_json, "text": as_text, "html": as_html}[args.format]
    sys.stdout.write(view(all_rows) + ("\n" if args.format == "json" else ""))
    return 0
