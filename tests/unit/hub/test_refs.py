"""What the user may type for a Hugging Face model, and what is refused with the accepted forms."""

from __future__ import annotations

import pytest

from app.hub.errors import HubError
from app.hub.refs import HubRef, is_hub_ref, parse_ref

ACCEPTED = {
    "hf:bartowski/Qwen2.5-14B-Instruct-1M-GGUF": HubRef("bartowski/Qwen2.5-14B-Instruct-1M-GGUF"),
    "hf:owner/name:q4_k_m": HubRef("owner/name", quant="Q4_K_M"),
    "hf:owner/name:Q8_0@v1.0": HubRef("owner/name", "v1.0", quant="Q8_0"),
    "hf:owner/name@3f5c20cae69f": HubRef("owner/name", "3f5c20cae69f"),
    "hf:owner/name/sub/model-Q4_K_M.gguf": HubRef("owner/name", path="sub/model-Q4_K_M.gguf"),
    "hf:owner/name/model.gguf@dev": HubRef("owner/name", "dev", path="model.gguf"),
    "owner/name": HubRef("owner/name"),
    "owner/name:IQ2_XXS": HubRef("owner/name", quant="IQ2_XXS"),
    "https://huggingface.co/owner/name": HubRef("owner/name"),
    "https://huggingface.co/owner/name/": HubRef("owner/name"),
    "https://huggingface.co/owner/name/blob/main/model-Q8_0.gguf": HubRef("owner/name", path="model-Q8_0.gguf"),
    "https://huggingface.co/owner/name/resolve/abc123/dir/m.gguf?download=true":
        HubRef("owner/name", "abc123", "dir/m.gguf"),
    "https://huggingface.co/owner/name/tree/dev": HubRef("owner/name", "dev"),
    "huggingface.co/owner/name": HubRef("owner/name"),
    "https://www.huggingface.co/owner/name": HubRef("owner/name"),
    "hf.co/owner/name/blob/main/m.gguf": HubRef("owner/name", path="m.gguf"),
    "  hf:owner/my.model_v2-GGUF  ": HubRef("owner/my.model_v2-GGUF"),
}

REJECTED = [
    "", "hf:", "hf:owner", "owner", "hf:owner/", "hf:/name", "hf:owner/name/README.md", "hf:owner/name/a/../b.gguf",
    "hf:own er/name", "hf:owner/na--me", "hf:owner/name:", "hf:owner/name:Q4-K", "hf:owner/name@",
    "hf:-owner/name", "https://huggingface.co/owner", "https://huggingface.co/owner/name/discussions",
    "hf:owner/name@dev branch",
]


@pytest.mark.parametrize("text", list(ACCEPTED))
def test_parse_ref_accepts(text: str) -> None:
    assert parse_ref(text) == ACCEPTED[text]


@pytest.mark.parametrize("text", REJECTED)
def test_parse_ref_rejects_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(HubError) as err:
        parse_ref(text)
    assert "not a Hugging Face repo reference" in err.value.message
    assert "hf:owner/name:Q4_K_M" in err.value.hint


def test_only_prefixed_refs_and_links_are_hub_refs() -> None:
    # a bare owner/name may be a local path, so the CLI needs the hf: prefix or a link
    assert is_hub_ref("hf:owner/name") and is_hub_ref("https://huggingface.co/o/n") and is_hub_ref("hf.co/o/n")
    assert not is_hub_ref("owner/name") and not is_hub_ref("models/tiny.gguf") and not is_hub_ref("/tmp/hf.gguf")
    assert not is_hub_ref("https://example.com/o/n")


def test_a_ref_prints_back_as_it_parses() -> None:
    for text in ("hf:owner/name", "hf:owner/name:Q4_K_M", "hf:owner/name/m.gguf@dev"):
        assert str(parse_ref(text)) == text
