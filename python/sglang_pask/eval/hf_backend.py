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
from sglang_pask.policy.operating_point import flag_names  # light: the standard library

__all__ = ["HFBackend", "bind_runner", "runner_body", "FLAG_NAMES"]

#: operating-point field -> the ``pask eval`` flag that sets it (messages and override lines)
FLAG_NAMES = flag_names()


def bind_runner(model, method="full", *, budget: float | None = None, policy=None, schedule: str | None = None,
                segment_rule=None, chunk_rule=None, **method_options):
    """A reference :class:`~sglang_pask.hf.Runner` under ``method`` with SGLang's grammar.

    ``model``: a model directory (loaded here) or a Runner whose loaded model and tokenizer are
    reused (nothing is reloaded: binding another method costs well under a millisecond).
    ``method``: a registry name, built by ``make_method(name, budget, policy=..., schedule=...,
    **method_options)`` (``pask``: schedule and interval default to the policy's operating point),
    or a KVMethod instance (``budget``/``schedule``/options then replace its fields, which needs a
    dataclass method). ``policy``: a loaded policy or a policy file, checked against the model's
    binding. ``segment_rule``: the runner's shared-segment rule
    (:class:`~sglang_pask.policy.operating_point.SegmentRule`; None: the policy's, else none).
    ``chunk_rule``: the chunked prefill rule (:class:`~sglang_pask.methods.chunks.ChunkRule`;
    None: prompts are written whole)."""
    from sglang_pask.hf import Runner
    from sglang_pask.methods import KVMethod, make_method

    base = model if isinstance(model, Runner) else None
    model_dir = _model_dir(model)
    if isinstance(policy, (str, os.PathLike)):
        from sglang_pask.policy import load_policy

        policy = load_policy(policy, model_dir=model_dir)
    if isinstance(method, KVMethod):
        changes = {**method_options, **({"budget": budget} if budget is not None else {}),
                   **({"schedule": schedule} if schedule is not None else {}),
                   **({"policy": policy} if policy is not None else {})}
        if changes:
            import dataclasses

            if not dataclasses.is_dataclass(method):
                raise ValueError(f"cannot change {sorted(changes)} of {method!r}: build it with them instead")
            method = dataclasses.replace(method, **changes)
    else:
        opts = dict(method_options, **({"schedule": schedule} if schedule is not None else {}))
        method = make_method(str(method), budget, policy=policy, **opts)
    if base is not None:
        bound = Runner(base.model, base.tokenizer, method=method, policy=policy, grammar=base.grammar,
                       segment_rule=segment_rule, chunk_rule=chunk_rule)
        if base.constrain:  # same tokenizer and grammar: share its compile cache (no recompiling)
            bound._constraints = base.constraints
        bound.memo = base.memo  # the same model: its prompt forwards serve every method
        return bound
    return Runner(model_dir, method=method, policy=policy, grammar="sglang", segment_rule=segment_rule,
                  chunk_rule=chunk_rule)


def _model_dir(model) -> str | None:
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    path = getattr(getattr(model, "model", None), "name_or_path", None)
    return path if path and os.path.isdir(path) else None


def runner_body(request: Request) -> dict:
    """The chat request body the backend hands the runner for ``request``."""
    return {"messages": list(request.messages), "tools": list(request.tools), "tool_choice": request.tool_choice,
            "chat_template_kwargs": {"enable_thinking": request.enable_thinking}}  # as the openai backend


class HFBackend(Backend):
    """``model``: a model directory or a Runner to reuse (:func:`bind_runner`, which also takes
    ``method``, ``budget``, ``policy``, ``schedule``, ``method_options``, ``segment_rule`` and
    ``chunk_rule``).

    The operating point (schedule, interval, segment rule) is resolved once
    (:func:`~sglang_pask.policy.operating_point.resolve`): what is given here (``overrides``, or
    else the explicit ``schedule`` / ``method_options["interval"]`` / ``segment_rule``) over the
    policy's recorded operating point (method ``pask``), over the defaults; the run record says
    where each field came from."""

    name = "hf"
    max_workers = 1

    def __init__(self, model, method="full", budget: float | None = None, policy=None, *,
                 schedule: str | None = None, method_options: dict | None = None, segment_rule=None,
                 overrides: dict | None = None, chunk_rule=None):
        from sglang_pask.policy.operating_point import resolve

        opts = dict(method_options or {})
        if overrides is None:
            overrides = {**({"schedule": schedule} if schedule is not None else {}),
                         **({"interval": opts["interval"]} if "interval" in opts else {}),
                         **(segment_rule.record() if segment_rule is not None else {})}
        if isinstance(policy, (str, os.PathLike)):
            from sglang_pask.policy import load_policy

            self.policy_file = os.fspath(policy)
            policy = load_policy(policy, model_dir=_model_dir(model))
        else:
            self.policy_file = None
        if hasattr(method, "select"):  # an instance: its own schedule and interval are explicit
            overrides = {"schedule": method.schedule, "interval": method.interval, **overrides}
        is_pask = getattr(method, "name", method) == "pask"
        self.resolved = resolve(policy.point if is_pask and policy is not None else None, overrides,
                                FLAG_NAMES)
        point = self.resolved.point
        opts.update(schedule=point.schedule, interval=point.interval)  # the method runs at the resolved point
        self.runner = bind_runner(model, method, budget=budget, policy=policy, segment_rule=point.segment,
                                  chunk_rule=chunk_rule, **opts)
        self.model_dir = _model_dir(model)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "HFBackend":
        from sglang_pask.policy.operating_point import SegmentRule

        model = getattr(args, "model", None)
        if not model or not os.path.isfile(os.path.join(model, "config.json")):
            raise ValueError(f"--backend hf needs --model DIR, a local HF model folder; got {model!r}")
        overrides = {**{k: getattr(args, k) for k in ("schedule", "interval") if getattr(args, k, None) is not None},
                     **SegmentRule.overrides(args)}
        return cls(args.model, getattr(args, "method", None) or "full", getattr(args, "budget", None),
                   getattr(args, "policy", None), method_options=getattr(args, "method_options", None),
                   overrides=overrides)

    def describe(self) -> dict:
        """The run-record fields of :mod:`sglang_pask.eval.records` this backend decides."""
        from sglang_pask.eval.records import method_options, method_record, model_record

        m = self.runner.method
        rec = method_record(m)
        rule = self.runner.segment_rule
        seg = {k: (v if rule.active else None) for k, v in rule.record().items() if k != "segment"}
        return {"backend": self.name, "model": model_record(self.model_dir) if self.model_dir else None,
                "method": rec, "method_options": method_options(m), "budget": float(m.budget),
                "schedule": rec.get("schedule", getattr(m, "schedule", "continuous")),
                "policy": rec.get("policy"), "policy_file": self.policy_file, "segment": rule.segment, **seg,
                "operating_point": self.resolved.record()}

    def generate(self, request: Request) -> Generation:
        body = runner_body(request)
        t0 = time.perf_counter()
        try:
            res = self.runner.generate(body, request.max_tokens, temperature=request.temperature)
        except ValueError as e:  # includes ToolSchemaError and pydantic's ValidationError
            raise EntryError("rejected", str(e)[:500]) from None
        return Generation(res.text, res.tool_calls, {
            "finish_reason": res.finish_reason, "prompt_tokens": len(res.prompt_ids),
            "completion_tokens": res.tokens, "kv_bytes": res.kv_bytes, "latency_s": time.perf_counter() - t0,
            # per layer, the prompt's positions held at the end (a per-KV-head method: their union)
            "held_prompt": [int((r < len(res.prompt_ids)).sum()) for r in res.retained],
        })
