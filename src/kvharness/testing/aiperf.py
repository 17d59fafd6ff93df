"""A tokenizer directory as NVIDIA AIPerf can load it offline, for tests and benchmarks.

Offline, AIPerf's tokenizer looks names up in the Hugging Face Hub cache only and refuses a
path; its prompt-decoding workers always run offline, so a bare directory cannot serve. Here the
directory becomes the snapshot of a Hub repo in a cache folder; AIPerf is then run with
``HF_HUB_OFFLINE=1`` and ``HF_HUB_CACHE`` set to that folder and ``--tokenizer`` the repo's name.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["HUB_REPO", "hub_cache"]

HUB_REPO = "local/tokenizer"


def hub_cache(tokenizer_dir: Path, hub: Path) -> str:
    """Make ``tokenizer_dir`` the snapshot of the repo :data:`HUB_REPO` in the Hub cache at
    ``hub`` (created as needed; a second call leaves it as it is); returns the repo's name."""
    repo = hub / ("models--" + HUB_REPO.replace("/", "--"))
    commit = "0" * 40
    snapshot = repo / "snapshots" / commit
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    if not snapshot.exists():
        snapshot.symlink_to(Path(tokenizer_dir).resolve(), target_is_directory=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return HUB_REPO
