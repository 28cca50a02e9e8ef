"""Reference-runner decode cost and KV memory: ``full`` vs ``pask`` at budgets 0.5 / 0.33 / 0.2.

    .venv/bin/python bench/bench_runner.py [--context 4096] [--new 32] [--compress-every 8]

Model: a random-weight Qwen3 built in memory (default 4 layers, hidden 256, 8 heads, 8 KV heads,
head_dim 64, MLP 512, vocab 4096 = the tiny tokenizer's; 4.72M parameters, fp32). At a 4k context
its K/V (63 MiB, read every decode step) outweigh its weights (19 MiB), so attention dominates
decode and a smaller cache should show in ms/token. The prompt is a tools request of about
``--context`` tokens (the tiny tokenizer, many tool schemas) so the prompt tagger and the prior
policy see real structure. All configurations run in this process, interleaved for ``--rounds``
rounds (the fastest of each is kept); decode runs exactly ``--new`` tokens (stop tokens ignored,
no grammar). ms/token includes the compression checks and selections (``--compress-every``);
KV bytes are the K/V tensors held at the end. One torch thread by default (a shared box).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tools(n: int) -> list[dict]:
    return [{"type": "function", "function": {
        "name": f"service_{i}_lookup",
        "description": f"Look up entry {i} in the catalogue and return its fields.",
        "parameters": {"type": "object", "properties": {
            "entry_id": {"type": "integer", "description": "Identifier of the entry."},
            "unit": {"type": "string", "enum": ["metric", "imperial"]},
            "verbose": {"type": "boolean"}},
            "required": ["entry_id"]}}} for i in range(n)]


def build_request(tok, context: int) -> dict:
    """A tools request whose rendered prompt is as close to ``context`` tokens as tool counts allow."""
    from sglang_pask.structure import make_prompt_tagger

    tagger = make_prompt_tagger(tok)
    msgs = [{"role": "user", "content": "Look up entry 17 in metric units, verbose please."}]
    lo, hi = 1, 200
    while lo < hi:  # the largest tool count that fits
        mid = (lo + hi + 1) // 2
        if len(tagger.tag({"messages": msgs, "tools": _tools(mid)}).token_ids) <= context:
            lo = mid
        else:
            hi = mid - 1
    return {"messages": msgs, "tools": _tools(lo), "tool_choice": "auto"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-random-qwen3"))
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--compress-every", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--budgets", default="0.5,0.33,0.2")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared box)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the fastest is reported")
    args = ap.parse_args()

    import torch
    from sglang_pask.hf.runner import Runner
    from sglang_pask.hf.testing import tiny_qwen3
    from sglang_pask.methods import make_method
    from sglang_pask.policy import ModelBinding, prior_policy
    from transformers import AutoTokenizer

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    tok.model_max_length = 1 << 30  # long prompts are the point here
    model = tiny_qwen3(len(tok), layers=args.layers, hidden=args.hidden, heads=args.heads,
                       kv_heads=args.kv_heads, head_dim=args.head_dim, seed=0,
                       max_position_embeddings=max(8192, args.context + args.new + 8))
    n_params = sum(p.numel() for p in model.parameters())
    req = build_request(tok, args.context)
    binding = ModelBinding.from_config(model.config.to_dict())
    groups = min(args.layers, 2)
    print(f"model: random Qwen3, {args.layers} layers, hidden {args.hidden}, {args.heads} heads, "
          f"{args.kv_heads} kv heads, head_dim {args.head_dim}, vocab {len(tok)}, "
          f"{n_params / 1e6:.2f}M params, fp32, torch threads {torch.get_num_threads()}")

    configs = [("full", 1.0)] + [("pask", float(b)) for b in args.budgets.split(",")]
    runners = []
    for name, budget in configs:
        policy = prior_policy(binding, groups=groups, budget=budget) if name == "pask" else None
        runners.append(Runner(model, tok, method=make_method(name, budget, policy=policy, interval=args.compress_every),
                              constrain=False))
    runners[0].generate(req, 2)  # warm-up
    best: dict[int, dict] = {}
    for _ in range(args.rounds):
        for k, ((name, budget), runner) in enumerate(zip(configs, runners)):
            res = runner.generate(req, args.new, ignore_stop=True)
            tm = res.timings
            row = {"method": name, "budget": budget, "prompt_tokens": len(res.prompt_ids),
                   "prefill_s": round(tm["prefill_s"], 3),
                   "decode_ms_per_token": 1e3 * tm["decode_s"] / max(tm["decode_steps"], 1),
                   "compress_ms_per_token": 1e3 * tm["compress_s"] / max(tm["decode_steps"], 1),
                   "kv_bytes": res.kv_bytes, "slots": sum(len(r) for r in res.retained)}
            if k not in best or row["decode_ms_per_token"] < best[k]["decode_ms_per_token"]:
                best[k] = row
    rows = [best[k] for k in range(len(configs))]
    full = rows[0]
    print(f"prompt {full['prompt_tokens']} tokens, {args.new} new tokens, compress every "
          f"{args.compress_every} steps, fastest of {args.rounds} interleaved rounds\n")
    print(f"{'method':8} {'budget':>6} {'ms/tok':>8} {'x full':>7} {'(compress ms/tok)':>18} "
          f"{'KV MiB':>8} {'x full':>7}")
    for r in rows:
        r["decode_ratio"] = r["decode_ms_per_token"] / full["decode_ms_per_token"]
        r["kv_ratio"] = r["kv_bytes"] / full["kv_bytes"]
        print(f"{r['method']:8} {r['budget']:6.2f} {r['decode_ms_per_token']:8.2f} "
              f"{r['decode_ratio']:7.3f} {r['compress_ms_per_token']:18.2f} "
              f"{r['kv_bytes'] / 2**20:8.2f} {r['kv_ratio']:7.3f}")
    print("\n" + json.dumps(rows))


if __name__ == "__main__":
    main()
