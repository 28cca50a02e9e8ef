"""Train pask-tiny-fc: a small Qwen3 that makes function calls on the synthetic ``tiny`` profile.

    python -m sglang_pask.tiny.train --out runs/tiny-fc --steps 6000         # CPU: ~90 min on 2 cores
    python -m sglang_pask.tiny.train --out runs/tiny-fc --resume             # continue a run
    python -m sglang_pask.tiny.train --out runs/tiny-fc --resume --steps 8000  # extend a finished run
    python -m sglang_pask.tiny.train --out runs/tiny-fc --export models/pask-tiny-fc

Data: the synthetic generator's ``train`` split only (profile ``tiny``); entry ``step * batch + k``
feeds step ``step``, so a resumed run sees the same stream. Checkpoints are scored on the ``calib``
split (never ``eval``) by greedy decoding + BFCL's checker. Loss = answer CE + ``prompt_weight`` x
prompt CE (the prompt LM loss speeds up learning to copy; research/tiny_spike.md). bf16 autocast on
CPU; CUDA when ``--device cuda``. Deterministic for a seed on one device and thread count.

Files in ``--out``: ``tokenizer/`` (trained first), ``state.pt`` (model + optimizer + step),
``log.jsonl`` (one record per logged step and per checkpoint eval), ``loss.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass

from sglang_pask.tiny import examples

RANDOM_MODEL = "models/tiny-random-qwen3"  # its tokenizer renders the BPE training text


@dataclass
class TrainConfig:
    # models/pask-tiny-fc was trained 6,000 steps (this default), then extended with
    # `--resume --steps 8000` (8,000 in all; its MODEL_CARD.md reproduce line names both).
    steps: int = 6000
    batch: int = 32
    lr: float = 3e-3
    warmup: int = 200
    weight_decay: float = 0.1
    prompt_weight: float = 1.0
    vocab: int = 2048
    hidden: int = 192
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 512
    seed: int = 0
    log_every: int = 25
    eval_every: int = 500
    eval_n: int = 64
    bucket: int = 8  # batches sorted by length together
    tokenizer_examples: int = 3000
    compact_template: bool = True  # short tools header (tokenizer.COMPACT_HEADER): ~100 fewer tokens

    def __post_init__(self):
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden must divide by heads and heads by kv_heads")


def train_tokenizer(cfg: TrainConfig, out: str):
    from transformers import AutoTokenizer

    from sglang_pask.tiny.tokenizer import chat_template
    from sglang_pask.tiny.tokenizer import train_tokenizer as train_bpe

    render_tok = AutoTokenizer.from_pretrained(RANDOM_MODEL)
    render_tok.chat_template = chat_template(cfg.compact_template)
    texts = []
    for e in examples.stream("train", 10**7, cfg.tokenizer_examples):  # a range no training step reaches
        prompt, answer = examples.render(render_tok, e)
        texts.append(prompt + answer)
    tok = train_bpe(texts, vocab_size=cfg.vocab, compact_template=cfg.compact_template)
    tok.save_pretrained(os.path.join(out, "tokenizer"))
    return tok


def build_model(cfg: TrainConfig, tok):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    ids = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    mc = Qwen3Config(
        vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.ffn,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.hidden // cfg.heads, max_position_embeddings=2048, rope_theta=10000.0,
        tie_word_embeddings=True, bos_token_id=ids[0], eos_token_id=ids[1], pad_token_id=ids[0],
    )
    torch.manual_seed(cfg.seed)
    return Qwen3ForCausalLM(mc)


def batches(cfg: TrainConfig, tok, step: int):
    """The ``cfg.bucket`` batches starting at ``step``: (input_ids, prompt_mask, answer_mask)."""
    import torch

    n = cfg.batch * cfg.bucket
    items = [examples.encode(tok, e) for e in examples.stream("train", step * cfg.batch, n)]
    order = sorted(range(n), key=lambda i: len(items[i][0]) + len(items[i][1]))
    groups = [order[k:k + cfg.batch] for k in range(0, n, cfg.batch)]
    random.Random(f"{cfg.seed}/{step}").shuffle(groups)
    pad = tok.pad_token_id
    for g in groups:
        seqs = [items[i][0] + items[i][1] for i in g]
        # Widths rounded up to a multiple of 32: a handful of shapes instead of hundreds, so
        # oneDNN's per-shape primitive cache and the allocator stop growing the process (seen:
        # +12 MB per step with exact widths).
        width = -(-max(map(len, seqs)) // 32) * 32
        ids = torch.full((len(g), width), pad, dtype=torch.long)
        pmask = torch.zeros((len(g), width), dtype=torch.bool)
        amask = torch.zeros((len(g), width), dtype=torch.bool)
        for r, i in enumerate(g):
            p, a = items[i]
            ids[r, : len(p) + len(a)] = torch.tensor(p + a)
            pmask[r, 1 : len(p)] = True  # token t predicted from t-1
            amask[r, len(p) : len(p) + len(a)] = True
        yield ids, pmask, amask


def losses(model, ids, pmask, amask):
    import torch.nn.functional as F

    logits = model(input_ids=ids).logits[:, :-1].float()
    target = ids[:, 1:]
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), reduction="none").view_as(target)
    p, a = pmask[:, 1:], amask[:, 1:]
    return (ce * a).sum() / a.sum(), (ce * p).sum() / p.sum()


def lr_at(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def evaluate(model, tok, cfg: TrainConfig, device: str) -> dict:
    """Greedy, unconstrained decoding on the calib split, scored by BFCL's checker."""
    import torch

    from sglang_pask.eval.checker import check
    from sglang_pask.eval.decode import decode_text

    model.eval()
    correct, n = 0, 0
    with torch.no_grad():
        for e in examples.stream("calib", 0, cfg.eval_n):
            body, name_map = examples.request_body(e)
            prompt, _ = examples.render(tok, e)
            ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]], device=device)
            out = model.generate(ids, max_new_tokens=96, do_sample=False, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.pad_token_id)
            text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
            d = decode_text(text, name_map)
            ok = d.calls is not None and check(list(e.functions), d.calls, list(e.ground_truth), e.category).valid
            correct += ok
            n += 1
    model.train()
    return {"calib_n": n, "calib_correct": correct, "calib_accuracy": correct / n}


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _write_json(path: str, obj: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)


def _read_log(out: str) -> list[dict]:
    with open(os.path.join(out, "log.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def plot(out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = _read_log(out)
    tr = [r for r in recs if "answer_loss" in r]
    ev = [r for r in recs if "calib_accuracy" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in tr], [r["answer_loss"] for r in tr], label="answer loss")
    ax.plot([r["step"] for r in tr], [r["prompt_loss"] for r in tr], label="prompt loss")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.legend(loc="upper left")
    if ev:
        ax2 = ax.twinx()
        ax2.plot([r["step"] for r in ev], [r["calib_accuracy"] for r in ev], "k.-", label="calib exact calls")
        ax2.set_ylim(0, 1)
        ax2.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "loss.png"), dpi=100)
    plt.close(fig)


def train(cfg: TrainConfig, out: str, device: str = "cpu", resume: bool = False, max_minutes: float = 0) -> None:
    import torch
    from transformers import AutoTokenizer

    os.makedirs(out, exist_ok=True)
    state_path = os.path.join(out, "state.pt")
    if resume:
        tok = AutoTokenizer.from_pretrained(os.path.join(out, "tokenizer"))
        saved = _read_json(os.path.join(out, "config.json"))
        if {**saved, "steps": cfg.steps} != asdict(cfg) or cfg.steps < saved["steps"]:
            raise SystemExit(f"--resume with a different config (only a larger --steps may change): "
                             f"{saved} != {asdict(cfg)}")
        if cfg.steps != saved["steps"]:  # extend a run: the cosine schedule is recomputed for the new length
            _write_json(os.path.join(out, "config.json"), asdict(cfg))
            with open(os.path.join(out, "log.jsonl"), "a") as f:
                f.write(json.dumps({"extend_steps": [saved["steps"], cfg.steps]}) + "\n")
    else:
        tok = train_tokenizer(cfg, out)
        _write_json(os.path.join(out, "config.json"), asdict(cfg))
    model = build_model(cfg, tok).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    step = 0
    if resume:
        st = torch.load(state_path, map_location=device)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
    with open(os.path.join(out, "log.jsonl"), "a") as log:
        t0, tokens, start = time.time(), 0, time.time()
        model.train()
        while step < cfg.steps:
            for ids, pmask, amask in batches(cfg, tok, step):
                ids, pmask, amask = ids.to(device), pmask.to(device), amask.to(device)
                for group in opt.param_groups:
                    group["lr"] = lr_at(cfg, step)
                with torch.autocast(device_type=device, dtype=torch.bfloat16):
                    a_loss, p_loss = losses(model, ids, pmask, amask)
                loss = a_loss + cfg.prompt_weight * p_loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                tokens += int(ids.numel())
                step += 1
                if step % cfg.log_every == 0:
                    rec = {"step": step, "answer_loss": round(a_loss.item(), 5), "prompt_loss": round(p_loss.item(), 5),
                           "lr": lr_at(cfg, step), "tok_s": round(tokens / (time.time() - t0)),
                           "elapsed_s": round(time.time() - start)}
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
                    print(json.dumps(rec), flush=True)
                    t0, tokens = time.time(), 0
                done = step >= cfg.steps or (max_minutes and time.time() - start > 60 * max_minutes)
                if step % cfg.eval_every == 0 or done:
                    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, state_path)
                    rec = {"step": step, **evaluate(model, tok, cfg, device)}
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
                    print(json.dumps(rec), flush=True)
                    plot(out)
                if done:
                    return


def export(out: str, dest: str, results: str | None = None) -> None:
    """Write the trained model as a HF folder (safetensors, tokenizer, chat template, gen config);
    with ``results``, also the run's training log and loss curve there, as
    ``<model>-train-log.jsonl`` and ``<model>-loss.png`` (what bench/results publishes)."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig

    cfg = TrainConfig(**_read_json(os.path.join(out, "config.json")))
    tok = AutoTokenizer.from_pretrained(os.path.join(out, "tokenizer"))
    model = build_model(cfg, tok)
    model.load_state_dict(torch.load(os.path.join(out, "state.pt"), map_location="cpu")["model"])
    ids = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    model.generation_config = GenerationConfig(bos_token_id=ids[0], eos_token_id=[ids[1], ids[0]],
                                               pad_token_id=ids[0], do_sample=False)
    os.makedirs(dest, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    with open(os.path.join(dest, "MODEL_CARD.md"), "w") as f:
        f.write(model_card(out, cfg, sum(p.numel() for p in model.parameters())))
    if results:
        import shutil

        name = os.path.basename(os.path.normpath(dest))
        os.makedirs(results, exist_ok=True)
        shutil.copyfile(os.path.join(out, "log.jsonl"), os.path.join(results, f"{name}-train-log.jsonl"))
        shutil.copyfile(os.path.join(out, "loss.png"), os.path.join(results, f"{name}-loss.png"))


def model_card(out: str, cfg: TrainConfig, n_params: int) -> str:
    """Training facts read from the run folder; the scores section is added by whoever measures."""
    recs = _read_log(out)
    train = [r for r in recs if "answer_loss" in r]
    evals = [r for r in recs if "calib_accuracy" in r]
    last = train[-1] if train else {}
    curve = ", ".join(f"{r['step']}: {100 * r['calib_accuracy']:.0f}%" for r in evals)
    # elapsed_s restarts with each --resume: wall time = sum of each segment's last elapsed_s
    wall = sum(a["elapsed_s"] for a, b in zip(train, train[1:] + [None])
               if b is None or b["elapsed_s"] < a["elapsed_s"])
    extends = [r["extend_steps"] for r in recs if "extend_steps" in r]  # [[from, to], ...] in order
    first = extends[0][0] if extends else cfg.steps
    reproduce = f"`python -m sglang_pask.tiny.train --out runs/tiny-fc --steps {first}`"
    reproduce += "".join(f", then `... --out runs/tiny-fc --resume --steps {to}`" for _, to in extends)
    return f"""# pask-tiny-fc

A tiny Qwen3 function-calling model that sglang_pask trains itself, so accuracy under a KV budget
is measurable on a CPU machine with no model downloads. It is **not** a general assistant: it
knows only the synthetic `tiny` task (2 tools, 1-2 parameters each, short values) and its
compact Qwen3-style tools template.

- Architecture: Qwen3ForCausalLM, {cfg.layers} layers, hidden {cfg.hidden}, {cfg.heads} heads,
  {cfg.kv_heads} KV heads (grouped-query attention), FFN {cfg.ffn}, vocab {cfg.vocab}, tied
  embeddings: {n_params:,} parameters (float32).
- Tokenizer: byte-level BPE ({cfg.vocab} tokens) trained on {cfg.tokenizer_examples} rendered
  training examples, with Qwen3's special tokens and the `<tool_call>` tags.
- Data: the synthetic generator's `train` split, profile `tiny` (sglang_pask.eval.synthetic);
  prompts rendered exactly as the SGLang server renders them; answers in both call spellings that
  constrained decoding can force. Checkpoints scored on the `calib` split; `eval` never trained
  on (whether it informed any training decision is said under Scores).
- Training: {last.get('step', 0)} steps of batch {cfg.batch}, AdamW lr {cfg.lr} (warmup
  {cfg.warmup}, cosine to 10%), loss = answer CE + {cfg.prompt_weight} x prompt CE, bf16 autocast,
  {wall / 60:.0f} min wall on 2 CPU cores; final answer loss
  {last.get('answer_loss')}, prompt loss {last.get('prompt_loss')}.
- Reproduce: {reproduce}, then
  `python -m sglang_pask.tiny.train --out runs/tiny-fc --export models/pask-tiny-fc`.
- Calib exact-call accuracy during training (greedy, unconstrained, {cfg.eval_n} entries): {curve}.
"""


def _flag(v: str) -> bool:
    if v.lower() not in ("0", "1", "true", "false", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true/false, got {v!r}")
    return v.lower() in ("1", "true", "yes")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--export", metavar="DIR", help="only export the trained model in --out to DIR")
    ap.add_argument("--results", metavar="DIR", help="with --export: also copy the training log and loss "
                    "curve there (e.g. bench/results)")
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (with a checkpoint) after this long")
    for f, default in asdict(TrainConfig()).items():
        kind = _flag if isinstance(default, bool) else type(default)
        ap.add_argument(f"--{f.replace('_', '-')}", type=kind, default=default)
    args = ap.parse_args(argv)
    if args.export:
        export(args.out, args.export, args.results)
        return
    cfg = TrainConfig(**{f: getattr(args, f) for f in asdict(TrainConfig())})
    train(cfg, args.out, args.device, args.resume, args.max_minutes)


if __name__ == "__main__":
    main()
