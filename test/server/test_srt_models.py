"""The launcher's narrowed model registry (:mod:`sglang_pask.srt.models`): with
``$SGLANG_EXTERNAL_MODEL_PACKAGE`` naming it, SGLang's registry resolves the served families from
it alone (SGLang's own classes, unchanged) and still resolves any other architecture by loading
its default modules; a server started by the launcher logs no "Ignore import error" line."""

from __future__ import annotations

import json

from conftest import run_python

CODE = """
import json, sglang.srt.models.registry as reg
import sglang.srt.models.qwen2 as q2, sglang.srt.models.qwen3 as q3, sglang.srt.models.llama as ll
r = reg.ModelRegistry
out = {"before": r._default_models_loaded}
out["qwen3"] = r.resolve_model_cls(["Qwen3ForCausalLM"])[0] is q3.EntryClass
out["qwen2"] = r.resolve_model_cls(["Qwen2ForCausalLM"])[0] is q2.EntryClass
out["llama"] = r.resolve_model_cls(["LlamaForCausalLM"])[0] is ll.EntryClass[0]
out["lazy"] = not r._default_models_loaded
cls, arch = r.resolve_model_cls(["MistralForCausalLM"])
out["fallback"] = (arch, cls.__module__, r._default_models_loaded)
print(json.dumps(out))
"""


def test_registry_narrowed_then_falls_back():
    from sglang_pask.launch_server import ENV_MODEL_PACKAGE, MODEL_PACKAGE

    r = run_python("-c", CODE, env={ENV_MODEL_PACKAGE: MODEL_PACKAGE}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["before"] is False and out["qwen3"] and out["qwen2"] and out["llama"] and out["lazy"], out
    assert out["fallback"] == ["MistralForCausalLM", "sglang.srt.models.mistral", True], out
    assert "Ignore import error" in r.stderr  # the fallback imported SGLang's defaults, as stock


def test_launcher_start_is_quiet(pask_server):
    """The launcher's server: no model-import noise, no CPU-only warnings (the CPU shim)."""
    log = pask_server.log()
    assert "The server is fired up" in log
    for noise in ("Ignore import error", "Only CUDA", "Triton is not supported"):
        assert noise not in log, noise
