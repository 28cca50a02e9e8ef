"""SGLang's own ``sglang.srt.models.qwen3``, re-exported (see the package docstring)."""

from sglang.srt.models.qwen3 import EntryClass

__all__ = ["EntryClass"]
