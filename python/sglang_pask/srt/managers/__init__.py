"""The scheduler's side: request tags, admission and prefill rules, compression at the eviction
point, prompt limits and the tag log (SGLang's ``srt/managers``)."""
