"""Attention over per-unit pools (torch and FlashInfer backends) and the statistics some methods
read: the observation window, per-head masks, KVzip's reconstruction scores, the learned scorer
(SGLang's ``srt/layers/attention``)."""
