"""Every entry of BFCL's 8 AST categories tags without exception (needs bfcl-eval installed).

Run with ``-s`` to see the per-category counts of function-name and parameter-name tokens.
"""

import bfcl_check
import pytest
from sglang_pask.structure import make_prompt_tagger
from sglang_pask.structure.testing import tiny_tokenizer

_REASON = bfcl_check.available()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple",
              "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")


@pytest.fixture(scope="module")
def tagger():
    return make_prompt_tagger(tiny_tokenizer())


@pytest.mark.parametrize("category", CATEGORIES)
def test_bfcl_category_tags(tagger, category):
    c = bfcl_check.tag_category(tagger, category)
    print(f"\n{category}: {c}")
    assert c["entries"] > 0
    assert c["tools_not_found"] == 0
    assert c["tool_name_tokens"] >= c["tools"]  # every tool's name has >= 1 token
    assert c["param_name_tokens"] > 0
