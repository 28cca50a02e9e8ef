"""The SGLang plugin (the product path). Entry point: :func:`sglang_pask.srt.plugin.register`."""
