"""The ``pask`` command.

Subcommands register themselves in ``COMMANDS`` (name -> (help, setup, run)) with the
:func:`command` decorator, from a ``commands.py`` module in their own subpackage
(``sglang_pask/<sub>/commands.py``); :func:`build_parser` imports every such module, so the
registry alone drives the CLI. Heavy imports belong inside ``run``, not at module level.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

import sglang_pask

Setup = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[str, Setup, Run]] = {}


def command(name: str, help: str, setup: Setup):
    def deco(run: Run) -> Run:
        COMMANDS[name] = (help, setup, run)
        return run

    return deco


@command("env", "print the versions and CPU-shim state this install runs with", lambda p: None)
def _env(_args: argparse.Namespace) -> int:
    import importlib.metadata as md

    from sglang_pask import cpu_shim

    print(f"sglang_pask {sglang_pask.__version__}")
    for dist in ("torch", "sglang", "xgrammar", "transformers"):
        try:
            print(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            print(f"{dist} (not installed)")
    print(f"cuda_present {cpu_shim.cuda_present()}")
    print(f"cpu_shim_active {cpu_shim.activate()}")
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
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_, setup, _run) in sorted(COMMANDS.items()):
        setup(sub.add_parser(name, help=help_))
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
    return COMMANDS[args.command][2](args)


if __name__ == "__main__":
    # Run the registry of the importable module, where commands.py modules register.
    from sglang_pask.cli import main as _main

    sys.exit(_main())
