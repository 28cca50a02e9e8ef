"""The plumbing model: rebuilt deterministically, loads in transformers and xgrammar, and its chat
template renders tools and calls the way SGLang's qwen tool parser expects."""

from __future__ import annotations

import hashlib
import json

from conftest import TINY_RANDOM, run_python

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "d",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_rebuild_is_byte_identical(tmp_path):
    out = tmp_path / "m"
    r = run_python("-m", "sglang_pask.tiny.build_random", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert _digest(out) == _digest(TINY_RANDOM)


def test_shape_and_card():
    cfg = json.loads((TINY_RANDOM / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]  # grouped-query attention
    card = (TINY_RANDOM / "MODEL_CARD.md").read_text()
    assert "weights are random" in card


def test_tokenizer_template_and_xgrammar():
    import xgrammar as xgr
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TINY_RANDOM))
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=4096)
    assert info.vocab_type == xgr.VocabType.BYTE_LEVEL
    assert tok.eos_token == "<|im_end|>"
    msgs = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    ]
    text = tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False)
    line = next(ln for ln in text.splitlines() if ln.startswith('{"type": "function"'))
    assert json.loads(line) == TOOLS[0]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>' in text
    # The tool-call tags are plain tokens: they survive skip_special_tokens decoding.
    ids = tok("<tool_call>x</tool_call><|im_end|>")["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"
