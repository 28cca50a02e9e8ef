"""What each of a policy's layer groups holds, measured: the ``pools`` block the server sizes its
per-group KV pools by (``pask policy pools``; the calibration's last stage).

A group's pool holds one slot per position for all of the group's KV heads. Under the lookup's
floors and residual shares, a ranking across groups or per-KV-head sets, groups hold different
shares of a request's positions, so pools of equal size (b x N slots each) fill one group's pool
first and the others stay part empty. Measured on calib entries run at the policy's operating
point, ``share[g]`` is the prompt positions group ``g`` holds at the end of each entry (the union
over its KV heads; per layer, averaged over the group's layers) summed, over the entries' prompt
tokens summed: what the policy does to a prompt, token-weighted as the pools see it (its mean over
layers is about the budget). Output tokens are left out: under the ``prefill`` schedule every group
holds them alike, so they would only dilute the differences, by how long the calib entries' outputs
are; the block records the entries' mean prompt and output tokens beside the shares. The server
splits the same total KV bytes so that every group's pool fills at the same count of running
requests, with one prompt's room in each for the next prefill
(:func:`~sglang_pask.srt.mem_cache.pools.unit_sizes_for`): measure on prompts like the ones served
(``:distractors=N`` makes calib entries into tool catalogs)."""

from __future__ import annotations

from typing import Sequence

from sglang_pask.eval.harness import Settings
from sglang_pask.policy.schema import Policy, PoolsModel


def pool_share(records: Sequence[dict], groups: Sequence[Sequence[int]]) -> dict:
    """``{"share": per group, "prompt_tokens", "output_tokens": means per entry, "entries"}`` from
    ``records`` of the reference runner (their ``meta.held_prompt`` / ``prompt_tokens`` /
    ``completion_tokens``: :class:`~sglang_pask.eval.hf_backend.HFBackend`); entries that did not
    run (no ``held_prompt``) are skipped. ValueError if none ran."""
    held = [0.0] * len(groups)
    positions, outputs, n = 0, 0, 0
    for r in records:
        meta = r.get("meta") or {}
        if "held_prompt" not in meta:
            continue
        n += 1
        positions += int(meta["prompt_tokens"])
        outputs += int(meta.get("completion_tokens") or 0)
        for g, layers in enumerate(groups):
            held[g] += sum(meta["held_prompt"][layer] for layer in layers) / len(layers)
    if not n or positions <= 0:
        raise ValueError("no entry ran, so nothing measured what the groups hold")
    return {"share": [round(h / positions, 6) for h in held], "prompt_tokens": round(positions / n, 1),
            "output_tokens": round(outputs / n, 1), "entries": n}


def measure_pools(runner, policy: Policy, entries, settings: Settings, data: str) -> PoolsModel:
    """Run ``policy`` on ``entries`` (the reference runner, at its own budget and operating point)
    and return its ``pools`` block (``data``: the spec the entries came from, recorded)."""
    from sglang_pask.eval.api import score

    # schedule, interval and segment rule: the policy's operating point (score's default for pask)
    records = score(runner, "pask", entries, budget=policy.budget, policy=policy, settings=settings)
    return PoolsModel(**pool_share(records, policy.groups), data=data, max_tokens=settings.max_tokens)


def with_pools(policy: Policy, pools: PoolsModel) -> Policy:
    """``policy`` carrying ``pools`` (checked as a whole: :class:`~sglang_pask.policy.schema.Policy`)."""
    doc = policy.document()
    doc["pools"] = pools.model_dump(mode="json")
    out = Policy.model_validate(doc)
    out._origin = policy._origin
    return out
