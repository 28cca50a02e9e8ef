"""Reading and writing policy files: the envelope, the schema, and the binding to a model.

Every failure is a :class:`PolicyError` whose message is one line naming the file and the problem,
so a server refusing to start says exactly why. Checks run in order: envelope
(:func:`load_policy_document`: exists, JSON object, known ``"format"``), schema
(:class:`~.schema.Policy`), binding (shape, then config fingerprint, against ``model_dir``).
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

from sglang_pask.environ import envs
from sglang_pask.policy.envelope import FORMAT, OLD_FORMATS, SUPPORTED_FORMATS
from sglang_pask.policy.residual import LEGACY

if TYPE_CHECKING:
    from sglang_pask.policy.schema import Policy


class PolicyError(ValueError):
    """A policy file is missing, unreadable, not JSON, or not a supported policy document."""


logger = logging.getLogger("sglang_pask")


def _warn_old_file(path: str, doc: dict, policy: "Policy") -> None:
    """One line for a file written by an older release (an old format, the old residual fields)."""
    notes = []
    if policy.format in OLD_FORMATS:
        notes.append(f"has format {policy.format!r} (no operating point): it runs at the engines' defaults "
                     "(schedule continuous, interval 1, segment none) unless flags say otherwise; `pask policy "
                     "upgrade FILE --schedule ...` records how it was calibrated")
    if any(k in doc for k in LEGACY.values()):
        block = None if policy.residual is None else policy.residual.model_dump()
        notes.append("spells its residual scorer with the old top-level fields (attention_blend, attention_stat, "
                     f"head_split, residual_split): read as \"residual\": {json.dumps(block)} (same policy hash)")
    key = os.path.abspath(path)
    warned = (envs.SGLANG_PASK_OLD_POLICY_WARNED.get() or "").split(os.pathsep)
    if not notes or key in warned:
        return
    envs.SGLANG_PASK_OLD_POLICY_WARNED.set(os.pathsep.join([w for w in warned if w] + [key]))
    logger.warning("sglang_pask: policy file %r %s", path, "; and ".join(notes))


def load_policy_document(path: str | os.PathLike) -> dict[str, Any]:
    """Read ``path`` and return the parsed document. Raises :class:`PolicyError` (one line)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise PolicyError(f"policy file {path!r} does not exist")
    if os.path.isdir(path):
        raise PolicyError(f"policy file {path!r} is a directory, not a JSON file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyError(f"policy file {path!r} cannot be read: {e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PolicyError(
            f"policy file {path!r} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    if not isinstance(doc, dict):
        raise PolicyError(f"policy file {path!r} must hold a JSON object, got {type(doc).__name__}")
    fmt = doc.get("format")
    if fmt is None:
        raise PolicyError(f"policy file {path!r} has no \"format\" field (expected {FORMAT!r})")
    if fmt not in SUPPORTED_FORMATS:
        raise PolicyError(
            f"policy file {path!r} has unknown format {fmt!r} (supported: {', '.join(SUPPORTED_FORMATS)})"
        )
    return doc


def load_policy(path: str | os.PathLike, model_dir: str | os.PathLike | None = None) -> "Policy":
    """Read and validate a policy; with ``model_dir``, also check it is bound to that model (its
    shape, then its config fingerprint). Raises :class:`PolicyError` (one line)."""
    from pydantic import ValidationError

    from sglang_pask.policy.schema import Policy, describe

    path = os.fspath(path)
    doc = load_policy_document(path)
    if doc.get("format") not in OLD_FORMATS and "operating_point" not in doc:
        raise PolicyError(f"policy file {path!r}: operating_point: missing required key (format "
                          f"{doc.get('format')!r} records how the policy must be run)")
    try:
        policy = Policy.model_validate(doc)
    except ValidationError as e:
        raise PolicyError(f"policy file {path!r}: {describe(e)}") from None
    # the folder as the path was given (relative stays relative, as the policy's own path): a record
    # names the scorer the same on every machine that runs from the repository
    policy._origin = os.path.dirname(os.fspath(path))
    if policy.scorer_path:
        check_scorer_pin(policy, what=f"policy file {path!r}")
    if model_dir is not None:
        check_binding(policy, model_dir, what=f"policy file {path!r}")
    _warn_old_file(path, doc, policy)
    return policy


def check_scorer_pin(policy: "Policy", what: str = "policy") -> None:
    """Raise :class:`PolicyError` unless the learned scorer the policy's residual pins is a file
    whose bytes have the pinned sha256, fitted for the policy's model (its header's binding; the
    engines check it again against the served model when they load it)."""
    path = policy.scorer_path
    try:
        have = _sha256(path)
    except OSError as e:
        raise PolicyError(f"{what}: its learned scorer {policy.residual.scorer!r} cannot be read "
                          f"({e.strerror or e}; it must lie beside the policy file)") from None
    if have != policy.residual.scorer_sha256:
        raise PolicyError(f"{what}: its learned scorer {path!r} has sha256 {have}, the policy pins "
                          f"{policy.residual.scorer_sha256}")
    # the scorer's own binding (its header, read as data) against the policy's model
    from sglang_pask.policy.binding import ModelBinding

    try:
        from safetensors import safe_open

        with safe_open(path, framework="np") as f:
            fitted = ModelBinding.model_validate(json.loads((f.metadata() or {})["pask_scorer"])["model"])
    except Exception as e:  # noqa: BLE001 -- any unreadable header is one line
        raise PolicyError(f"{what}: its learned scorer {path!r} has no readable model binding "
                          f"({type(e).__name__}: {e})") from None
    want = policy.model
    if fitted.shape() != want.shape() or fitted.fingerprint != want.fingerprint:
        raise PolicyError(f"{what} is for model {want.fingerprint} ({want.shape()}), but its learned scorer "
                          f"{path!r} was fitted for model {fitted.fingerprint} ({fitted.shape()})")


def check_binding(policy: "Policy", model_dir: str | os.PathLike, what: str = "policy") -> None:
    """Raise :class:`PolicyError` unless ``policy`` is bound to the model at ``model_dir``."""
    from sglang_pask.policy.binding import BindingError, ModelBinding

    model_dir = os.fspath(model_dir)
    try:
        have = ModelBinding.from_model(model_dir)
    except BindingError as e:
        raise PolicyError(f"{what}: cannot check its model binding: {e}") from None
    want = policy.model
    if (want.num_layers, want.num_kv_heads, want.head_dim, want.vocab_size) != (
        have.num_layers, have.num_kv_heads, have.head_dim, have.vocab_size
    ):
        raise PolicyError(f"{what} is for a model of shape {want.shape()}, but model {model_dir!r} "
                          f"has shape {have.shape()}")
    if want.fingerprint != have.fingerprint:
        raise PolicyError(f"{what} is for config fingerprint {want.fingerprint}, but model "
                          f"{model_dir!r} has {have.fingerprint} (same shape {have.shape()}, "
                          "other architecture fields)")


def save_policy(policy: "Policy", path: str | os.PathLike) -> None:
    """Write ``policy`` as indented JSON (stable key order: the schema's field order; a list of
    scalars on one line). A policy whose residual pins a learned scorer gets the scorer file beside
    it (copied from where the policy found it, unless the same bytes are already there): the file
    names it, not its path."""
    text = _dumps(policy.document()) + "\n"
    if policy.scorer_path:
        import shutil

        check_scorer_pin(policy, what=f"policy {policy.name!r}")
        dest = os.path.join(os.path.dirname(os.path.abspath(path)), policy.residual.scorer)
        if os.path.abspath(dest) != os.path.abspath(policy.scorer_path):
            if os.path.exists(dest) and _sha256(dest) != policy.residual.scorer_sha256:
                raise PolicyError(f"cannot write {os.fspath(path)!r}: {dest!r} holds another scorer "
                                  f"(sha256 {_sha256(dest)}, the policy pins {policy.residual.scorer_sha256})")
            if not os.path.exists(dest):
                shutil.copyfile(policy.scorer_path, dest)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _sha256(path: str) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _dumps(v: Any, indent: str = "") -> str:
    inner = indent + "  "
    if isinstance(v, dict) and v:
        if all(not isinstance(x, (dict, list)) for x in v.values()) and len(v) <= 8:
            return json.dumps(v)
        items = ",\n".join(f"{inner}{json.dumps(k)}: {_dumps(x, inner)}" for k, x in v.items())
        return "{\n" + items + "\n" + indent + "}"
    if isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v):
        return "[\n" + ",\n".join(inner + _dumps(x, inner) for x in v) + "\n" + indent + "]"
    return json.dumps(v)
