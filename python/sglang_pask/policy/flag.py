"""The server's ``--pask-policy`` and ``--pask-tag-log`` flags, judged in one place.

Two callers read them: the launcher (:mod:`sglang_pask.launch_server`, before SGLang is imported,
from the raw argv) and the plugin (:mod:`sglang_pask.srt.plugin`, inside SGLang's own argument
parsing, so ``python -m sglang.launch_server`` is refused too). Both call :func:`flag_error`, so a
refusal is the same line, byte for byte, and both exit with it (status 1). Light: no torch, no
SGLang (the policy schema pulls pydantic and numpy, about half a second).
"""

from __future__ import annotations

import json
import os

from sglang_pask.policy.document import PolicyError, load_policy

FLAG = "--pask-policy"
TAG_LOG_FLAG = "--pask-tag-log"


def flag_error(policy: str | None, model_dir: str | None = None, tag_log: str | None = None) -> str | None:
    """The one line (``error: ...``) refusing these flag values, or None. A policy must load and,
    with ``model_dir``, be bound to that model (:func:`~.document.load_policy`: envelope, schema,
    shape, fingerprint); a tag log needs a policy. An empty value counts as not given (as the
    plugin reads ``args.pask_policy``)."""
    if policy:
        try:
            load_policy(policy, model_dir=model_dir)
        except PolicyError as e:
            fits = fitting_policies(os.path.dirname(os.path.abspath(policy)), model_dir) \
                if model_dir and "model" in str(e) else []
            hint = f"; policies beside it for this model: {', '.join(fits)}" if fits else ""
            return f"error: {FLAG}: {e}{hint}"
    elif tag_log:
        return f"error: {TAG_LOG_FLAG} needs {FLAG}"
    return None


def fitting_policies(folder: str, model_dir: str, limit: int = 4) -> list[str]:
    """Up to ``limit`` policy files in ``folder`` bound to the model at ``model_dir`` (their
    ``model`` block's fingerprint equals the model's; read as JSON only), as the user would type
    them (relative to the working folder when inside it)."""
    from sglang_pask.policy.binding import BindingError, ModelBinding

    try:
        want = ModelBinding.from_model(model_dir).fingerprint
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except (BindingError, OSError):
        return []
    out = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and str(doc.get("format", "")).startswith("pask-policy/") \
                and (doc.get("model") or {}).get("fingerprint") == want:
            rel = os.path.relpath(path)
            out.append(path if rel.startswith("..") else rel)
            if len(out) == limit:
                break
    return out
