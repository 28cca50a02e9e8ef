"""Build ``models/tiny-random-qwen3``: a ~1M-parameter Qwen3ForCausalLM with RANDOM weights.

It exists for plumbing (server start-up, tool-call parsing, constrained decoding, KV bookkeeping),
not for accuracy. Deterministic: the same seed gives byte-identical weights and tokenizer.

    python -m sglang_pask.tiny.build_random --out models/tiny-random-qwen3
"""

from __future__ import annotations

import argparse
import json
import os

from sglang_pask.tiny.corpus import lines
from sglang_pask.tiny.tokenizer import train_tokenizer

CONFIG = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    vocab_size=4096,
    max_position_embeddings=4096,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    hidden_act="silu",
    attention_bias=False,
    initializer_range=0.02,
)

MODEL_CARD = """# tiny-random-qwen3

**The weights are random.** This model says nothing meaningful: it exists so the serving path
(SGLang server, the sglang_pask plugin, chat template, tool-call parser, xgrammar-constrained
decoding, KV bookkeeping) can be exercised on a CPU machine with no model downloads. A trained
model replaces it as the project's default later.

- Architecture: Qwen3ForCausalLM, {layers} layers, hidden {hidden}, {heads} attention heads,
  {kv_heads} KV heads (grouped-query attention), head_dim {head_dim}, vocab {vocab}, tied
  embeddings, {params:,} parameters, stored in bfloat16.
- Tokenizer: byte-level BPE trained locally on generated text (tool schemas, requests, tool calls),
  Qwen3 special tokens `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` (eos) and the non-special tags
  `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>`, `<think>`, `</think>`.
- Chat template: Qwen3-style, tools as JSON lines inside `<tools></tools>`, calls as
  `<tool_call>\\n{{"name": ..., "arguments": {{...}}}}\\n</tool_call>`.
- Built by `python -m sglang_pask.tiny.build_random --out models/tiny-random-qwen3 --seed {seed}`
  (deterministic, a few seconds on CPU).
"""


def build(out: str, seed: int = 0, overrides: dict | None = None) -> int:
    """Write the model into ``out``; ``overrides``: :data:`CONFIG` fields to change (e.g. a larger
    shape for a speed benchmark). Returns the parameter count."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    os.makedirs(out, exist_ok=True)
    tok = train_tokenizer(lines(seed=seed), vocab_size=CONFIG["vocab_size"])
    ids = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    cfg = Qwen3Config(
        **{**CONFIG, **(overrides or {})},
        bos_token_id=ids[0],
        eos_token_id=ids[2],
        pad_token_id=ids[0],
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=ids[0],
        eos_token_id=[ids[2], ids[0]],
        pad_token_id=ids[0],
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
    )
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    with open(os.path.join(out, "MODEL_CARD.md"), "w") as f:
        f.write(
            MODEL_CARD.format(
                layers=cfg.num_hidden_layers,
                hidden=cfg.hidden_size,
                heads=cfg.num_attention_heads,
                kv_heads=cfg.num_key_value_heads,
                head_dim=cfg.head_dim,
                vocab=cfg.vocab_size,
                params=n_params,
                seed=seed,
            )
        )
    print(json.dumps({"out": out, "params": n_params, "tokenizer_size": len(tok)}))
    return n_params


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="models/tiny-random-qwen3")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    build(args.out, args.seed)


if __name__ == "__main__":
    main()
