"""``pask generate``: run one chat request through the reference runner with a KV method."""

from __future__ import annotations

import argparse

from sglang_pask.cli import command


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory (HF format)")
    p.add_argument("--request", required=True, help="an OpenAI chat request body (JSON file)")
    from sglang_pask.methods import METHODS, SCHEDULES  # light: the registry (numpy only), no model code

    p.add_argument("--method", default="full", choices=sorted(METHODS), help="KV method")
    p.add_argument("--budget", type=float, default=None,
                   help="KV budget in (0, 1] (default: full 1.0, pask the policy's)")
    p.add_argument("--policy", default=None, help="policy file (methods that use one)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="default: the request's max_tokens / max_completion_tokens, else 128")
    p.add_argument("--interval", "--compress-every", dest="interval", type=int, default=None,
                   help="decode steps between budget checks under continuous (default: the policy's "
                        "operating point for pask, else 1); compression also runs at prefill end, "
                        "always only when over budget")
    p.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="continuous: compress whenever over budget (b of all tokens); prefill: once at "
                        "prefill end, outputs kept (b of the prompt). Default: the policy's operating "
                        "point for pask, else continuous")
    from sglang_pask.policy.operating_point import SegmentRule  # light: the standard library

    SegmentRule.add_flags(p)
    p.add_argument("--method-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="a field of the method, e.g. normalize=true (h2o), per_head=true (snapkv); repeatable")
    p.add_argument("--no-constrain", action="store_true", help="ignore tools/response_format grammars")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--show-kept", action="store_true",
                   help="show, per layer group, which tokens survived (the `pask tag` views)")
    p.add_argument("--format", choices=("text", "json", "html"), default="text")


@command("generate", "generate for a chat request with the reference runner under a KV method", _setup)
def run(args: argparse.Namespace) -> int:
    import json
    import sys

    try:
        with open(args.request, encoding="utf-8") as f:
            request = json.load(f)
        if not isinstance(request, dict):
            raise ValueError("the request must be a JSON object (an OpenAI chat request body)")
    except (OSError, ValueError) as e:
        print(f"pask generate: cannot read request {args.request}: {e}", file=sys.stderr)
        return 2
    import torch

    from sglang_pask.hf.runner import Runner
    from sglang_pask.methods.options import parse_option
    from sglang_pask.policy import PolicyError, load_policy
    from sglang_pask.policy.operating_point import SegmentRule, flag_names, resolve
    from sglang_pask.structure import ToolSchemaError

    try:
        options = dict(parse_option(o) for o in args.method_opt)
    except ValueError as e:
        print(f"pask generate: --method-opt: {e}", file=sys.stderr)
        return 2
    max_new = args.max_new_tokens or request.get("max_completion_tokens") or request.get("max_tokens") or 128
    try:
        policy = load_policy(args.policy, model_dir=args.model) if args.policy else None
        given = {k: options.pop(k) for k in ("schedule", "interval") if k in options}
        given.update({k: getattr(args, k) for k in ("schedule", "interval") if getattr(args, k) is not None})
        names = flag_names()
        resolved = resolve(policy.point if policy is not None and args.method == "pask" else None,
                           {**given, **SegmentRule.overrides(args)}, names)
        if line := resolved.override_line(names):
            print(f"pask generate: {line}", file=sys.stderr)
        point = resolved.point
        options.update(schedule=point.schedule, interval=point.interval)
        runner = Runner(args.model, method=args.method, budget=args.budget, policy=policy,
                        constrain=not args.no_constrain, dtype=getattr(torch, args.dtype),
                        method_options=options, segment_rule=point.segment)
        res = runner.generate(request, max_new_tokens=int(max_new))
    except (ToolSchemaError, PolicyError, ValueError, KeyError, TypeError) as e:
        print(f"pask generate: {e}", file=sys.stderr)
        return 2
    rows = _kept_rows(runner, request, res) if args.show_kept else None
    if args.format == "json":
        obj = dict(res.to_json(), prompt_ids=list(res.prompt_ids))  # the prompt as rendered (render_chat)
        if rows is not None:
            obj["kept_tokens"] = {g: [r for r in rs if r["i"] >= 0] for g, rs in rows.items()}
        print(json.dumps(obj, ensure_ascii=False))
        return 0
    from sglang_pask.structure.render import as_html, as_text

    if args.format == "html":
        sys.stdout.write(as_html(sum(rows.values(), []) if rows else [], title="pask generate"))
        return 0
    print(res.text)
    for call in res.tool_calls or []:
        print(f"tool_call: {json.dumps(call['function'], ensure_ascii=False)}")
    held = sum(len(r) for r in res.retained)
    total = runner.num_layers * (len(res.prompt_ids) + max(res.tokens - 1, 0))
    print(f"-- {res.tokens} tokens, finish {res.finish_reason}, {runner.method!r}: "
          f"{held} of {total} token-layer slots held", file=sys.stderr)
    if rows:
        sys.stdout.write(as_text(sum(rows.values(), [])))
    return 0



def _kept_rows(runner, request: dict, res) -> dict[str, list[dict]]:
    """Per group: the `pask tag` rows of the tokens its first layer still holds, a ``⋯`` row
    (``i = -1``) standing for each run of dropped tokens."""
    from sglang_pask.rendering import render_chat
    from sglang_pask.structure.render import rows as tag_rows
    from sglang_pask.structure.token_bytes import tag_output_ids

    tags = render_chat(runner.tokenizer, request, tagger=runner.tagger)  # the runner's own prompt
    P = len(tags.token_ids)
    fed = res.token_ids[:max(res.tokens - 1, 0)]
    text, offsets = tag_output_ids(runner.tokenizer, fed, tags.tracker())
    all_rows = (tag_rows("prompt", tags.text, tags.offsets, res.classes[:P], ids=tags.token_ids)
                + tag_rows("output", text, offsets, res.classes[P:P + len(fed)], first=P, ids=fed))
    out = {}
    for g, layers in enumerate(runner.groups):
        keep = set(res.retained[layers[0]].tolist())
        span = f"layers {layers[0]}-{layers[-1]}" if len(layers) > 1 else f"layer {layers[0]}"
        head = f"group {g} ({span}): {len(keep)} of {len(all_rows)} kept"
        rs, gap = [], False
        for r in all_rows:
            part = f"{head}, {r['part']}"
            if r["i"] in keep:
                rs.append(dict(r, part=part))
                gap = False
            elif not gap:
                rs.append({"i": -1, "id": None, "token": "⋯", "start": -1, "end": -1, "class": "OTHER",
                           "part": part})
                gap = True
        out[str(g)] = rs
    return out
