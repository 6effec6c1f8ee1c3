"""Turn facts are routed by meaning when the run can embed, as inbox sources are: a thread
that paraphrases a bundle without its scope's words is filed there, not left unrouted."""

from __future__ import annotations

from pathlib import Path

import pytest

from memdir.files.store import Store
from memdir.service import Memory

SWARM = [
    (
        "A cloud of them left the left box at noon, what now?",
        "Shake the cluster into a spare brood box at dusk and they will usually stay.",
    ),
    (
        "They settled on the apple tree.",
        "Let's take a sheet and the spare box out tonight; add space earlier next spring.",
    ),
]


def _fold(tmp_path: Path, enabled: bool) -> dict[str, object]:
    mem = Memory.open(
        Store.init(tmp_path / f"store-{enabled}"), overrides={"embeddings": {"enabled": enabled}}
    )
    try:
        mem.bundle_add("bees", "Keeping honey bees in the two hives at the bottom of the garden")
        mem.bundle_add("bike", "Maintaining my road bicycle")
        parent: list[str] = []
        for question, answer in SWARM:
            turn = mem.record_turn(thread="swarm", input=question, output=answer, parents=parent)
            parent = [turn.id]
        result = mem.consolidate(turns=True)
        return dict(result["turns"])
    finally:
        mem.close()


@pytest.mark.parametrize("enabled", [True, False])
def test_a_paraphrasing_thread_is_filed_by_meaning_only(tmp_path: Path, enabled: bool) -> None:
    turns = _fold(tmp_path, enabled)
    articles = list(turns["articles"])  # type: ignore[call-overload]
    if enabled:
        assert [a.split("/")[1] for a in articles] == ["bees"], turns
    else:
        # By scope words the thread fits nothing: it shares none with either scope.
        assert articles == [] and turns["unrouted"], turns
