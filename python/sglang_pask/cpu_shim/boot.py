"""Imported at interpreter start by the ``.pth`` file that ``make install`` writes into the venv.

It must never break an interpreter: any failure becomes one warning line on stderr.
"""

try:
    from sglang_pask.cpu_shim import activate as _activate

    _activate()
except Exception as _exc:  # pragma: no cover - start-up must survive anything
    import sys as _sys

    print(f"sglang_pask: CPU shim not active: {_exc!r}", file=_sys.stderr)
