"""SGLang's own ``sglang.srt.models.qwen2``, re-exported (see the package docstring)."""

from sglang.srt.models.qwen2 import EntryClass

__all__ = ["EntryClass"]
