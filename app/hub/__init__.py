"""Hugging Face repos: list a repo's GGUFs, fetch a header-only copy to plan from, download to launch.

Everything goes through huggingface_hub's public API. ``refs`` parses what the user typed, ``remote``
lists a repo (HfApi; offline, the Hugging Face cache), ``preview`` reads headers into sparse local copies
(HfFileSystem), ``download`` fetches the weights into the Hugging Face cache, ``cache`` says what that
cache already holds. The endpoint is read from HF_ENDPOINT at call time (tests point it at
tests/fixtures/fake_hub.py).
"""
