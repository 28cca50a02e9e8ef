"""GGUF -> a plain transformers folder (safetensors, tokenizer, chat template) for SGLang and the
reference runner.

transformers' GGUF reader dequantizes the tensors and parses the config and tokenizer; the model is
rebuilt as a plain ``Qwen2ForCausalLM`` from that config and state dict (``save_pretrained`` of a
GGUF-loaded model refuses). The GGUF keeps a separately quantized ``output.weight``, so the
embeddings stay untied, as the file has them. The folder is written in the dtype that
:func:`measure` finds faster on this CPU.

Files of the folder: ``config.json`` (with both the old keys ``rope_theta`` / ``torch_dtype`` and the
new ``rope_parameters`` / ``dtype``, so older and newer transformers load it), ``generation_config.json``,
``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json`` (with ``chat_template``, the
GGUF's ``tokenizer.chat_template`` verbatim).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

DTYPES = ("bfloat16", "float32")
#: Qwen2.5's end tokens: <|im_end|> (chat turns) and <|endoftext|> (documents, also the pad).
_EOS_IDS = [151645, 151643]
_PAD_ID = 151643


@dataclass(frozen=True)
class Speed:
    """One dtype's cost on this CPU: load of the saved folder, a prefill, greedy decode steps."""

    dtype: str
    load_s: float
    prompt_tokens: int
    prefill_s: float
    decode_tokens: int
    decode_s: float

    @property
    def forward_s(self) -> float:
        return self.prefill_s + self.decode_s

    def row(self) -> str:
        return (f"| {self.dtype} | {self.load_s:.1f} | {self.prompt_tokens / self.prefill_s:.0f} "
                f"| {self.decode_tokens / self.decode_s:.1f} | {self.load_s + self.forward_s:.1f} |")


@contextlib.contextmanager
def one_reader():
    """While active, ``gguf.GGUFReader(path)`` parses a file once and returns the same reader after.
    transformers opens the GGUF anew on every call (the config, the tensors, the tokenizer), and each
    open parses every metadata field -- the 151,936-entry vocabulary and its merges, most of a
    build's parse time. Safe to share: a reader is a read-only memory map and the fields parsed
    from it; transformers only reads them."""
    import gguf

    real = gguf.GGUFReader
    readers: dict[tuple[str, str], object] = {}

    def reader(path, mode: str = "r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = real


def dequantize(gguf: Path):
    """``(Qwen2Config, {name: fp32 tensor})`` from transformers' GGUF reader."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    cfg = load_gguf_checkpoint(str(gguf))["config"]
    if cfg.get("model_type") != "qwen2":
        raise ValueError(f"{gguf}: model_type {cfg.get('model_type')!r}, expected 'qwen2'")
    config = Qwen2Config(**{k: v for k, v in cfg.items() if k != "model_type"})
    config.architectures = ["Qwen2ForCausalLM"]
    with torch.device("meta"):  # only the parameter names, for the GGUF -> HF name map
        skeleton = Qwen2ForCausalLM(config)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=skeleton,
                                   torch_dtype=torch.float32)["tensors"]
    return config, tensors


def build(config, tensors):
    """A plain fp32 ``Qwen2ForCausalLM`` holding exactly ``tensors`` (strict: nothing missing or extra)."""
    import torch
    from transformers import Qwen2ForCausalLM

    config.dtype = torch.float32
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.load_state_dict(tensors, strict=True)
    return model.eval()


def save_weights(model, out: Path, dtype: str) -> None:
    import torch

    model.to(getattr(torch, dtype)).save_pretrained(out, safe_serialization=True)
    for f in out.glob("*.safetensors"):
        f.chmod(0o644)  # readable like the other files (the writer creates it 0600)
    compat_config(out / "config.json", dtype)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": _PAD_ID, "eos_token_id": _EOS_IDS, "pad_token_id": _PAD_ID}, indent=2) + "\n")


def compat_config(path: Path, dtype: str) -> None:
    """Add the keys older transformers read (``rope_theta``, ``torch_dtype``) next to the new ones."""
    cfg = json.loads(path.read_text())
    cfg.pop("_model_name_or_path", None)  # the GGUF's general.name, not a path
    rope = cfg.get("rope_parameters") or {}
    cfg.setdefault("rope_theta", rope.get("rope_theta", 1000000.0))
    cfg["dtype"] = cfg["torch_dtype"] = dtype
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def save_tokenizer(gguf: Path, out: Path, context: int) -> str:
    """Tokenizer files in ``out``, the chat template inside ``tokenizer_config.json``; the template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tok.chat_template:
        raise ValueError(f"{gguf}: carries no tokenizer.chat_template")
    tok.save_pretrained(out)
    (out / "chat_template.jinja").unlink(missing_ok=True)  # one place: tokenizer_config.json
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    for key in ("is_local", "local_files_only"):  # facts of this load, not of the tokenizer
        cfg.pop(key, None)
    cfg.update(chat_template=tok.chat_template, model_max_length=context, add_bos_token=False)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return tok.chat_template


def _trial(model, ids, decode_tokens: int) -> tuple[float, float]:
    """Seconds of one prefill of ``ids`` [1, T] and of ``decode_tokens`` greedy steps after it."""
    import torch

    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        prefill_s = time.perf_counter() - t0
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        t0 = time.perf_counter()
        for _ in range(decode_tokens):
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        return prefill_s, time.perf_counter() - t0


def measure(folders: dict[str, Path], tokenizer_dir: Path, rounds: int = 3, decode_tokens: int = 8) -> list[Speed]:
    """Each dtype's folder (``{dtype: folder}``) loaded in that dtype, then ``rounds`` interleaved
    trials (a prefill of a tool request, greedy decode steps); each dtype keeps its fastest trial,
    so a burst of load from other processes on a shared CPU does not decide the choice."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What's the weather in Paris, in fahrenheit?"}]
    from sglang_pask.rendering import render_chat  # the one rendering path (the server's prompt)

    ids = torch.tensor([list(render_chat(tok, {"messages": msgs, "tools": tools}).token_ids)])
    models, load_s = {}, {}
    for dtype, folder in folders.items():
        t0 = time.perf_counter()
        models[dtype] = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
        load_s[dtype] = time.perf_counter() - t0
        _trial(models[dtype], ids[:, :8], 1)  # warm-up: one-time kernel set-up is not the dtype's speed
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for dtype, model in models.items():
            trial = _trial(model, ids, decode_tokens)
            if dtype not in best or sum(trial) < sum(best[dtype]):
                best[dtype] = trial
    return [Speed(d, load_s[d], ids.shape[1], best[d][0], decode_tokens, best[d][1]) for d in folders]


def convert(gguf: Path, out: Path, staging: Path) -> dict:
    """Write the folder ``out`` (via ``staging``, removed after); a record of what was measured."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with one_reader():  # the file is parsed once for the config, the tensors and the tokenizer
        t0 = time.perf_counter()
        config, tensors = dequantize(gguf)
        model = build(config, tensors)
        del tensors
        dequant_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        tok_dir = staging / "tokenizer"
        template = save_tokenizer(gguf, tok_dir, config.max_position_embeddings)
        tokenizer_s = time.perf_counter() - t0
    for dtype in DTYPES[::-1]:  # float32 first: the cast to bf16 is lossy, the reverse is not needed
        save_weights(model, staging / dtype, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    del model
    speeds = measure({dtype: staging / dtype for dtype in DTYPES}, tok_dir)
    best = min(speeds, key=lambda s: s.load_s + s.forward_s)
    shutil.rmtree(out, ignore_errors=True)
    (staging / best.dtype).rename(out)
    for f in tok_dir.iterdir():
        f.rename(out / f.name)
    shutil.rmtree(staging)
    return {"dtype": best.dtype, "speeds": speeds, "loadavg": os.getloadavg()[0], "cpus": os.cpu_count(),
            "dequant_s": dequant_s, "tokenizer_s": tokenizer_s,
            "params": n_params, "chat_template_chars": len(template)}
