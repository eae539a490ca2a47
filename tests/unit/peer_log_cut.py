"""The readiness of migrate.experiment.peering.Peers on real peer logs written where a run's
peers write them: first cut at a moment some session was still down, then whole."""

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from migrate.experiment.peering import PeeringError, Peers, SessionsUp


def cut_then_whole(
    peers: Peers,
    run_dir: Path,
    texts: Mapping[str, str],
    stamp_ns: Callable[[str], int],
    cut_at: int,
    not_up: str,
) -> SessionsUp | None:
    """Peers.sessions_up on the logs ``texts`` (peer -> log) after checking it on them cut at ``cut_at``."""
    for r, t in texts.items():
        kept = [ln for ln in t.splitlines() if not ln[:1].isdigit() or stamp_ns(ln) <= cut_at]
        (run_dir / f"peer-{r}.log").write_text("\n".join(kept) + "\n")
    assert peers.sessions_up() is None
    with pytest.raises(PeeringError, match=not_up):
        peers.wait_sessions_up(0.0, "the pause")
    for r, t in texts.items():
        (run_dir / f"peer-{r}.log").write_text(t)
    return peers.sessions_up()
