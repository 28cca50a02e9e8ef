"""The table of model families picks each folder's tool-call parser, and `make serve` uses it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT
from sglang_pask import model_families as mf

QWEN_TEMPLATE = '{%- if tools %}<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}</tool_call>'
QWEN3_CODER_TEMPLATE = "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>"


def _folder(tmp_path, model_type: str, template: str, jinja: bool = False):
    d = tmp_path / model_type
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": model_type}))
    (d / "tokenizer_config.json").write_text(json.dumps({} if jinja else {"chat_template": template}))
    if jinja:
        (d / "chat_template.jinja").write_text(template)
    return str(d)


@pytest.mark.parametrize("model", ["pask-tiny-fc", "tiny-random-qwen3"])
def test_project_models_are_qwen3(model):
    fam = mf.family(str(ROOT / "models" / model))
    assert (fam.name, fam.parser) == ("qwen3", "qwen")


@pytest.mark.parametrize("model_type, template, jinja, family", [
    ("qwen2", QWEN_TEMPLATE, False, "qwen2.5"),  # as make real-model writes it
    ("qwen3", QWEN_TEMPLATE, True, "qwen3"),
    ("qwen3", QWEN3_CODER_TEMPLATE, True, "qwen3-coder"),
    ("llama", "{{- '<|python_tag|>' }}", False, "llama3"),
])
def test_family_by_model_type_and_template_marker(tmp_path, model_type, template, jinja, family):
    assert mf.family(_folder(tmp_path, model_type, template, jinja)).name == family


def test_unknown_is_one_line_naming_the_way_out(tmp_path):
    with pytest.raises(mf.UnknownFamily) as e:
        mf.family(_folder(tmp_path, "gpt2", "{{ messages }}"))
    assert "\n" not in str(e.value) and "'gpt2'" in str(e.value) and "TOOL_PARSER=" in str(e.value)
    with pytest.raises(mf.UnknownFamily, match="no config.json"):
        mf.family(str(tmp_path))


def test_every_parser_is_one_sglang_accepts():
    """SGLang's --tool-call-parser choices, read from its dependency-free names module (loaded by
    file: importing the sglang package costs seconds)."""
    import importlib.util
    import os

    where = importlib.util.find_spec("sglang").submodule_search_locations[0]
    path = os.path.join(where, "srt", "function_call", "parser_names.py")
    spec = importlib.util.spec_from_file_location("_sglang_parser_names", path)
    names = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(names)
    assert {f.parser for f in mf.FAMILIES} <= set(names.TOOL_CALL_PARSER_NAMES)


def test_make_serve_takes_the_parser_from_the_table(tmp_path):
    coder = _folder(tmp_path, "qwen3", QWEN3_CODER_TEMPLATE, jinja=True)
    out = subprocess.run(["make", "-n", "serve", f"MODEL={coder}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120).stdout
    assert "--tool-call-parser qwen3_coder " in out
    out = subprocess.run(["make", "-n", "serve", f"MODEL={coder}", "TOOL_PARSER=hermes"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120).stdout
    assert "--tool-call-parser hermes " in out


def test_module_cli(tmp_path):
    run = [sys.executable, "-m", "sglang_pask.model_families"]
    r = subprocess.run([*run, "parser", str(ROOT / "models" / "pask-tiny-fc")], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "qwen\n")
    r = subprocess.run([*run, "parser", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no config.json" in r.stderr
