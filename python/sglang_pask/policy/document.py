"""Reading a policy document and checking its envelope.

Every failure is a :class:`PolicyError` whose message is one line naming the file and the problem,
so a server refusing to start says exactly why.
"""

from __future__ import annotations

import json
import os
from typing import Any

#: The only policy format this release understands.
FORMAT = "pask-policy/1"
SUPPORTED_FORMATS = (FORMAT,)


class PolicyError(ValueError):
    """A policy file is missing, unreadable, not JSON, or not a supported policy document."""


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
