"""Structure tags in SGLang's radix tree (srt/mem_cache/radix_tags.py): runs split exactly, and for 200
requests that share tools blocks, the classes a request reads back from the tree for its cached
prefix equal its own tagging from scratch (the one rendering path, ``render_chat``).

The tree is SGLang's own ``UnifiedRadixCache`` (Python tree core) built by SGLang's unit-test kit
with ``PaskFullComponent`` as FULL, in a child process: the kit sets SGLang's global server args
and needs an import stand-in for HF ``datasets``, neither of which may leak into this process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("sglang")
from sglang_pask.srt.mem_cache.radix_tags import runs_total, split_runs  # noqa: E402

CHILD = r"""
import json, sys
from array import array
import numpy as np
from sglang_pask.cpu_shim import activate, add_standins
activate(); add_standins(("datasets",))
import sglang.test.kits.unified_radix_cache.fixtures as fx
fx.get_device = lambda: "cpu"
from sglang.srt.mem_cache.base_prefix_cache import InsertParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang_pask.srt.mem_cache.radix_tags import KEY, PaskFullComponent, path_classes

reqs = json.load(open(sys.argv[1]))
total = sum(len(ids) for ids, _ in reqs)
cfg = CacheConfig(kv_size=total + 16, num_layers=1, full_attention_layer_ids=(0,), head_num=1, head_dim=8,
                  max_context_len=4096)
tree, alloc, _ = fx.build_fixture(cfg, component_registry_override={ComponentType.FULL: PaskFullComponent},
                                  tree_core_backend="python")
out = []
for ids, classes in reqs:
    m = fx.match_prefix(tree, ids)
    node = tree.resolve_node_handle(m.last_device_node)
    got = path_classes(node, ComponentType.FULL)
    n = int(m.device_prefix_len)
    out.append({"prefix": n, "tree": None if got is None else got.tolist(), "own": classes[:n]})
    params = InsertParams(key=RadixKey(array("q", ids)), value=alloc.alloc(len(ids)))
    params.pask_classes = np.asarray(classes, dtype=np.int64)
    tree.insert(params)
print("RESULT " + json.dumps(out))
"""


def test_split_runs():
    runs = [[1, 3], [2, 2], [5, 4]]
    assert split_runs(runs, 0) == ([], runs)
    assert split_runs(runs, 3) == ([[1, 3]], [[2, 2], [5, 4]])
    assert split_runs(runs, 4) == ([[1, 3], [2, 1]], [[2, 1], [5, 4]])
    assert split_runs(runs, 9) == (runs, [])
    for at in range(10):
        left, right = split_runs(runs, at)
        assert runs_total(left) == at and runs_total(right) == 9 - at
    with pytest.raises(ValueError, match="outside"):
        split_runs(runs, 10)


def _requests(n: int, share: int) -> list[tuple[list[int], list[int]]]:
    """n tiny-profile requests, every ``share`` consecutive ones with the same tools block (the
    tools of one entry, the query of another), rendered and tagged from scratch."""
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.rendering import render_chat
    from sglang_pask.tiny.examples import request_body
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ROOT / "models" / "pask-tiny-fc"))
    entries = generate("calib", n, profile="tiny")
    out = []
    for i, e in enumerate(entries):
        body = request_body(e)[0]
        body["tools"] = request_body(entries[(i // share) * share])[0]["tools"]
        tags = render_chat(tok, body)
        out.append(([int(t) for t in tags.token_ids], [int(c) for c in tags.classes]))
    return out


def test_tags_from_the_tree_equal_tags_from_scratch(tmp_path):
    reqs = _requests(200, share=10)
    data = tmp_path / "reqs.json"
    data.write_text(json.dumps(reqs))
    r = subprocess.run([sys.executable, "-c", CHILD, str(data)], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert r.returncode == 0 and line, r.stderr[-3000:]
    res = json.loads(line[len("RESULT "):])
    hits = [x for x in res if x["prefix"] > 0]
    print(f"{len(hits)} of {len(res)} requests matched a cached prefix; prefix tokens "
          f"{min(x['prefix'] for x in hits)}-{max(x['prefix'] for x in hits)}")
    assert len(hits) >= 180  # all but the first of each tools block (20 blocks), at least
    assert min(x["prefix"] for i, x in enumerate(res) if i % 10) > 50  # the shared tools block
    for x in hits:
        assert x["tree"] is not None and x["tree"] == x["own"], x["prefix"]
