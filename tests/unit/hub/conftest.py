"""The fake Hub (tests/fixtures/fake_hub.py) for these tests, and an empty Hugging Face cache for each."""

import pytest

from tests.fixtures.fake_hub import fake_hub, hf_cache  # noqa: F401


@pytest.fixture(autouse=True)
def _own_cache(hf_cache):  # noqa: F811  (no test here reads or writes the user's cache)
    return hf_cache
