"""KV memory: per-unit pools behind the full index space, the PASK radix cache, its tags and the
views of whole shared segments (SGLang's ``srt/mem_cache``)."""
