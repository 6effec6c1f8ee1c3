"""The LoCoMo benchmark's loader and scorer on a tiny hand-built fixture."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "locomo.py"


@pytest.fixture(scope="module")
def locomo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_locomo", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_locomo"] = module
    spec.loader.exec_module(module)
    return module


def _fixture(tmp_path: Path) -> tuple[Path, Path]:
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice!", "blip_caption": "a cat"},
            ],
            "session_2_date_time": "10:00 am on 9 June, 2023",
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "The cat is called Tom."},
                {"speaker": "Bo", "dia_id": "D2:2", "text": "I run marathons."},
            ],
        },
        "qa": [
            {"question": "What pet?", "answer": "cat", "evidence": ["D1:1"], "category": 4},
            {"question": "Cat name?", "answer": "Tom", "evidence": ["D1:1; D2:1"], "category": 1},
            {"question": "Trick?", "adversarial_answer": "x", "evidence": [], "category": 5},
            {"question": "Sport?", "answer": "running", "evidence": ["D9:9"], "category": 2},
        ],
    }
    data = tmp_path / "mini.json"
    data.write_text(json.dumps([sample]), encoding="utf-8")
    audit = tmp_path / "audit.json"
    audit.write_text(
        json.dumps([{"question_id": "locomo_0_qa3", "correct_evidence": ["D2:2"]}]),
        encoding="utf-8",
    )
    return data, audit


def test_load_reads_turns_questions_and_audit(locomo: ModuleType, tmp_path: Path) -> None:
    data, audit = _fixture(tmp_path)
    (conv,) = locomo.load(data)
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    assert conv.turns[1].text == "Nice! [shares an image: a cat]"
    assert conv.turns[2].session == 2 and conv.turns[2].when.month == 6
    # Category 5 is skipped; evidence pointing at no turn is dropped with its question.
    assert [(q.qid, q.evidence) for q in conv.questions] == [
        ("locomo_0_qa0", ["D1:1"]),
        ("locomo_0_qa1", ["D1:1", "D2:1"]),
    ]
    assert conv.dropped_evidence == 1
    (fixed,) = locomo.load(data, audit)
    assert [q.evidence for q in fixed.questions][-1] == ["D2:2"]


def test_scores_match_hand_computation(locomo: ModuleType) -> None:
    results = [
        # q1: evidence D1:1 at rank 2 -> turn any@1 0, any@3 1; sessions S2, S1 -> S1 at rank 2.
        locomo.Result(["D2:1", "D1:1", "D1:2"], ["D1:1"], 10.0, {5: 7, 10: 7}),
        # q2: evidence D1:1 + D2:1; D2:1 at rank 1, D1:1 at rank 4.
        locomo.Result(["D2:1", "D2:2", "D1:2", "D1:1"], ["D1:1", "D2:1"], 30.0, {5: 9, 10: 9}),
        # q3: nothing found.
        locomo.Result([], ["D2:2"], 20.0, {5: 0, 10: 0}),
    ]
    got = locomo.score(results)
    turn, session = got["turn"], got["session"]
    assert turn["recall_any@1"] == pytest.approx(round(1 / 3, 4))
    assert turn["recall_any@3"] == pytest.approx(round(2 / 3, 4))
    assert turn["recall_all@3"] == pytest.approx(round(1 / 3, 4))
    assert turn["recall_all@5"] == pytest.approx(round(2 / 3, 4))
    assert turn["mrr"] == pytest.approx(round((1 / 2 + 1 + 0) / 3, 4))
    ndcg_q1 = (1 / math.log2(3)) / 1.0
    ndcg_q2 = (1 + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert turn["ndcg@10"] == pytest.approx(round((ndcg_q1 + ndcg_q2) / 3, 4))
    # Sessions by first appearance: q1 [S2, S1] -> S1 at 2; q2 [S2, S1] -> both in top 2.
    assert session["recall_any@1"] == pytest.approx(round(1 / 3, 4))
    assert session["recall_any@3"] == pytest.approx(round(2 / 3, 4))
    assert session["recall_all@1"] == pytest.approx(0.0)
    assert session["recall_all@3"] == pytest.approx(round(2 / 3, 4))
    assert got["latency_ms"] == {"p50": 20.0, "p95": 30.0}
    assert got["tokens"]["mean@5"] == pytest.approx(round(16 / 3, 1))
    assert got["questions"] == 3


def test_evidence_slips_are_normalised(locomo: ModuleType) -> None:
    assert locomo.parse_evidence(["D8:6; D9:17", "D:11:26", "D8:6"]) == ["D8:6", "D9:17", "D11:26"]
    assert locomo.session_of("D12:3") == "S12"
