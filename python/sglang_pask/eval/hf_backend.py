"""Backend ``hf``: the in-process reference runner (:class:`sglang_pask.hf.Runner`) under a KV method.

Same prompts as the server: the runner renders the request with
:func:`sglang_pask.rendering.render_chat`, the server's own rendering (SGLang's view of the
request: its ``ChatCompletionRequest`` model_dump of messages and tools), so both backends see the
same token ids, and constrained by the same grammar: the runner's ``grammar="sglang"`` builds it with SGLang's
own pipeline (qwen tool parser structural tag; JSON schema without free whitespace, as
``make serve`` passes ``--constrained-json-disable-any-whitespace``). Greedy by default. One
generation at a time (the runner is not thread-safe). A request the runner rejects (bad schema,
prompt too long) is that entry's failure.
"""

from __future__ import annotations

import argparse
import os
import time

from sglang_pask.eval.base import Backend, EntryError, Generation, Request

__all__ = ["HFBackend"]


class HFBackend(Backend):
    name = "hf"
    max_workers = 1

    def __init__(self, model: str, method: str = "full", budget: float | None = None, policy: str | None = None):
        from sglang_pask.hf import Runner

        self.model, self.method, self.budget, self.policy = model, method, budget, policy
        self.runner = Runner(model, method=method, budget=budget, policy=policy, grammar="sglang")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "HFBackend":
        model = getattr(args, "model", None)
        if not model or not os.path.isfile(os.path.join(model, "config.json")):
            raise ValueError(f"--backend hf needs --model DIR, a local HF model folder; got {model!r}")
        return cls(args.model, getattr(args, "method", None) or "full", getattr(args, "budget", None),
                   getattr(args, "policy", None))

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model, "method": self.method, "budget": self.budget,
                "policy": self.policy}

    def generate(self, request: Request) -> Generation:
        body = {"messages": list(request.messages), "tools": list(request.tools), "tool_choice": request.tool_choice,
                "chat_template_kwargs": {"enable_thinking": request.enable_thinking}}  # as the openai backend
        t0 = time.perf_counter()
        try:
            res = self.runner.generate(body, request.max_tokens, temperature=request.temperature)
        except ValueError as e:  # includes ToolSchemaError and pydantic's ValidationError
            raise EntryError("rejected", str(e)[:500]) from None
        return Generation(res.text, res.tool_calls, {
            "finish_reason": res.finish_reason, "prompt_tokens": len(res.prompt_ids),
            "completion_tokens": res.tokens, "kv_bytes": res.kv_bytes, "latency_s": time.perf_counter() - t0,
        })
