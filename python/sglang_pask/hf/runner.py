"""The reference runner: a manual prefill/decode loop over a transformers model with a
:class:`~.cache.PrunableCache`, the ``pask`` attention function, xgrammar constraints and the
structure taggers feeding a :class:`~sglang_pask.methods.KVMethod`.

Loop (batch 1, greedy unless ``temperature > 0``)::

    prefill prompt (positions 0..P-1) -> compress if over budget
        (segment "system": prefill 0..S-1 -> compress the segment alone -> prefill S..P-1 ->
         compress the own span S.. if over its budget; every later compression too)
    repeat: mask logits (grammar) -> pick token -> accept (grammar) -> stop? -> tracker.feed
            -> forward token at position seq_len -> when due (``KVMethod.due``: schedule
               ``continuous``, every ``interval`` steps;
               ``prefill``, never after prefill end): compress if the cache holds more than
               floor(b * L * seq_len) slots (per KV head)

``generate`` is two halves: :meth:`Runner.forward_request` (render, write the prompt into a new
cache under the segment rule: a :class:`Prompted`) and :meth:`Runner.decode` (the prefill-end
compression, the loop, the :class:`~.result.Result`); :mod:`.shared` runs the first half once
for several runners and the second per runner, on a copy.

Invariants: position ids are logical (``seq_len`` so far), never the cache length; a compression
happens only after a forward, so the token just written (``protected_tail = 1``) was read by its
own step and is kept; ``CacheView.classes`` covers every logical position (prompt tags + tracker).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Optional, Sequence, Union

import numpy as np
import torch

from sglang_pask.methods.base import AttentionStats, CacheView, KVMethod, window_size
from sglang_pask.methods.chunks import ChunkRule
from sglang_pask.methods.chunks import check_method as check_chunk_method
from sglang_pask.methods.segment import (
    SegmentRule,
    own_due,
    own_kept,
    own_method,
    own_slots,
    own_view,
    segment_kept,
)
from sglang_pask.methods.segment import check_method as check_segment_method

from .attention import use_pask_attention
from .cache import PrunableCache
from .result import Compression, Result, parse_tool_calls

PROTECTED_TAIL = 1


def default_groups(num_layers: int, max_groups: int = 6) -> list[list[int]]:
    """Consecutive layers split into ``min(L, max_groups)`` near-equal groups."""
    n = min(num_layers, max_groups)
    bounds = np.linspace(0, num_layers, n + 1).round().astype(int)
    return [list(range(bounds[g], bounds[g + 1])) for g in range(n)]


def make_kv_method(name: str, budget: Optional[float], policy=None, **options) -> KVMethod:
    """A registered method by name (the methods registry, imported on first use)."""
    from sglang_pask.methods import make_method

    return make_method(name, budget, policy=policy, **options)


class Runner:
    """Generate for OpenAI chat request bodies with one KV method at one budget.

    ``model``: a model directory (loaded in ``dtype``) or a loaded causal LM (then ``tokenizer``
    is required). ``policy``: a loaded policy, a policy file (checked against ``model``'s
    binding when ``model`` is a directory) or None. ``method``: a registry name (built with
    ``budget``, ``policy``, ``method_options``; ``pask`` takes its schedule and interval from the
    policy's operating point unless ``method_options`` set them) or a :class:`KVMethod` instance.
    ``groups``: layer groups (default: the policy's, else :func:`default_groups`). ``grammar``:
    ``xgrammar`` (xgrammar's built-in ``qwen_3`` tool-call tag, whitespace capped;
    :mod:`.constraints`) or ``sglang`` (the server's own constraint pipeline, for parity with
    ``make serve``; :mod:`.sglang_grammar`). ``dtype``/``device``: for a model loaded from a
    directory. ``segment_rule``: the shared-segment rule
    (:class:`~sglang_pask.policy.operating_point.SegmentRule`; None: the policy's operating point,
    else none): with ``segment="system"`` the system/tools message is prefilled and compressed on
    its own, the rest of the prompt prefilled against what it kept (``compressed``) or against the
    whole segment, which is cut to the same kept positions after (``full``), and the request
    compresses only its own tokens (:mod:`sglang_pask.methods.segment`; what a server with the
    radix cache on does). Not thread-safe: one generation at a time.
    """

    def __init__(self, model: Union[str, os.PathLike, torch.nn.Module], tokenizer=None,
                 method: Union[str, KVMethod] = "full", budget: Optional[float] = None, policy=None, *,
                 groups: Optional[Sequence[Sequence[int]]] = None, constrain: bool = True,
                 grammar: str = "xgrammar", dtype: torch.dtype = torch.float32, device: Optional[str] = None,
                 method_options: Optional[dict] = None, segment_rule: Optional[SegmentRule] = None,
                 chunk_rule: Optional[ChunkRule] = None):
        model_dir = str(model) if isinstance(model, (str, os.PathLike)) else None
        if model_dir is None and tokenizer is None:
            raise ValueError("a tokenizer is required with a loaded model")
        if isinstance(policy, (str, os.PathLike)):
            from sglang_pask.policy import load_policy

            policy = load_policy(policy, model_dir=model_dir)
        self.policy = policy
        if isinstance(method, KVMethod):  # the method first: a bad name fails before loading
            self.method = method
        else:
            self.method = make_kv_method(method, budget, policy=policy, **(method_options or {}))
        if segment_rule is None:
            point = getattr(policy, "point", None) if policy is not None else None
            segment_rule = point.segment if point is not None else SegmentRule()
        if not isinstance(segment_rule, SegmentRule):
            raise TypeError(f"segment_rule must be a SegmentRule, got {type(segment_rule).__name__}")
        if segment_rule.active:
            check_segment_method(self.method)
        self.segment_rule = segment_rule
        self.chunk_rule = chunk_rule if chunk_rule is not None else ChunkRule()
        if not isinstance(self.chunk_rule, ChunkRule):
            raise TypeError(f"chunk_rule must be a ChunkRule, got {type(chunk_rule).__name__}")
        if self.chunk_rule.active:
            check_chunk_method(self.method)
            if segment_rule.active:
                raise ValueError("the chunked prefill rule and a shared-segment rule do not combine (yet)")
        if grammar not in ("xgrammar", "sglang"):
            raise ValueError(f"grammar must be 'xgrammar' or 'sglang', got {grammar!r}")
        if model_dir is not None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_dir)
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
            if device is not None:
                model = model.to(device)
        self.model = model.eval()
        self.tokenizer = tokenizer
        #: the learned scorer (KVzap) a ``learned_heads`` method reads; None for the others
        self.scorer = None
        if self.method.needs_attention == "learned_heads":
            from .learned import resolve_scorer

            self.scorer, self.method = resolve_scorer(self.method, self.model, model_dir)
        use_pask_attention(self.model)
        self.num_layers = int(model.config.num_hidden_layers)
        self.budget = self.method.budget
        policy = policy if policy is not None else getattr(self.method, "policy", None)
        pol_groups = getattr(policy, "groups", None) if policy is not None else None
        self.groups = [list(g) for g in (groups or pol_groups or default_groups(self.num_layers))]
        if sorted(i for g in self.groups for i in g) != list(range(self.num_layers)):
            raise ValueError(f"groups {self.groups} must partition the model's {self.num_layers} layers")
        self.constrain = constrain
        self.grammar = grammar
        self.stop_ids = _stop_ids(model, tokenizer)
        self._constraints = None
        from sglang_pask.structure import make_prompt_tagger

        self.tagger = make_prompt_tagger(tokenizer)
        #: a :class:`~.memo.PrefillMemo` of prompt forwards (None: none), shared by the runners
        #: ``bind_runner`` makes from this one; never used under an active segment rule
        self.memo = None

    # -- pieces -------------------------------------------------------------------------------
    @property
    def constraints(self):
        if self._constraints is None:
            if self.grammar == "sglang":
                from .sglang_grammar import SGLangConstraints as Constraints
            else:
                from .constraints import Constraints

            self._constraints = Constraints(self.tokenizer, self.model.config.vocab_size, self.stop_ids)
        return self._constraints

    def cache_spec(self) -> tuple[Optional[str], int]:
        """What this runner's cache records during a forward: (attention-statistics kind, its
        size: the window for window kinds, the positions the query statistics skip for
        ``expected_heads``, else 0). Runners with equal specs get the same prompt forward."""
        kind = self.method.needs_attention
        if kind == "expected_heads":
            return kind, int(self.method.n_sink)
        if kind in ("kvzip_heads", "learned_heads"):  # learned_heads: the inputs, not the scores
            return kind, 0
        return kind, window_size(self.method) if kind in ("window", "window_heads") else 0

    def new_cache(self) -> PrunableCache:
        kind, size = self.cache_spec()
        if kind == "expected_heads":
            return PrunableCache(self.num_layers, stats=kind, query_skip=size, rotary=_rotary(self.model))
        return PrunableCache(self.num_layers, stats=kind, window_size=size)

    def forward(self, cache: PrunableCache, ids: Sequence[int], start: int, every: bool = False) -> torch.Tensor:
        """Run ``ids`` at logical positions ``start..``; returns the last position's float32 logits
        ``[V]`` (``every``: every position's, ``[len(ids), V]``)."""
        device = self.model.device
        if cache.stats == "kvzip_heads" and cache.reconstruct is None:  # KVzip repeats the context
            del cache.token_ids[start:]
            cache.token_ids.extend(int(t) for t in ids)
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=device)
        pos = torch.arange(start, start + len(ids), device=device)[None]
        if cache.stats == "learned_heads":  # the learned scorer reads each layer's attention input
            from .learned import capture_layer_inputs, record_inputs

            with capture_layer_inputs(self.model) as captured:
                out = self.model(input_ids=input_ids, position_ids=pos, cache=cache, pask_cache=cache,
                                 use_cache=True, logits_to_keep=0 if every else 1)
            record_inputs(cache, captured, start)
        else:
            out = self.model(input_ids=input_ids, position_ids=pos, cache=cache, pask_cache=cache,
                             use_cache=True, logits_to_keep=0 if every else 1)
        return (out.logits[0] if every else out.logits[0, -1]).float().cpu()  # masks and sampling run on CPU

    def compress(self, cache: PrunableCache, seq_len: int, classes: Sequence[int], prompt_len: int,
                 step: int, force: bool = False, segment_end: int = 0,
                 segment_slots: int = 0, pick=None) -> Optional[Compression]:
        """At decode step ``step`` (0: prefill end), apply the method if it is due (every
        method's schedule, when over budget) or ``force``; None if nothing ran. With
        ``segment_end = S > 0`` only positions ``>= S`` are compressed, as their own span
        (:func:`sglang_pask.methods.segment.own_view`; ``segment_slots``: what the segment kept,
        counted in the request's budget); ``kept`` is then what every layer holds after (segment
        positions included). ``pick(view, method)``: the method at this point's budget, from the
        view (None: nothing to compress) -- a chunk end of the chunked prefill rule, no segment."""
        heads = max(cache.num_kv_heads, 1)
        if segment_end:
            return self._compress_own(cache, seq_len, classes, prompt_len, step, force, segment_end,
                                      segment_slots)
        held_slots = cache.token_head_slots() // heads
        if pick is None and not force and not self.due(step, held_slots, seq_len):
            return None  # checked first: this runs every decode step, the view only when due
        retained = [cache.positions(li).cpu().numpy() for li in range(self.num_layers)]
        masks = [cache.head_mask(li) for li in range(self.num_layers)]
        masks = None if all(m is None for m in masks) else [
            None if m is None else m.cpu().numpy() for m in masks]
        view = CacheView(num_layers=self.num_layers, groups=self.groups, seq_len=seq_len,
                         classes=np.asarray(classes, dtype=np.int64), retained=retained,
                         protected_tail=PROTECTED_TAIL, attention=_stats(cache, retained, self),
                         prompt_len=prompt_len, head_mask=masks)
        method = self.method
        if pick is not None:
            method = pick(view, self.method)
            if method is None or not (force or method.due(step, held_slots, seq_len, self.num_layers)):
                return None
        allocation = [int(a) for a in method.allocation(view)]
        sel = method.select(view)
        return self._keep(cache, step, seq_len, allocation, sel.kept, retained, sel.head_mask)

    def _compress_own(self, cache, seq_len, classes, prompt_len, step, force, segment_end, segment_slots):
        """The own span ``[S, seq_len)`` alone, at :func:`~sglang_pask.methods.segment.own_slots`."""
        retained = [cache.positions(li).cpu().numpy() for li in range(self.num_layers)]
        view = own_view(self.num_layers, self.groups, seq_len, classes, retained, segment_end,
                        PROTECTED_TAIL, prompt_len, attention=_stats(cache, retained, self))
        slots = own_slots(self.method, self.num_layers, seq_len, segment_end, segment_slots,
                          self.segment_rule.own_budget)
        if not force and not own_due(self.method, step, view, slots):
            return None
        own = own_kept(self.method, view, segment_end, slots)
        kept_all = [np.concatenate([r[r < segment_end], k]) for r, k in zip(retained, own)]
        allocation = [int(a) for a in own_method(self.method, view, slots).allocation(view)]
        return self._keep(cache, step, seq_len, allocation, kept_all, retained, None)

    def segment_selection(self, cache: PrunableCache, classes: Sequence[int]) -> list[np.ndarray]:
        """Per layer, the positions of the shared segment ``[0, S)`` (``S = len(classes)``) that
        :func:`~sglang_pask.methods.segment.segment_kept` keeps; called when the segment's KV is
        just written and nothing after it (its statistics are the segment's alone)."""
        retained = [cache.positions(li).cpu().numpy() for li in range(self.num_layers)]
        return segment_kept(self.method, self.num_layers, self.groups, classes,
                            attention=_stats(cache, retained, self),
                            segment_budget=self.segment_rule.segment_budget)

    def cut_segment(self, cache: PrunableCache, kept: Sequence[np.ndarray], segment_end: int,
                    seq_len: int) -> Compression:
        """Drop the segment positions outside ``kept`` (per layer); positions ``>= segment_end``
        (``< seq_len``) stay."""
        retained = [cache.positions(li).cpu().numpy() for li in range(self.num_layers)]
        kept_all = [np.concatenate([np.asarray(k, np.int64), r[r >= segment_end]]) for k, r in zip(kept, retained)]
        # no protected tail: the segment's own view has none (its last token is not a current
        # step), so a policy may drop it like any other
        return self._keep(cache, 0, seq_len, [len(k) for k in kept], kept_all, retained, None, tail=0)

    def compress_segment(self, cache: PrunableCache, classes: Sequence[int]) -> Compression:
        """The shared segment ``[0, S)`` (``S = len(classes)``, its KV just written, nothing
        after it): keep what :func:`~sglang_pask.methods.segment.segment_kept` keeps."""
        return self.cut_segment(cache, self.segment_selection(cache, classes), len(classes), len(classes))

    def _keep(self, cache, step, seq_len, allocation, kept_sets, retained, head_mask,
              tail: int = PROTECTED_TAIL) -> Compression:
        dropped = []
        for li in range(self.num_layers):
            kept = np.asarray(kept_sets[li], dtype=np.int64)
            _check_kept(li, kept, retained[li], seq_len, tail)
            hm = None if head_mask is None else np.asarray(head_mask[li], dtype=bool)
            cache.keep(li, torch.from_numpy(kept), head_mask=None if hm is None else torch.from_numpy(hm))
            dropped.append(np.setdiff1d(retained[li], kept))
        return Compression(step, seq_len, allocation, [np.asarray(k, np.int64) for k in kept_sets], dropped,
                           head_mask=None if head_mask is None else
                           [np.asarray(m, dtype=bool) for m in head_mask])

    def prefill(self, cache: PrunableCache, tags) -> tuple[torch.Tensor, "Prefilled"]:
        """Prefill the rendered prompt ``tags`` (:func:`~sglang_pask.rendering.render_chat`) into
        ``cache`` under the segment rule, then compress at prefill end if due; returns the last
        position's logits. ``Runner.generate`` (in its two halves) and teacher forcing both run
        these two steps."""
        logits, pre = self.forward_prompt(cache, tags)
        return logits, self.compress_prefill_end(cache, tags, pre)

    def forward_prompt(self, cache: PrunableCache, tags) -> tuple[torch.Tensor, "Prefilled"]:
        """Write the rendered prompt ``tags`` into ``cache`` under the segment rule (the segment's
        own compression included), not yet the prefill-end compression (``compressions`` empty);
        returns the last position's logits."""
        prompt = list(tags.token_ids)
        classes = [int(c) for c in tags.classes]
        seg = tags.segment_end if self.segment_rule.active else 0
        segment, chunks = None, []
        if seg and self.segment_rule.segment_prefill == "full":  # the rest attends to the whole segment
            self.forward(cache, prompt[:seg], 0)
            kept = self.segment_selection(cache, classes[:seg])
            logits = self.forward(cache, prompt[seg:], seg)
            segment = self.cut_segment(cache, kept, seg, len(prompt))
        elif seg:  # the shared segment first, compressed alone; the rest attends to what it kept
            self.forward(cache, prompt[:seg], 0)
            segment = self.compress_segment(cache, classes[:seg])
            logits = self.forward(cache, prompt[seg:], seg)
        else:  # the chunked prefill rule (:mod:`sglang_pask.methods.chunks`): compressed at each chunk end
            prev, chunks = 0, []
            for e in self.chunk_rule.ends(len(prompt)):
                self.forward(cache, prompt[prev:e], prev)
                if (c := self.compress(cache, e, classes[:e], len(prompt), 0, pick=self.chunk_rule.method_for)):
                    chunks.append(c)
                prev = e
            logits = self.forward(cache, prompt[prev:], prev)
        seg_slots = sum(len(k) for k in segment.kept) if segment is not None else 0
        return logits, Prefilled(seg, segment, seg_slots, (), tuple(chunks))

    def compress_prefill_end(self, cache: PrunableCache, tags, pre: "Prefilled") -> "Prefilled":
        """After :meth:`forward_prompt`: compress at decode step 0 if due; ``pre`` with it."""
        P = len(tags.token_ids)
        c = self.compress(cache, P, [int(x) for x in tags.classes], P, 0, segment_end=pre.segment_end,
                          segment_slots=pre.segment_slots)
        return dataclasses.replace(pre, compressions=tuple(x for x in [c] if x))

    def due(self, step: int, held: int, seq_len: int) -> bool:
        """The method's rule (``KVMethod.due``)."""
        return self.method.due(step, held, seq_len, self.num_layers)

    # -- the loop: generate = forward_request, then decode ---------------------------------------
    @torch.inference_mode()
    def generate(self, request: dict, max_new_tokens: int = 128, *, record_logits: bool = False,
                 temperature: float = 0.0, seed: int = 0, keep_cache: bool = False,
                 ignore_stop: bool = False) -> Result:
        """Generate for one OpenAI chat request body. ``record_logits``: keep each step's raw
        logits; ``keep_cache``: attach the final :class:`PrunableCache` as ``result.cache``;
        ``ignore_stop``: never stop at a stop token (benchmarks; grammar ends still stop)."""
        return self.decode(self.forward_request(request), max_new_tokens, record_logits=record_logits,
                           temperature=temperature, seed=seed, keep_cache=keep_cache, ignore_stop=ignore_stop)

    def render(self, request: dict):
        """The request's prompt as the server renders it (:func:`~sglang_pask.rendering.render_chat`)."""
        from sglang_pask.rendering import render_chat

        return render_chat(self.tokenizer, request, tagger=self.tagger)

    @torch.inference_mode()
    def forward_request(self, request: dict, tags=None) -> "Prompted":
        """The first half of :meth:`generate`: render ``request`` (or take its rendering ``tags``)
        and write the prompt into a new cache under the segment rule (:meth:`forward_prompt`)."""
        t0 = time.perf_counter()
        tags = tags if tags is not None else self.render(request)
        memo = self.memo if not self.segment_rule.active and not self.chunk_rule.applies(len(tags.token_ids)) else None
        if memo is not None:
            key = memo.key(tags.token_ids, self.cache_spec())
            if (hit := memo.get(key)) is not None:  # a private copy of the same forward
                return dataclasses.replace(hit, request=request, tags=tags)
        cache = self.new_cache()
        logits, pre = self.forward_prompt(cache, tags)
        prompted = Prompted(request, tags, cache, logits, pre, time.perf_counter() - t0)
        if memo is not None:
            memo.put(key, prompted)
        return prompted

    @torch.inference_mode()
    def decode(self, prompted: "Prompted", max_new_tokens: int = 128, *, record_logits: bool = False,
               temperature: float = 0.0, seed: int = 0, keep_cache: bool = False,
               ignore_stop: bool = False) -> Result:
        """The second half of :meth:`generate` (same options): the grammar matcher (fresh), the
        prefill-end compression, the decode loop, the Result. Consumes ``prompted.cache``."""
        from sglang_pask.structure.token_bytes import token_bytes

        t0 = time.perf_counter()
        request, tags, cache, logits = prompted.request, prompted.tags, prompted.cache, prompted.logits
        prompt = list(tags.token_ids)
        prompt_classes = [int(c) for c in tags.classes]
        tracker = tags.tracker()
        matcher = self.constraints.matcher(request) if self.constrain else None
        gen = torch.Generator().manual_seed(seed) if temperature > 0 else None

        pre = self.compress_prefill_end(cache, tags, prompted.prefilled)
        seg, segment, seg_slots = pre.segment_end, pre.segment, pre.segment_slots
        seq_len = len(prompt)
        compressions = list(pre.chunks) + list(pre.compressions)  # chunk ends first (the chunked prefill rule)
        t_prefill = time.perf_counter()
        out: list[int] = []
        recorded = [] if record_logits else None
        finish, steps, t_compress = "length", 0, 0.0
        while len(out) < max_new_tokens:
            if record_logits:
                recorded.append(logits.clone())
            if matcher is not None:
                logits = matcher.mask_(logits.clone())
            tok = _pick(logits, temperature, gen)
            if matcher is not None and not matcher.accept(tok):
                raise RuntimeError(f"grammar rejected token {tok} it allowed")
            out.append(tok)
            if (tok in self.stop_ids and not ignore_stop) or (matcher is not None and matcher.terminated):
                finish = "stop"
                break
            tracker.feed(token_bytes(self.tokenizer, [tok])[0])
            if len(out) == max_new_tokens:
                break
            logits = self.forward(cache, [tok], seq_len)
            seq_len += 1
            steps += 1
            tc = time.perf_counter()
            c = self.compress(cache, seq_len, prompt_classes + list(tracker.classes), len(prompt), steps,
                              segment_end=seg, segment_slots=seg_slots)
            t_compress += time.perf_counter() - tc
            if c is not None:
                compressions.append(c)
        t_end = time.perf_counter()

        fed = out[:-1] if finish == "stop" and out[-1] in self.stop_ids else out
        text = self.tokenizer.decode(fed, skip_special_tokens=False)
        retained = [cache.positions(li).cpu().numpy() for li in range(self.num_layers)]
        return Result(
            text=text, tool_calls=parse_tool_calls(text),
            kept={str(g): retained[layers[0]].tolist() for g, layers in enumerate(self.groups)},
            tokens=len(out), token_ids=out, prompt_ids=prompt,
            classes=prompt_classes + list(tracker.classes), finish_reason=finish,
            groups=self.groups, retained=retained, compressions=compressions, logits=recorded,
            kv_bytes=cache.kv_bytes(), cache=cache if keep_cache else None,
            segment_end=seg, segment=segment,
            timings={"prefill_s": prompted.seconds + t_prefill - t0, "decode_s": t_end - t_prefill,
                     "decode_steps": max(len(out) - 1, 0), "compress_s": t_compress,
                     "forward_s": prompted.seconds, "prefill_shared": prompted.shared})


@dataclasses.dataclass(frozen=True)
class Prefilled:
    """What :meth:`Runner.prefill` did: where the shared segment ends (0: none), its compression
    (None: none), the slots it kept, and the prefill-end compression (empty: not due)."""

    segment_end: int
    segment: Optional[Compression]
    segment_slots: int
    compressions: tuple
    #: the compressions at chunk ends (:class:`~sglang_pask.methods.chunks.ChunkRule`; empty: whole prompt)
    chunks: tuple = ()


@dataclasses.dataclass(frozen=True)
class Prompted:
    """A request's prompt written into ``cache`` (:meth:`Runner.forward_request`): the segment rule
    applied, the prefill-end compression not yet. :meth:`Runner.decode` continues from it and
    consumes ``cache``; :meth:`copy` gives another runner of the same cache spec its own."""

    request: dict
    tags: object  # the rendered prompt (render_chat's TaggedPrompt)
    cache: PrunableCache
    logits: torch.Tensor  # float32 [vocab]: the last prompt position's
    prefilled: Prefilled  # the segment rule's part (compressions empty)
    seconds: float  # rendering + forward
    shared: bool = False  # a copy of a forward that other runners continue from too

    def copy(self) -> "Prompted":
        """A private copy (:meth:`PrunableCache.clone`), marked ``shared``."""
        return dataclasses.replace(self, cache=self.cache.clone(), logits=self.logits.clone(), shared=True)


def _pick(logits: torch.Tensor, temperature: float, gen) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))


def _stop_ids(model, tokenizer) -> list[int]:
    ids = set()
    for src in (getattr(model, "generation_config", None), model.config):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        ids.update([e] if isinstance(e, int) else (e or []))
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


def _rotary(model):
    """The model's rotary embedding module (``model.model.rotary_emb``: Llama, Qwen2, Qwen3)."""
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rotary is None:
        raise ValueError(f"{type(model).__name__} has no model.rotary_emb: Expected Attention needs RoPE")
    return rotary


def _stats(cache: PrunableCache, retained: list[np.ndarray], runner: "Runner") -> Optional[AttentionStats]:
    method = runner.method
    if cache.stats is None:
        return None
    if cache.stats == "expected_heads":
        from .expected import expected_heads

        return AttentionStats(expected_heads=expected_heads(cache, method))
    if cache.stats == "kvzip_heads":
        from .kvzip import kvzip_heads

        return AttentionStats(kvzip_heads=kvzip_heads(runner, cache))
    if cache.stats == "learned_heads":
        from .learned import learned_heads

        return AttentionStats(learned_heads=learned_heads(runner.scorer, cache, retained))
    if cache.stats == "window_heads":
        heads = []
        for lay, pos in zip(cache.layers, retained):
            t = lay.window_head_rows
            heads.append(np.zeros((cache.num_kv_heads, len(pos)), np.float32) if t is None
                         else t.sum(1).float().cpu().numpy())
        return AttentionStats(window=[h.sum(0) for h in heads], window_heads=heads,
                              window_size=cache.window_size)
    arrays = []
    for lay, pos in zip(cache.layers, retained):
        t = lay.accumulated if cache.stats == "accumulated" else (
            None if lay.window_rows is None else lay.window_rows.sum(0))
        arrays.append(np.zeros(len(pos), np.float32) if t is None else t.float().cpu().numpy())
    if cache.stats == "accumulated":
        return AttentionStats(accumulated=arrays)
    return AttentionStats(window=arrays, window_size=cache.window_size)


def _check_kept(layer: int, kept: np.ndarray, retained: np.ndarray, seq_len: int,
                tail: int = PROTECTED_TAIL) -> None:
    if len(kept) > 1 and not (np.diff(kept) > 0).all():
        raise RuntimeError(f"layer {layer}: the method returned unsorted or duplicate positions")
    if not np.isin(kept, retained).all():
        raise RuntimeError(f"layer {layer}: the method kept positions the layer does not hold")
    newest = retained[retained >= seq_len - tail] if tail else retained[:0]
    if not np.isin(newest, kept).all():
        raise RuntimeError(f"layer {layer}: the method dropped the current step's token")
