"""The server's ``--pask-policy`` and ``--pask-tag-log`` flags, judged in one place.

Two callers read them: the launcher (:mod:`sglang_pask.launch_server`, before SGLang is imported,
from the raw argv) and the plugin (:mod:`sglang_pask.srt.plugin`, inside SGLang's own argument
parsing, so ``python -m sglang.launch_server`` is refused too). Both call :func:`flag_error`, so a
refusal is the same line, byte for byte, and both exit with it (status 1). Light: no torch, no
SGLang (the policy schema pulls pydantic and numpy, about half a second).
"""

from __future__ import annotations

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
            return f"error: {FLAG}: {e}"
    elif tag_log:
        return f"error: {TAG_LOG_FLAG} needs {FLAG}"
    return None
