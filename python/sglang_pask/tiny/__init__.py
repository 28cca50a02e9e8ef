"""Tiny Qwen3 models the project builds (random plumbing model) and trains (pask-tiny-fc)."""
