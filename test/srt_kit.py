"""A scheduler's bookkeeping at tiny sizes on CPU, from SGLang's own classes (no server): the
PASK pools and allocator, SGLang's ``ReqToTokenPool``, real ``Req`` objects carrying the plugin's
tags action, and optionally the PASK radix cache -- what the CPU unit tests (test_srt_*_unit.py)
drive the plugin's bookkeeping with.

:func:`serving_config` is the one place the tests build a :class:`~sglang_pask.srt.serving.ServingConfig`.
"""

from __future__ import annotations

from array import array
from functools import lru_cache
from types import SimpleNamespace
from typing import Optional, Sequence

import numpy as np
import torch
from conftest import ROOT
from sglang_pask.environ import envs

# the lookup 0.33 policy: 4 layers in 2 groups, [[0, 1], [2, 3]]
POLICY = ROOT / "experiments" / "policies" / "pask-tiny-fc.lookup.b0.33.json"
NUM_LAYERS = 4


def serving_config(method: Optional[str] = None, budget: Optional[float] = 0.33, *, segment: str = "none",
                   radix: bool = False, **kw):
    """A serving configuration for the tiny policy (the only place tests call ``build_config``)."""
    from sglang_pask.srt.serving import ServingFlags, build_config

    kept_log, chunk, scorer = kw.pop("kept_log", None), kw.pop("prefill_chunk", None), kw.pop("scorer", None)
    overrides = {"segment": segment, **{k: v for k, v in kw.items() if v is not None}}
    return build_config(str(POLICY), ServingFlags(method=method, budget=budget, overrides=overrides, radix=radix,
                                                  kept_log=kept_log, prefill_chunk=chunk, scorer=scorer))


@lru_cache(maxsize=1)
def tokenizer():
    """The tiny model's tokenizer (the scheduler tags a request's output through it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ROOT / "models" / "pask-tiny-fc"))


def reset_counters() -> None:
    """A fresh PaskState for this process: every counter at zero, every log and cache empty (a
    fixture calls it)."""
    from sglang_pask.srt.state import reset

    reset()


def prompt_classes(n: int, seed: int = 0) -> list[int]:
    """``n`` structure classes in runs (deterministic), so class-aware methods have something to rank."""
    from sglang_pask.structure.classes import StructClass

    rng = np.random.default_rng(seed)
    values = [int(c) for c in StructClass]
    out: list[int] = []
    while len(out) < n:
        out += [int(rng.choice(values))] * int(rng.integers(1, 6))
    return out[:n]


class Rig:
    """PASK pools of ``full_size`` full ids and ``unit_size`` slots per unit, a request table, and
    (``radix=True``) the PASK radix cache over them (Python tree core)."""

    def __init__(self, config, full_size: int = 256, unit_size: Optional[int] = None, rows: int = 8,
                 context: int = 256, radix: bool = False, kv_heads: int = 1):
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang_pask.srt.mem_cache.pools import PaskAllocator, PaskKVPool

        self.config = config
        self.pool = PaskKVPool(units=config.units, full_size=full_size, unit_size=unit_size or full_size,
                               dtype=torch.float32, head_num=kv_heads, head_dim=4, v_head_dim=None, device="cpu",
                               num_layers=config.num_layers)
        self.alloc = PaskAllocator(full_size, self.pool, device="cpu", dtype=torch.float32)
        self.req_to_token_pool = ReqToTokenPool(size=rows, max_context_len=context, device="cpu",
                                                enable_memory_saver=False)
        self.tree = self._tree() if radix else None
        self.matched: dict[str, int] = {}  # rid -> prefix tokens its admission matched in the tree

    def _tree(self):
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang_pask.srt.mem_cache.radix_cache import PaskRadixCache
        from sglang_pask.srt.mem_cache.radix_tags import PaskFullComponent

        params = CacheInitParams(req_to_token_pool=self.req_to_token_pool, token_to_kv_pool_allocator=self.alloc,
                                 page_size=1, disable=False, tree_components=(ComponentType.FULL,),
                                 component_registry_override={ComponentType.FULL: PaskFullComponent},
                                 tree_core_backend="python")
        return PaskRadixCache(params=params)

    @property
    def req_to_token(self) -> torch.Tensor:
        return self.req_to_token_pool.req_to_token

    # -- requests ----------------------------------------------------------------------------------
    def request(self, ids: Sequence[int], classes: Optional[Sequence[int]] = None, segment_end: int = 0,
                rid: str = "r", max_new_tokens: int = 64):
        """A real SGLang ``Req`` with the plugin's tags action (classes of its prompt, its segment end)."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang_pask.srt.managers.request_tags import attach, make_key

        if not envs.SGLANG_PASK_HINT_KEY.is_set():  # the launcher's process makes it in a server
            make_key()
        carrier = SimpleNamespace(rid=rid, kv_hints=None)
        classes = prompt_classes(len(ids)) if classes is None else classes
        attach(carrier, list(classes), "qwen3_tools", segment_end)
        req = Req(rid=rid, origin_input_text="", origin_input_ids=array("q", ids),
                  sampling_params=SamplingParams(temperature=0, max_new_tokens=max_new_tokens),
                  kv_hints=carrier.kv_hints)
        req.output_ids = array("q")
        req.tokenizer = tokenizer()
        req.lock = None
        return req

    def prefill(self, req, upto: Optional[int] = None) -> torch.Tensor:
        """Write the prompt's KV up to ``upto`` (default: all of it) as SGLang's prefill does:
        a row, the tree's matched prefix (with a radix cache), new full ids for the rest."""
        n = len(req.origin_input_ids) if upto is None else upto
        if req.kv.req_pool_idx is None:
            assert self.req_to_token_pool.alloc([req]) is not None
            req.kv.cache_protected_len = 0
            req.prefix_len = 0
            req.refresh_fill_ids()
            if self.tree is not None:
                self._match(req)
        start = int(req.kv.kv_committed_len)
        ids = self.alloc.alloc(n - start)
        assert ids is not None, "the tiny pools are full"
        self.req_to_token_pool.write((req.kv.req_pool_idx, slice(start, n)), ids)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = n
        req.extend_end = n
        if self.tree is not None and not req.finished():
            from sglang.srt.mem_cache.common import checkpoint_kv_cache

            checkpoint_kv_cache(req, self.tree)  # SGLang's publish (PaskRadixCache.checkpoint)
        return ids

    def match_len(self, ids: Sequence[int], extra_key: Optional[str]) -> int:
        """Tokens of ``ids`` the tree would give a request in namespace ``extra_key`` now."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        match = self.tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", ids), extra_key)))
        return int(match.device_prefix_len)

    def _match(self, req) -> None:
        """SGLang's admission match (``match_kv_cache``): the prefix the tree holds for the
        request, locked and written to its row."""
        from sglang.srt.mem_cache.common import match_kv_cache

        match_kv_cache(req, self.tree)
        n = self.matched[req.rid] = int(req.prefix_len)
        req.lock = self.tree.lock(req.last_node)
        if n:
            ids = self.tree.path_device_indices(req.last_node)
            self.req_to_token_pool.write((req.kv.req_pool_idx, slice(0, n)), ids[:n])
        req.kv.cache_protected_len = n
        req.kv.kv_committed_len = req.kv.kv_allocated_len = n

    def decode(self, req, token: int = 90) -> None:
        """One decode step: the last sampled token's KV gets a full id (and a slot per unit)."""
        ids = self.alloc.alloc(1)
        assert ids is not None, "the tiny pools are full"
        n = int(req.kv.kv_committed_len)
        self.req_to_token_pool.write((req.kv.req_pool_idx, slice(n, n + 1)), ids)
        req.output_ids.append(token)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = n + 1
        req.decode_batch_idx += 1

    def release(self, req) -> None:
        """The request finishes: SGLang's release (with a radix cache: checkpoint, free the rest,
        unlock), or, without one, its row's full ids back to the allocator."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang_pask.srt.mem_cache import segment_views

        req.finished_reason = FINISH_LENGTH(length=len(req.output_ids))
        n = int(req.kv.kv_committed_len)
        segment_views.clear(req.kv.req_pool_idx)  # what the plugin's release hook does first
        if self.tree is not None:
            # SGLang's release_kv_cache for a request with no over-allocation (what SGLang's own
            # test kit, sglang.test.mem_cache_utils.finish_req, does; the real function reads
            # scheduler globals this process does not publish)
            req.refresh_fill_ids()
            self.tree.checkpoint(req, up_to=n)
            self.tree.free_kv_row(req.kv, [(req.kv.cache_protected_len, n)])
            self.tree.unlock(req.lock)
            req.lock = None
            self.req_to_token_pool.free(req)
            req.kv.mark_kv_released()
            return
        self.alloc.free(self.req_to_token[req.kv.req_pool_idx, :n])
        self.req_to_token_pool.free(req)
        req.kv.mark_kv_released()

    # -- reading the pools -------------------------------------------------------------------------
    def row(self, req) -> torch.Tensor:
        return self.req_to_token[req.kv.req_pool_idx, :int(req.kv.kv_committed_len)]

    def held(self, req) -> list[np.ndarray]:
        """Per unit, the request's logical positions whose KV the unit holds."""
        from sglang_pask.srt.managers.persist import held_positions

        return held_positions(self.alloc, self.row(req))

    def free_lists_unique(self) -> bool:
        """No slot or full id is on its allocator's free list twice (a double free shows here)."""
        lists = [self.alloc.free_pages, *(a.free_pages for a in self.alloc.units)]
        return all(torch.unique(f).numel() == f.numel() for f in lists)

    def leaks(self) -> list[str]:
        """What is not back at idle: full ids or unit slots still taken (leaked) or free more than
        once (freed twice), mappings not cleared. Empty: idle."""
        out = []
        a = self.alloc
        if a.full_available_size() != a.size:
            out.append(f"full ids: {a.full_available_size()} of {a.size} free")
        for u, (free, x, size) in enumerate(zip(a.unit_available_sizes(), a.units, self.pool.unit_sizes)):
            if free != size:
                out.append(f"unit {u}: {free} of {size} slots free ({'leaked' if free < size else 'freed twice'})")
            if torch.unique(x.free_pages).numel() != x.free_pages.numel():
                out.append(f"unit {u}: a slot is on the free list twice")
        mapped = (self.pool.mapping > 0).sum(dim=1).tolist()
        if any(mapped):
            out.append(f"mapping not cleared: {mapped} full ids still mapped per unit")
        return out

    def assert_idle(self) -> None:
        problems = self.leaks()
        assert not problems, "; ".join(problems)


def compress_step(rig: Rig, running: list, config, batched: bool, monkeypatch) -> None:
    """One decode step's compression of ``running``: the server's ``compress_batch`` (which must
    not fall back to ``compress_request``) or ``compress_request`` request by request."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang_pask.srt.managers import persist

    if not batched:
        for req in running:
            persist.compress_request(req, rig.req_to_token, rig.alloc, config)
        return

    def no_fallback(*a, **k):
        raise AssertionError("the batched compression fell back to request by request")

    with monkeypatch.context() as m:
        m.setattr(persist, "compress_request", no_fallback)
        batch = ScheduleBatch(reqs=list(running), req_to_token_pool=rig.req_to_token_pool,
                              token_to_kv_pool_allocator=rig.alloc, device="cpu")
        persist.compress_batch(batch, rig.alloc, config)


def assert_twins_then_idle(rigs: Sequence[Rig], reqs: Sequence[Sequence]) -> None:
    """Twin rigs fed the same requests hold the same positions per unit and the same free slots;
    releasing every request leaves both idle."""
    for ra, rb in zip(*reqs):
        for ha, hb in zip(rigs[0].held(ra), rigs[1].held(rb)):
            assert np.array_equal(ha, hb), (ra.rid, ha.tolist(), hb.tolist())
    assert rigs[0].alloc.unit_available_sizes() == rigs[1].alloc.unit_available_sizes()
    for rig, rs in zip(rigs, reqs):
        for req in rs:
            rig.release(req)
        rig.assert_idle()


def long_tool_request(tokenizer, at_least: int) -> dict:
    """A tool request (train entries) whose rendered prompt has at least ``at_least`` tokens."""
    from sglang_pask.eval.synthetic import generate
    from sglang_pask.rendering import render_chat
    from sglang_pask.tiny.examples import request_body

    tools, names = [], set()
    for entry in generate("train", 400, profile="tiny"):
        body = request_body(entry)[0]
        tools += [t for t in body["tools"] if t["function"]["name"] not in names]
        names |= {t["function"]["name"] for t in body["tools"]}
        req = {"messages": body["messages"], "tools": tools, "tool_choice": "required"}
        rendered = render_chat(tokenizer, {**req, "chat_template_kwargs": {"enable_thinking": False}})
        if len(rendered.token_ids) >= at_least:
            return req
    raise AssertionError(f"no prompt of {at_least} tokens from 400 train entries")
