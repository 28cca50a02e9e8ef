"""Training a byte-level BPE tokenizer with Qwen3's special tokens, saved as a HF fast tokenizer.

Layout of the vocabulary (ids): BPE merges first (including the 256 byte symbols), then the
special tokens, then the added non-special tags. ``<tool_call>`` and friends are *not* special,
so detokenization keeps them in the text and SGLang's ``qwen`` tool parser can see them.
"""

from __future__ import annotations

from importlib import resources
from typing import Iterable

#: Special tokens (skipped when decoding with skip_special_tokens=True).
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Added non-special tags (kept in decoded text, as in Qwen3).
TAG_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)


#: Short tools header/footer of the compact template variant (tools still one JSON per line).
COMPACT_HEADER = "# Tools\n<tools>"
COMPACT_FOOTER = "\n</tools><|im_end|>\n"


def chat_template(compact: bool = False) -> str:
    """The Qwen3-style tools chat template shipped with the package; ``compact`` replaces Qwen3's
    tool-use instructions with a two-line header (same tool and call formats)."""
    text = resources.files("sglang_pask.tiny").joinpath("qwen3_tools.jinja").read_text()
    if compact:
        lines = text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            if line.startswith("{%- set tools_header = "):
                lines[i] = "{%- set tools_header = " + _jinja_str(COMPACT_HEADER) + " %}\n"
            elif line.startswith("{%- set tools_footer = "):
                lines[i] = "{%- set tools_footer = " + _jinja_str(COMPACT_FOOTER) + " %}\n"
        text = "".join(lines)
    return text


def _jinja_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def train_tokenizer(texts: Iterable[str], vocab_size: int, compact_template: bool = False):
    """Train a byte-level BPE whose total size (with special and tag tokens) is at most
    ``vocab_size``; return a ``transformers.PreTrainedTokenizerFast`` with the chat template set."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    n_added = len(SPECIAL_TOKENS) + len(TAG_TOKENS)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_added,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    fast.chat_template = chat_template(compact_template)
    assert len(fast) <= vocab_size, (len(fast), vocab_size)
    return fast
