"""The built real model (``make real-model``): transformers loads the folder and its weights know
the task, and a live server, given the parser the table of model families picks, makes an exact
constrained tool call, also through the README's example. Skips without the folder (conftest)."""

from __future__ import annotations

import json

import pytest
from conftest import REAL_MODEL, ROOT

pytestmark = pytest.mark.server  # it starts a live server (the folder gives real_model)

TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}
ASK = [{"role": "user", "content": "What's the weather like in Paris right now, in fahrenheit?"}]
GOLD = {"city": "Paris", "unit": "fahrenheit"}


def test_folder_loads_with_transformers_and_prefers_the_right_call():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(REAL_MODEL)
    assert (config.model_type, config.num_hidden_layers, config.num_attention_heads,
            config.num_key_value_heads, config.vocab_size) == ("qwen2", 24, 14, 2, 151936)
    tok = AutoTokenizer.from_pretrained(REAL_MODEL)
    prompt = tok.apply_chat_template(ASK, tools=[TOOL], add_generation_prompt=True, tokenize=False)
    assert "<tool_call>" in prompt and '"get_weather"' in prompt and prompt.endswith("<|im_start|>assistant\n")
    model = AutoModelForCausalLM.from_pretrained(REAL_MODEL, dtype=config.dtype).eval()

    # the call's opening as SGLang's qwen parser reads it; the model itself rarely emits <tool_call>
    # unconstrained (its row is as small as the unused ones'), so the opening is given, not scored
    opening = tok(prompt + '<tool_call>\n{"name": "get_weather", "arguments":')["input_ids"]

    def nll(args: dict) -> float:  # teacher-forced NLL (sum, nats) of the arguments object
        a = tok(" " + json.dumps(args))["input_ids"]
        with torch.inference_mode():
            logits = model(torch.tensor([opening + a])).logits[0, len(opening) - 1:-1].float()
        return torch.nn.functional.cross_entropy(logits, torch.tensor(a), reduction="sum").item()

    gold = nll(GOLD)
    wrong = [nll({"city": "London", "unit": "fahrenheit"}), nll({"city": "Paris", "unit": "celsius"})]
    print(f"arguments NLL (nats): gold {gold:.2f}, wrong city {wrong[0]:.2f}, wrong unit {wrong[1]:.2f}")
    assert gold < 3.0 and min(wrong) > gold + 5.0  # the asked-for call is the model's own answer


@pytest.fixture(scope="module")
def real_server():
    from sglang_pask.model_families import tool_call_parser
    from sglang_pask.testing import running_server

    args = ["--tool-call-parser", tool_call_parser(str(REAL_MODEL)), "--max-total-tokens", "8192"]
    with running_server(str(REAL_MODEL), args, timeout=900) as srv:
        yield srv


def test_constrained_tool_call_is_exact(real_server):
    import openai

    client = openai.OpenAI(base_url=real_server.base_url, api_key="none", timeout=900)
    r = client.chat.completions.create(model="default", tools=[TOOL], tool_choice="required", messages=ASK,
                                       max_tokens=64, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == GOLD


def test_readme_example_makes_the_call(real_server, tmp_path):
    """The real-model openai block of the docs (docs/serving.md, marked ``real-model-test``) runs as written."""
    from sglang_pask.testing import documented_blocks, run_readme_block

    blocks = documented_blocks(ROOT, marker="real-model-test")
    assert len(blocks) == 1 and blocks[0].kind == "bash", "the docs need one <!-- real-model-test ... --> block"
    r, _, missing = run_readme_block(blocks[0], ROOT, tmp_path, real_server.port)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not missing, (missing, r.stdout)
