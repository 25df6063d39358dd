"""The standard Hugging Face cache: where downloads go, and where llama.cpp's ``-hf`` (its
common/hf-cache.cpp), ``hf download`` and every huggingface_hub user find them.

``<cache>/models--owner--name/blobs/<etag>`` holds a file's bytes, ``snapshots/<commit>/<path>`` links
to it, ``refs/<branch>`` names a commit; an interrupted download is ``blobs/<etag>.incomplete`` (what
``hf cache`` lists and prunes).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: A blob named by its sha256 (an LFS file); other blobs are named by their git id.
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def hub_cache() -> Path:
    """huggingface_hub's own cache folder: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def cached_file(repo: str, commit: str, path: str, size: int) -> Path | None:
    """The cache's complete copy of ``path`` at ``commit`` (its listed size), whoever downloaded it; no network."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, path, cache_dir=hub_cache(), revision=commit)
    if not isinstance(found, str):
        return None
    try:
        return Path(found) if os.path.getsize(found) == size else None
    except OSError:
        return None


def blobs(repo: str) -> Path:
    """Where the cache keeps ``repo``'s files, each named by its etag (the Hub's HEAD answer)."""
    from huggingface_hub.file_download import repo_folder_name

    return hub_cache() / repo_folder_name(repo_id=repo, repo_type="model") / "blobs"


def unverified(path: Path) -> bool:
    """True for a file in the cache whose blob is not named by a sha256: nobody could check its bytes
    against the Hub's, only its size."""
    target = path.resolve()
    return target.parent.name == "blobs" and target.is_relative_to(hub_cache().resolve()) \
        and not SHA256.match(target.name)
