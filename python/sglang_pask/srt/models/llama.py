"""SGLang's own ``sglang.srt.models.llama``, re-exported (see the package docstring)."""

from sglang.srt.models.llama import EntryClass

__all__ = ["EntryClass"]
