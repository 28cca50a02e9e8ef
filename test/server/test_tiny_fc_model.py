"""The shipped trained model, models/pask-tiny-fc (the default of `make serve`): it loads where the
product needs it (transformers, xgrammar, SGLang with the qwen tool parser) and, served with the
same flags as `make serve`, makes correct constrained tool calls on unseen synthetic eval entries,
scored by BFCL's checker through `pask eval`.

The accuracy bar here (>= 80% on 40 entries) is a regression guard with slack for a small sample;
the model card's 200-entry numbers come from `bash bench/tiny_server_eval.sh`."""

from __future__ import annotations

import json

from conftest import ROOT
from sglang_pask import cli

MODEL = ROOT / "models" / "pask-tiny-fc"


def test_folder_small_and_complete():
    names = {p.name for p in MODEL.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json", "MODEL_CARD.md"} <= names
    assert sum(p.stat().st_size for p in MODEL.iterdir()) <= 30 * 2**20
    cfg = json.loads((MODEL / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["num_hidden_layers"] >= 4 and cfg["num_key_value_heads"] < cfg["num_attention_heads"]


def test_tokenizer_loads_in_transformers_and_xgrammar():
    import xgrammar as xgr
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    vocab = AutoConfig.from_pretrained(str(MODEL)).vocab_size
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab)
    assert info.vocab_type == xgr.VocabType.BYTE_LEVEL
    for special in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"):
        ids = tok(special, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, special  # one token each: the tool parser and the trackers rely on it


def test_constrained_calls_through_the_server(fc_server, tmp_path):
    out = tmp_path / "run"
    argv = ["eval", "--data", "synthetic:eval:40:tiny", "--backend", "openai", "--base-url", fc_server.base_url,
            "--tool-choice", "required", "--max-tokens", "128", "--workers", "4", "--no-progress",
            "--out", str(out)]
    assert cli.main(argv) == 0
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 40
    # constrained: every answer is a parsable call of a tool in the list
    assert all(r["raw"]["tool_calls"] for r in recs), [r["id"] for r in recs if not r["raw"]["tool_calls"]]
    correct = sum(r["valid"] for r in recs)
    assert correct >= 32, f"{correct}/40 exact calls: " + json.dumps(
        [(r["id"], r["error_type"]) for r in recs if not r["valid"]])


def test_openai_client_tool_call(fc_server):
    """One request as a user would write it: the call names the right tool with a schema-valid body."""
    import jsonschema
    import openai
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.tiny.examples import request_body

    entry = generate("eval", 1, profile="tiny", start=7)[0]
    body, _ = request_body(entry)
    client = openai.OpenAI(base_url=fc_server.base_url, api_key="none")
    r = client.chat.completions.create(model="default", messages=body["messages"], tools=body["tools"],
                                       tool_choice="required", max_tokens=128, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert calls
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in body["tools"]}
    for c in calls:
        assert c.function.name in by_name
        jsonschema.validate(json.loads(c.function.arguments), by_name[c.function.name])


def test_served_in_its_own_float32_on_cpu(fc_server):
    """The launcher keeps the float32 checkpoint in float32 on CPU (SGLang's auto would cast it to
    float16) and says so; the KV cache SGLang allocates is float32."""
    log = fc_server.log()
    assert "serving the float32 checkpoint in float32 on CPU" in log
    assert "KV Cache is allocated. dtype: torch.float32" in log


def test_cpu_dtype_args_only_without_a_choice(tmp_path):
    from sglang_pask.launch_server import cpu_dtype_args

    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    (bf16 / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    fp32 = ["--model-path", str(MODEL)]
    assert cpu_dtype_args(fp32, cuda=False) == ["--dtype", "float32"]
    assert cpu_dtype_args([f"--model={MODEL}"], cuda=False) == ["--dtype", "float32"]
    assert cpu_dtype_args([*fp32, "--dtype", "bfloat16"], cuda=False) == []  # the user's choice
    assert cpu_dtype_args(fp32, cuda=True) == []  # a GPU: SGLang's own default
    assert cpu_dtype_args([*fp32, "--device", "cpu"], cuda=True) == ["--dtype", "float32"]
    assert cpu_dtype_args(["--model-path", str(bf16)], cuda=False) == []
    assert cpu_dtype_args(["--model-path", str(tmp_path / "missing")], cuda=False) == []
