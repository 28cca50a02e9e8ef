"""Backend for any OpenAI-compatible server (e.g. ``make serve``): chat completions with tools.

The server applies its chat template and its tool-call parser; the response's ``tool_calls`` and
text content both come back raw and are decoded by the harness. Connection failures and timeouts
(after the client's retries) are fatal (BackendError); an HTTP error status for one request is
that entry's failure (EntryError ``http_<status>``).

What the run records about the server comes from the server (``GET <root>/server_info``): the
model directory it serves (recorded like the hf backend's, so ``pask report`` can put both in one
table when ``--group-by backend``), and, on a server started with a policy, the KV method record
it runs (``internal_states[0]["pask"]["method"]``). ``--method`` / ``--budget`` / ``--schedule``
are labels for servers that report nothing (a stock server: Full KV); a label that contradicts
what the server reports is an error, not a silently mislabelled row.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.request

from sglang_pask.eval.base import Backend, BackendError, EntryError, Generation, Request

__all__ = ["OpenAIBackend"]


class OpenAIBackend(Backend):
    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str = "EMPTY",
        timeout_s: float = 600.0,
        max_retries: int = 2,
        labels: dict | None = None,
    ):
        import openai

        self._openai = openai
        self.base_url = base_url
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries)
        self.timeout_s = timeout_s
        self.labels = {k: v for k, v in (labels or {}).items() if v is not None}
        self.model = model or self._first_model()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "OpenAIBackend":
        if not getattr(args, "base_url", None):
            raise ValueError("--backend openai needs --base-url (e.g. http://127.0.0.1:30000/v1)")
        return cls(
            args.base_url,
            getattr(args, "model", None),
            getattr(args, "api_key", None) or "EMPTY",
            getattr(args, "request_timeout", 600.0),
            labels={k: getattr(args, k, None) for k in ("method", "budget", "schedule")},
        )

    def _first_model(self) -> str:
        try:
            models = self.client.models.list().data
        except (self._openai.APIConnectionError, self._openai.APITimeoutError) as e:
            raise BackendError(f"cannot reach the server at {self.base_url}: {e}") from None
        except self._openai.APIStatusError as e:
            hint = ""
            if e.status_code == 404 and not self.base_url.rstrip("/").endswith("/v1"):
                hint = f" (OpenAI-compatible servers answer under /v1: try --base-url {self.base_url.rstrip('/')}/v1)"
            raise BackendError(f"{self.base_url}/models answered HTTP {e.status_code}{hint}") from None
        if not models:
            raise BackendError(f"{self.base_url}/models lists no model; pass --model")
        return models[0].id

    def server_info(self) -> dict:
        """``GET <root>/server_info`` (root: the base URL without ``/v1``); {} when unavailable."""
        root = self.base_url.rstrip("/")
        root = root[: -len("/v1")] if root.endswith("/v1") else root
        try:
            with urllib.request.urlopen(f"{root}/server_info", timeout=30) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def describe(self) -> dict:
        from sglang_pask.eval.records import model_record, record_options
        from sglang_pask.methods import METHODS

        out = {"backend": self.name, "base_url": self.base_url, "model": self.model, "served_model": self.model}
        info = self.server_info()
        path = info.get("model_path")
        if isinstance(path, str) and os.path.isdir(path):
            out["model"] = model_record(path)
        states = info.get("internal_states") or [{}]
        pask = (states[0].get("pask") or {}) if isinstance(states[0], dict) else {}
        rec = pask.get("method")
        if not rec:
            return out
        out.update(segment=pask.get("segment") or "none", radix_cache=bool(pask.get("radix_cache")),
                   segment_budget=pask.get("segment_budget"), own_budget=pask.get("own_budget"),
                   segment_prefill=pask.get("segment_prefill"), operating_point=pask.get("operating_point"))
        served = {"method": rec["name"], "budget": float(rec["budget"]), "schedule": rec.get("schedule")}
        for k, label in self.labels.items():
            if label != served[k]:
                raise ValueError(f"--{k} {label} contradicts the server at {self.base_url}, which runs "
                                 f"{served['method']} at budget {served['budget']:g}, schedule {served['schedule']} "
                                 f"(drop the label or restart the server with --pask-{k})")
        cls = METHODS.get(rec["name"])
        out.update(served, method=rec, method_options=record_options(cls, rec) if cls else {},
                   policy=rec.get("policy"))
        return out

    def generate(self, request: Request) -> Generation:
        o = self._openai
        t0 = time.perf_counter()
        try:
            resp = self.client.chat.completions.create(
                model=self.model,
                messages=list(request.messages),
                tools=list(request.tools),
                tool_choice=request.tool_choice,
                temperature=request.temperature,
                max_tokens=request.max_tokens,
                extra_body={"chat_template_kwargs": {"enable_thinking": request.enable_thinking}},
            )
        except (o.APIConnectionError, o.APITimeoutError) as e:
            raise BackendError(f"server at {self.base_url} stopped answering ({type(e).__name__}: {e})") from None
        except o.APIStatusError as e:
            raise EntryError(f"http_{e.status_code}", str(e)[:500]) from None
        choice = resp.choices[0]
        msg = choice.message
        tool_calls = [tc.model_dump() for tc in (msg.tool_calls or [])] or None
        usage = resp.usage.model_dump() if resp.usage else {}
        meta = {
            "finish_reason": choice.finish_reason,
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "latency_s": round(time.perf_counter() - t0, 4),
        }
        return Generation(text=msg.content, tool_calls=tool_calls, meta=meta)
