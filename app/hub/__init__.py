"""Hugging Face repos: list a repo's GGUFs, fetch a header-only copy to plan from, download to launch.

``refs`` parses what the user typed, ``remote`` lists a repo, ``preview`` fetches headers with HTTP
Range requests into sparse local copies, ``download`` fetches the weights. The endpoint is read from
HF_ENDPOINT at call time (tests point it at tests/fixtures/fake_hub.py).
"""
