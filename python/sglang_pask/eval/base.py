"""The backend contract: one prompt in, one raw generation out. Scoring is not a backend's job.

Every backend receives the same :class:`Request` (the entry's messages, the OpenAI tools from
bfcl_tools, the decoding settings) and returns a :class:`Generation` holding the raw output: the
text and, when the backend has a tool-call parser (an OpenAI-compatible server), its ``tool_calls``.
The harness decodes and scores both kinds the same way (decode.decode_response, checker.check),
so backends differ only in how they produce text.

Errors: :class:`EntryError` for a failure confined to one request (the server rejected it, e.g.
the prompt is too long) - the entry is recorded as invalid with the error and the run goes on;
:class:`BackendError` for a backend that can no longer serve (server gone, timeout) - the
harness stops submitting, keeps every finished entry on disk and reports the error.
"""

from __future__ import annotations

import abc
import argparse
from dataclasses import dataclass, field

__all__ = ["Request", "Generation", "Backend", "EntryError", "BackendError", "BackendUnavailable"]


class EntryError(Exception):
    """This one request failed; ``kind`` becomes the result's error type (``backend:<kind>``)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class BackendError(RuntimeError):
    """The backend cannot serve any more requests; the run stops cleanly."""


class BackendUnavailable(RuntimeError):
    """The backend cannot be constructed here (not implemented yet, a dependency is missing)."""


@dataclass(frozen=True)
class Request:
    entry_id: str
    messages: list  # [{"role", "content"}], the entry's single turn as given (system + user)
    tools: list  # OpenAI tools: [{"type": "function", "function": {name, description, parameters}}]
    max_tokens: int
    temperature: float = 0.0
    tool_choice: str = "auto"  # "auto" | "required"
    enable_thinking: bool = False  # passed to Qwen3-style chat templates


@dataclass
class Generation:
    text: str | None  # generated text (content); may hold <tool_call> blocks
    tool_calls: list | None = None  # OpenAI-style [{"function": {"name", "arguments": str}}] or None
    meta: dict = field(default_factory=dict)  # finish_reason, token counts, latency_s, ...


class Backend(abc.ABC):
    """A generator of raw outputs. Implementations must be safe to call from several threads
    (the harness runs ``--workers`` requests at once) or set ``max_workers = 1``."""

    name: str = ""
    max_workers: int | None = None  # None: any number of workers

    @classmethod
    @abc.abstractmethod
    def from_args(cls, args: argparse.Namespace) -> "Backend":
        """Build from ``pask eval`` arguments; raise BackendUnavailable/ValueError with a clear message."""

    @abc.abstractmethod
    def generate(self, request: Request) -> Generation:
        """Produce the raw output for one request. Raises EntryError or BackendError only."""

    def describe(self) -> dict:
        """Settings that identify this backend's results (stored in summary.json's config)."""
        return {"backend": self.name}

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources; called once by the harness when the run ends (also on errors)."""
