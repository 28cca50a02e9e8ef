"""sglang_pask: parser-aware, structure-conditioned KV persistence for structured generation."""

__version__ = "0.1.0"
