"""The fake Hub (tests/fixtures/fake_hub.py) for these tests."""

from tests.fixtures.fake_hub import fake_hub  # noqa: F401
