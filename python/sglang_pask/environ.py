"""Every environment variable sglang_pask reads, and every ``--pask-*`` server flag, declared once
(SGLang's ``srt/environ.py``): typed, with a default, a category and a one-line doc.

Categories: ``user`` (a user may set it; the README or ``--help`` names it), ``internal`` (one of
our processes sets it for another: a user never does) and ``test`` (tests and benches only).

Reads go through :class:`EnvVar` (``envs.SGLANG_PASK_POLICY.get()``), at the moment they are
needed: nothing here or in a caller reads the environment at import time, so a variable set after
import (a test's ``monkeypatch.setenv``, the launcher before it starts a child) is seen. No other
module names a ``SGLANG_PASK_*`` variable in code (``test_environ.py`` scans the sources).

Standard library only: the CPU shim (loaded at interpreter start) and ``setup.py`` (before the
package is installed, by path) read it too. ``pask env --vars`` prints both tables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

USER, INTERNAL, TEST = "user", "internal", "test"
CATEGORIES = (USER, INTERNAL, TEST)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class EnvVar:
    """One variable: ``type`` is ``bool`` or ``str``; unset or empty reads as ``default``."""

    name: str
    type: type
    default: Any
    category: str
    doc: str
    #: the values a ``str`` variable may take (None: any)
    choices: Optional[tuple[str, ...]] = None

    def __post_init__(self):
        if not self.name.startswith("SGLANG_PASK_") or self.category not in CATEGORIES:
            raise ValueError(f"bad declaration {self.name} ({self.category})")

    def get(self) -> Any:
        """The value now (raises ValueError naming the variable for a value of the wrong type)."""
        raw = os.environ.get(self.name, "")
        if raw == "":
            return self.default
        if self.type is bool:
            if raw.lower() in _TRUE:
                return True
            if raw.lower() in _FALSE:
                return False
            raise ValueError(f"${self.name} must be 1 or 0, got {raw!r}")
        if self.choices is not None and raw not in self.choices:
            raise ValueError(f"${self.name} must be one of {', '.join(self.choices)}, got {raw!r}")
        return raw

    def is_set(self) -> bool:
        return os.environ.get(self.name, "") != ""

    def set(self, value: Any) -> None:
        """Set it in this process (inherited by the children it starts); None or False unsets a
        ``str`` / writes ``0`` for a ``bool``."""
        if self.type is bool:
            os.environ[self.name] = "1" if value else "0"
        elif value is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = str(value)

    def env(self, value: Any) -> dict[str, str]:
        """``{name: value}`` as text, for a child process's environment."""
        return {self.name: ("1" if value else "0") if self.type is bool else str(value)}


class _Registry:
    """The declared variables, as attributes named after them (``envs.SGLANG_PASK_OPS``)."""

    def __init__(self, *variables: EnvVar):
        self._all = {v.name: v for v in variables}
        for v in variables:
            setattr(self, v.name, v)

    def __iter__(self):
        return iter(self._all.values())

    def __contains__(self, name: str) -> bool:
        return name in self._all

    def __getitem__(self, name: str) -> EnvVar:
        return self._all[name]


envs = _Registry(
    # -- user-facing --
    EnvVar("SGLANG_PASK_POLICY", str, None, USER,
           "the PASK policy file of this server's processes; the launcher sets it from --pask-policy "
           "(set it yourself to enable PASK under sglang.Engine)"),
    EnvVar("SGLANG_PASK_TAG_LOG", str, None, USER,
           "write each request's structure tags to JSON lines in this folder (set from --pask-tag-log)"),
    EnvVar("SGLANG_PASK_OPS", str, None, USER,
           "reference: run the torch reference operators even where csrc's compiled ones are built "
           "(csrc or unset: the compiled ones when built)", choices=("csrc", "reference")),
    EnvVar("SGLANG_PASK_ALLOW_SGLANG_VERSION", bool, False, USER,
           "start on an SGLang other than the pinned one (a warning instead of a refusal)"),
    EnvVar("SGLANG_PASK_CPU_SHIM", bool, True, USER,
           "0: no CPU stand-ins for torchvision and sgl_kernel at interpreter start"),
    EnvVar("SGLANG_PASK_NO_CSRC", bool, False, USER,
           "build: skip the csrc extension (the torch reference operators run)"),
    EnvVar("SGLANG_PASK_PORTABLE", bool, False, USER,
           "build: compile csrc without -march=native (a binary that runs on other CPUs)"),
    # -- internal: one of our processes tells another --
    EnvVar("SGLANG_PASK_SERVING", str, None, INTERNAL,
           "the launcher's persistence flags, one JSON value, for the server's child processes"),
    EnvVar("SGLANG_PASK_HINT_KEY", str, None, INTERNAL,
           "this server's signing key of the structure-tags action (hex), made by the launcher's process"),
    EnvVar("SGLANG_PASK_LAUNCHER", bool, False, INTERNAL,
           "set by sglang_pask.launch_server: its child processes leave SIGINT/SIGTERM to it"),
    EnvVar("SGLANG_PASK_OLD_POLICY_WARNED", str, None, INTERNAL,
           "the old-format policy files already warned about in this process tree (os.pathsep list)"),
    EnvVar("SGLANG_PASK_BATCHED_COMPRESSION", bool, True, INTERNAL,
           "0: compress request by request, the reference path the batched one is measured against"),
    EnvVar("SGLANG_PASK_BATCHED_DECODE", bool, True, INTERNAL,
           "0: decode attention request by request, the path the batched one is profiled against"),
    # -- test-only --
    EnvVar("SGLANG_PASK_TEST_SGLANG_VERSION", str, None, TEST,
           "stands in for the installed SGLang version (the seam's version check)"),
    EnvVar("SGLANG_PASK_TEST_BOGUS_TARGET", str, None, TEST,
           "[group:]dotted.path: the seam declares one more hook on this target (its refusal test)"),
    EnvVar("SGLANG_PASK_ASSUME_CUDA", bool, False, TEST,
           "the CPU shim behaves as on a machine with an NVIDIA device"),
)


@dataclass(frozen=True)
class ServerFlag:
    """One ``--pask-*`` flag the plugin adds to SGLang's server parser (``type``: what argparse
    converts to; ``dest``: ``args.<dest>``)."""

    name: str
    type: type
    category: str
    doc: str
    metavar: str = ""
    dest: str = field(default="")

    def __post_init__(self):
        if not self.name.startswith("--pask-") or self.category not in CATEGORIES:
            raise ValueError(f"bad declaration {self.name} ({self.category})")
        object.__setattr__(self, "dest", self.dest or self.name[2:].replace("-", "_"))
        object.__setattr__(self, "metavar", self.metavar or self.name.rsplit("-", 1)[-1].upper())


#: every ``--pask-*`` server flag. The plugin adds them from here, except the four of the segment
#: rule, which :class:`sglang_pask.policy.operating_point.SegmentRule` defines for the server and the
#: CLIs alike (:data:`SEGMENT_FLAGS`; a test checks the parser holds exactly this list)
SERVER_FLAGS: tuple[ServerFlag, ...] = (
    ServerFlag("--pask-policy", str, USER, "a PASK policy file (JSON, format pask-policy/2 or /1); without it "
               "(and without --pask-method) the plugin is inert", "PATH"),
    ServerFlag("--pask-method", str, USER, "KV method the server runs (default pask, which needs --pask-policy; "
               "streaming, random and full run without one, on the model's shape)"),
    ServerFlag("--pask-budget", float, USER, "KV budget b in (0, 1] (default: the policy's)"),
    ServerFlag("--pask-schedule", str, USER, "when to compress: continuous or prefill (default: the policy's "
               "operating point)"),
    ServerFlag("--pask-interval", int, USER, "decode steps between budget checks under continuous (default: the "
               "policy's operating point)"),
    ServerFlag("--pask-segment", str, USER, "the shared segment compressed on its own: none or system (default: "
               "the policy's operating point, else none)"),
    ServerFlag("--pask-segment-budget", float, USER, "the shared segment's budget (default: the policy's, else "
               "the method's budget)"),
    ServerFlag("--pask-own-budget", float, USER, "budget of each request's own tokens after the segment "
               "(default: the policy's)"),
    ServerFlag("--pask-segment-prefill", str, USER, "what the own tokens are prefilled against: compressed or "
               "full (default: the policy's, else compressed)"),
    ServerFlag("--pask-prefill-chunk", int, USER, "a prompt longer than a KV unit pool holds whole is prefilled "
               "in chunks of N tokens, compressed at each chunk end (default: a quarter of a unit pool; 0: off, "
               "such prompts are refused)"),
    ServerFlag("--pask-scorer", str, USER, "the learned scorer file of a method that reads one (kvzap; the tiny "
               "model's: policies/pask-tiny-fc.kvzap.safetensors), checked against the served model"),
    ServerFlag("--pask-tag-log", str, USER, "(debug) with a policy, write each request's prompt and output "
               "structure tags to JSON lines in DIR", "DIR"),
    ServerFlag("--pask-kept-log", str, USER, "(debug) write the kept positions of every compression to JSON "
               "lines in DIR", "DIR"),
)
#: the segment rule's flags (defined by SegmentRule; listed above for the table)
SEGMENT_FLAGS = ("--pask-segment", "--pask-segment-budget", "--pask-own-budget", "--pask-segment-prefill")


def server_flag(name: str) -> ServerFlag:
    for f in SERVER_FLAGS:
        if f.name == name:
            return f
    raise KeyError(name)


def table() -> list[tuple[str, str, str, str, str]]:
    """``(name, type, default, category, doc)`` rows: every variable, then every server flag."""
    rows = []
    for v in envs:
        typ = v.type.__name__ if v.choices is None else "|".join(v.choices)
        rows.append((v.name, typ, "" if v.default is None else str(int(v.default) if v.type is bool else v.default),
                     v.category, v.doc))
    for f in SERVER_FLAGS:
        rows.append((f"{f.name} {f.metavar}", f.type.__name__, "", f.category, f.doc))
    return rows
