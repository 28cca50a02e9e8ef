"""The server's grammar in the reference runner: SGLang's own constraint pipeline, on CPU.

For parity with ``make serve`` (``--tool-call-parser qwen --constrained-json-disable-any-whitespace``)
the request goes through the same SGLang code the server runs: its ``ChatCompletionRequest``,
``FunctionCallParser(tools, "qwen").get_structure_constraint`` (the legacy qwen structural tag,
``<tool_call>\\n{"name":"NAME", "arguments":`` ... ``}\\n</tool_call>``, arguments constrained only
for strict tools), ``to_sampling_params``, and ``XGrammarGrammarBackend.dispatch_*``. So the
same request is constrained by the same grammar in both engines (whitespace rules included).
Same matcher interface as :class:`.constraints.Matcher`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

_KINDS = ("json_schema", "structural_tag", "ebnf", "regex")


class SGLangConstraints:
    """Per tokenizer: SGLang's xgrammar backend (with its compile cache)."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: Sequence[int], any_whitespace: bool = False):
        from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

        self.tokenizer = tokenizer
        self.vocab_size = int(vocab_size)
        self.backend = XGrammarGrammarBackend(tokenizer, self.vocab_size, model_eos_token_ids=list(stop_token_ids),
                                              any_whitespace=any_whitespace)

    def sampling_constraint(self, request: dict) -> Optional[tuple[str, str]]:
        """``(kind, key)`` as the server would put it in the sampling params, or None."""
        from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
        from sglang.srt.function_call.function_call_parser import FunctionCallParser

        req = ChatCompletionRequest.model_validate({"model": "default", **request})
        constraint = None
        if req.tools and req.tool_choice != "none":
            parser = FunctionCallParser(req.tools, "qwen", tokenizer=self.tokenizer)
            constraint = parser.get_structure_constraint(req.tool_choice, parallel_tool_calls=req.parallel_tool_calls)
        params = req.to_sampling_params(stop=[], model_generation_config={}, tool_call_constraint=constraint)
        return next(((k, params[k]) for k in _KINDS if params.get(k)), None)

    def matcher(self, request: dict) -> Optional["SGLangMatcher"]:
        spec = self.sampling_constraint(request)
        if spec is None:
            return None
        kind, key = spec
        dispatch = {"json_schema": self.backend.dispatch_json, "structural_tag": self.backend.dispatch_structural_tag,
                    "ebnf": self.backend.dispatch_ebnf, "regex": self.backend.dispatch_regex}[kind]
        grammar = dispatch(key)
        if not hasattr(grammar, "matcher"):  # SGLang's InvalidGrammarObject
            raise ValueError(f"invalid {kind} for this request: {getattr(grammar, 'error_message', grammar)}")
        return SGLangMatcher(grammar, self.vocab_size)


class SGLangMatcher:
    """One request's SGLang grammar object. ``mask_(logits)``: float ``[vocab]`` on CPU, in place."""

    def __init__(self, grammar, vocab_size: int):
        self.grammar = grammar
        self.bitmask = grammar.allocate_vocab_mask(vocab_size, 1, "cpu")

    def mask_(self, logits: torch.Tensor) -> torch.Tensor:
        self.grammar.fill_vocab_mask(self.bitmask, 0)
        self.grammar.apply_vocab_mask(logits.view(1, -1), self.bitmask)
        return logits

    def accept(self, token: int) -> bool:
        try:
            self.grammar.accept_token(int(token))
        except ValueError:
            return False
        return True

    @property
    def terminated(self) -> bool:
        return self.grammar.is_terminated()
