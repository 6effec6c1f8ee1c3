"""memdir.records behaves as the dataclasses it replaced: each case is checked against the
standard library's own dataclass declared the same way."""

from __future__ import annotations

import ast
import copy
import dataclasses
import pickle
from pathlib import Path

import pytest

from memdir import records
from memdir.records import field, recordclass


@recordclass(frozen=True)
class Point:
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    note: str = field(default="", compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class StdPoint:
    x: int
    y: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)
    note: str = dataclasses.field(default="", compare=False, repr=False)


@recordclass(frozen=True, slots=True)
class Slotted:
    a: int
    b: str = "b"


@recordclass
class Counter:
    name: str
    seen: int = 0
    total: int = field(init=False, default=0)
    doubled: int = field(init=False)

    def __post_init__(self) -> None:
        self.doubled = self.seen * 2


@recordclass
class Child(Counter):
    extra: str = "x"


def test_a_record_is_made_as_the_dataclass_declared_the_same_way() -> None:
    mine, theirs = Point(1, tags=["t"], note="n"), StdPoint(1, tags=["t"], note="n")
    assert (mine.x, mine.y, mine.tags, mine.note) == (theirs.x, theirs.y, theirs.tags, theirs.note)
    assert repr(mine).replace("Point", "StdPoint") == repr(theirs)
    assert Point.__match_args__ == StdPoint.__match_args__
    assert [f.name for f in records.fields(Point)] == [f.name for f in dataclasses.fields(StdPoint)]
    # A factory gives each instance its own list.
    assert Point(1).tags is not Point(1).tags


def test_equality_and_hash_follow_the_compared_fields() -> None:
    assert Point(1, 2, ["a"], note="one") == Point(1, 2, ["a"], note="other")
    assert Point(1, 2) != Point(1, 3)
    assert Point(1) != StdPoint(1)
    assert hash(Slotted(1, "x")) == hash(Slotted(1, "x"))
    # A list among the compared fields makes the hash fail, as it does for a dataclass.
    for cls in (Point, StdPoint):
        with pytest.raises(TypeError):
            hash(cls(1, 2, ["a"]))
    assert {Slotted(1), Slotted(1), Slotted(2)} == {Slotted(1), Slotted(2)}
    # eq without frozen leaves a record unhashable, as a dataclass is.
    with pytest.raises(TypeError):
        hash(Counter("c"))


def test_frozen_records_refuse_changes() -> None:
    p = Point(1)
    with pytest.raises(records.FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.x  # type: ignore[misc]
    s = Slotted(1)
    with pytest.raises(AttributeError):
        s.a = 3  # type: ignore[misc]
    assert not hasattr(s, "__dict__")
    assert Slotted.__slots__ == ("a", "b")


def test_frozen_slotted_records_copy_and_pickle() -> None:
    s = Slotted(7, "seven")
    for made in (copy.copy(s), copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert made == s and made is not s
    p = Point(1, 2, ["a"])
    assert pickle.loads(pickle.dumps(p)) == p


def test_init_false_fields_and_post_init() -> None:
    c = Counter("c", seen=4)
    assert (c.total, c.doubled) == (0, 8)
    with pytest.raises(TypeError):
        Counter("c", total=1)  # type: ignore[call-arg]
    child = Child("k", 1, extra="e")
    assert (child.name, child.seen, child.doubled, child.extra) == ("k", 1, 2, "e")
    assert [f.name for f in records.fields(child)] == ["name", "seen", "total", "doubled", "extra"]


def test_replace_fields_and_asdict() -> None:
    p = Point(1, 2, ["a"])
    q = records.replace(p, y=5)
    assert (q.x, q.y, q.tags) == (1, 5, ["a"]) and p.y == 2
    with pytest.raises(ValueError):
        records.replace(Counter("c"), total=3)
    nested = {"p": [Point(1)], "t": (Slotted(2),)}
    assert records.asdict(Point(3, tags=["z"])) == dataclasses.asdict(StdPoint(3, tags=["z"]))
    assert records._plain(nested) == {
        "p": [{"x": 1, "y": 0, "tags": [], "note": ""}],
        "t": ({"a": 2, "b": "b"},),
    }
    assert records.is_record(p) and records.is_record(Point) and not records.is_record(1)
    with pytest.raises(TypeError):
        records.fields(1)


def test_declarations_a_dataclass_refuses_are_refused() -> None:
    with pytest.raises(ValueError):

        @recordclass
        class Shared:
            items: list[int] = []

    with pytest.raises(TypeError):

        @recordclass
        class Order:
            a: int = 1
            b: int  # type: ignore[misc]

    with pytest.raises(ValueError):
        field(default=1, default_factory=list)


def test_a_method_the_class_defines_is_kept() -> None:
    @recordclass(frozen=True)
    class Own:
        a: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

    assert repr(Own(1)) == "own" and Own(1) == Own(2) and hash(Own(3)) == 7


def test_no_module_of_memdir_imports_dataclasses() -> None:
    """One way to declare a record in memdir, and the one a hook can afford."""
    src = Path(records.__file__).parent
    found = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if "dataclasses" in names:
                found.append(f"{path.relative_to(src)}:{node.lineno}")
    assert found == []


def _declare() -> type:
    @recordclass(frozen=True)
    class Made:
        a: int
        b: str = "b"
        c: list[int] = field(default_factory=list)
        d: int = field(init=False, default=4)
        e: int = field(init=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "e", self.a * 10)

    return Made


CALLS: list[tuple[tuple[object, ...], dict[str, object]]] = [
    ((1,), {}),
    ((1, "x"), {}),
    ((1,), {"c": [3]}),
    ((), {"a": 2, "b": "y", "c": [1]}),
    ((), {}),  # a is missing
    ((1, "x", [2], 9), {}),  # too many
    ((1,), {"a": 2}),  # a twice
    ((1,), {"zzz": 1}),  # not a field
    ((1,), {"d": 1}),  # not an __init__ field
]


def _outcome(cls: type, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
    try:
        made = cls(*args, **kwargs)
    except TypeError:
        return TypeError
    return (made.a, made.b, made.c, made.d, made.e)


def test_the_shared_init_and_the_compiled_one_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "COMPILE_AFTER", 10**9)
    shared = _declare()
    monkeypatch.setattr(records, "COMPILE_AFTER", 0)
    compiled = _declare()
    for args, kwargs in CALLS:
        monkeypatch.setattr(records, "COMPILE_AFTER", 10**9)
        first = _outcome(shared, args, kwargs)
        monkeypatch.setattr(records, "COMPILE_AFTER", 0)
        second = _outcome(compiled, args, kwargs)
        assert first == second, (args, kwargs)
    assert not shared.__init__.__code__.co_filename.startswith("<record")
    assert compiled.__init__.__code__.co_filename.startswith("<record")


def test_a_class_compiles_its_init_after_some_instances() -> None:
    @recordclass
    class Late:
        a: int
        b: int = 2

    class Plain(Late):
        pass

    for n in range(records.COMPILE_AFTER + 1):
        assert (Plain(n).a, Late(n, b=n).b) == (n, n)
    assert Late.__init__.__code__.co_filename.startswith("<record")
    assert Late(5, b=6) == Late(5, 6) and Late(5).b == 2
    with pytest.raises(TypeError):
        Late()  # type: ignore[call-arg]
