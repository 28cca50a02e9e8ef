"""Model families: which SGLang tool-call parser a model folder needs.

One table decides it (``make serve`` asks it: ``python -m sglang_pask.model_families parser DIR``).
A family matches on the folder's ``config.json`` ``model_type`` and, where one model type covers
several tool-call formats, on a marker of the chat template; the first matching row wins, so the
more specific rows come first. Reads two JSON files and nothing else: no torch, no SGLang.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass


class UnknownFamily(ValueError):
    """The folder matches no family (or is not a model folder); the message is one line."""


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    parser: str  # an SGLang --tool-call-parser name
    marker: str = ""  # a string the chat template must contain ("" matches any)

    def matches(self, model_type: str, template: str) -> bool:
        return model_type in self.model_types and self.marker in template


FAMILIES = (
    # Qwen3-Coder writes XML calls (<function=name><parameter=...>) inside <tool_call>
    Family("qwen3-coder", ("qwen3", "qwen3_moe"), "qwen3_coder", "<function="),
    # Qwen3 (the project's tiny models too): <tool_call>{"name": ..., "arguments": ...}</tool_call>
    Family("qwen3", ("qwen3", "qwen3_moe"), "qwen", "<tool_call>"),
    # Qwen2.5 / Qwen2.5-Coder instruct: the same <tool_call> JSON. SGLang 0.5.23 deprecates the name
    # 'qwen25' (it maps it to 'qwen', the same Qwen25Detector), so the table names the current one
    Family("qwen2.5", ("qwen2", "qwen2_moe"), "qwen", "<tool_call>"),
    Family("llama3", ("llama",), "llama3", "<|python_tag|>"),
    Family("mistral", ("mistral",), "mistral", "[TOOL_CALLS]"),
)


def chat_template(model_dir: str) -> str:
    """The folder's chat template: ``chat_template.jinja`` if present, else tokenizer_config.json's."""
    path = os.path.join(model_dir, "chat_template.jinja")
    if os.path.isfile(path):
        with open(path) as f:
            return f.read()
    path = os.path.join(model_dir, "tokenizer_config.json")
    if not os.path.isfile(path):
        return ""
    with open(path) as f:
        template = json.load(f).get("chat_template") or ""
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        template = "\n".join(t.get("template", "") for t in template)
    return template


def family(model_dir: str) -> Family:
    config = os.path.join(model_dir, "config.json")
    if not os.path.isfile(config):
        from sglang_pask.paths import model_dir_error

        raise UnknownFamily(model_dir_error(model_dir, "MODEL") or f"{model_dir}: no config.json (not a model folder)")
    with open(config) as f:
        model_type = json.load(f).get("model_type", "")
    template = chat_template(model_dir)
    for fam in FAMILIES:
        if fam.matches(model_type, template):
            return fam
    raise UnknownFamily(f"{model_dir}: model_type {model_type!r} with this chat template matches no family in "
                        f"sglang_pask.model_families; pass the parser yourself (make serve TOOL_PARSER=...)")


def tool_call_parser(model_dir: str) -> str:
    return family(model_dir).parser


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("parser", "family"):
        print("usage: python -m sglang_pask.model_families {parser|family} MODEL_DIR", file=sys.stderr)
        return 2
    try:
        fam = family(argv[1])
    except UnknownFamily as e:
        print(f"model_families: error: {e}", file=sys.stderr)
        return 1
    print(fam.parser if argv[0] == "parser" else fam.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
