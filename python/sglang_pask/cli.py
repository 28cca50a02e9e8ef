"""The ``pask`` command.

Subcommands register themselves in ``COMMANDS`` (name -> (help, setup, run)) with the
:func:`command` decorator, from a ``commands.py`` module in their own subpackage
(``sglang_pask/<sub>/commands.py``); :func:`build_parser` imports every such module, so the
registry alone drives the CLI. Heavy imports belong inside ``run``, not at module level.

A :func:`group` (``pask policy``) takes subcommands named ``"<group> <sub>"``; any package may add
one, so a command sits in the package it needs: ``pask policy ablate`` needs calibrate and
registers from ``calibrate/commands.py``, above policy. The commands of top-level modules live
here: ``env``, and ``tag`` (the view of :func:`sglang_pask.rendering.render_chat`, which sits above
``structure/``: a ``tag`` in ``structure/commands.py`` would import upward).

Layering (``test/unit/core/test_layering.py``): this module imports only ``sglang_pask``, ``paths``,
``cpu_shim``, ``structure`` and ``rendering``; the ``commands.py`` modules import it, and it finds
them by name at run time, not by import.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

import sglang_pask

Setup = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[str, Setup, Run]] = {}
#: a command that only holds subcommands (name -> help); its subcommands are ``COMMANDS["<name> <sub>"]``
GROUPS: dict[str, str] = {}


def command(name: str, help: str, setup: Setup):
    """Register ``run`` as ``pask <name>``; ``name`` ``"<group> <sub>"`` makes it a subcommand of a
    :func:`group`."""

    def deco(run: Run) -> Run:
        COMMANDS[name] = (help, setup, run)
        return run

    return deco


def group(name: str, help: str) -> None:
    """Register ``pask <name>`` as a command whose subcommands register as ``"<name> <sub>"``."""
    GROUPS[name] = help


def _env_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vars", action="store_true",
                   help="print every SGLANG_PASK_* environment variable and --pask-* server flag instead: "
                        "name, type, default, category (user, internal, test), doc")


@command("env", "print the versions and CPU-shim state this install runs with (--vars: the variables and flags)",
         _env_setup)
def _env(args: argparse.Namespace) -> int:
    import importlib.metadata as md

    from sglang_pask import cpu_shim

    if args.vars:
        from sglang_pask.environ import table

        rows = [("NAME", "TYPE", "DEFAULT", "CATEGORY", "DOC"), *table()]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4])
        return 0

    print(f"sglang_pask {sglang_pask.__version__}")
    for dist in ("torch", "sglang", "xgrammar", "transformers"):
        try:
            print(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            print(f"{dist} (not installed)")
    print(f"cuda_present {cpu_shim.cuda_present()}")
    print(f"cpu_shim_active {cpu_shim.activate()}")
    return 0


def _tag_setup(p: argparse.ArgumentParser) -> None:
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


@command("tag", "tag every token of a chat request (and an output) with its structural class", _tag_setup)
def _tag(args: argparse.Namespace) -> int:
    import json

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


def _discover() -> None:
    import importlib
    import importlib.util
    import pkgutil

    for info in pkgutil.iter_modules(sglang_pask.__path__):
        if info.ispkg and importlib.util.find_spec(f"sglang_pask.{info.name}.commands"):
            importlib.import_module(f"sglang_pask.{info.name}.commands")


def build_parser() -> argparse.ArgumentParser:
    _discover()
    parser = argparse.ArgumentParser(prog="pask", description=sglang_pask.__doc__)
    parser.add_argument("--version", action="version", version=sglang_pask.__version__)
    subs = {"": parser.add_subparsers(dest="command", required=True)}  # group -> its subparsers
    for name in sorted(GROUPS.keys() | COMMANDS.keys()):  # a group sorts before its subcommands
        parent, _, leaf = name.rpartition(" ")
        if parent not in subs:
            raise RuntimeError(f"pask {name}: no command group {parent!r} is registered")
        if name in GROUPS:
            p = subs[parent].add_parser(leaf, help=GROUPS[name])
            subs[name] = p.add_subparsers(dest=f"{name}_command", required=True)
        else:
            help_, setup, _run = COMMANDS[name]
            setup(subs[parent].add_parser(leaf, help=help_))
    return parser


def _path_error(args: argparse.Namespace) -> str | None:
    """The first bad ``--model`` / ``--policy`` / ``--request`` path (see :mod:`sglang_pask.paths`).
    ``pask eval --backend openai --model`` names a served model, not a folder."""
    from sglang_pask.paths import file_error, model_dir_error

    served = getattr(args, "backend", None) == "openai"  # --model / --policy are labels there
    model = getattr(args, "model", None)
    if model and not served and (err := model_dir_error(model)):
        return err
    for flag in ("request",) if served else ("policy", "request"):
        value = getattr(args, flag, None)
        if isinstance(value, str) and (err := file_error(value, f"--{flag}")):
            return err
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if err := _path_error(args):
        print(f"pask {args.command}: error: {err}", file=sys.stderr)
        return 2
    name = args.command
    while name in GROUPS:
        name = f"{name} {getattr(args, f'{name}_command')}"
    return COMMANDS[name][2](args)


if __name__ == "__main__":
    # Run the registry of the importable module, where commands.py modules register.
    from sglang_pask.cli import main as _main

    sys.exit(_main())
