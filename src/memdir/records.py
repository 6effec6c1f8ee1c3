"""Records: classes of named fields, declared like the standard library's dataclasses.

Every agent hook is a whole process (``memdir hook claude-code EVENT``), and it imports the
modules that declare memdir's documents, hits, turns and settings. Declared with
``dataclasses``, those classes cost a hook about 15 ms before it did anything: the module
itself and ``inspect`` with it (about 6 ms), then about 0.6 ms to make each frozen class
(docs/benchmarks.md, *Agent hooks*). A record costs nothing to make but its field list: its first
instances are filled by a shared ``__init__``, and a class that makes many compiles its
own; every other method is shared by all records and reads the class's fields.

    @recordclass(frozen=True)
    class Hit:
        path: str
        score: float = 0.0
        tags: list[str] = field(default_factory=list)

What a record has, as a dataclass with the same arguments would: ``__init__`` with the
fields in order (inherited ones first) and ``__post_init__`` called at its end; ``__repr__``;
``__eq__`` over the compared fields when ``eq`` (the default), and then ``__hash__`` when
``frozen``, else none; ``frozen`` makes setting and deleting a field raise
:class:`FrozenInstanceError`; ``slots`` gives the class ``__slots__``; ``__match_args__``.
:func:`fields`, :func:`replace`, :func:`asdict` and :func:`is_record` do what their namesakes
in ``dataclasses`` do. Type checkers see a record as a dataclass (``dataclass_transform``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["Field", "FrozenInstanceError", "asdict", "field", "fields", "is_record", "recordclass"]

T = TypeVar("T")
FIELDS = "__record_fields__"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenInstanceError(AttributeError):
    """A field of a frozen record was set or deleted."""


class Field:
    """One field of a record: its name, its default (a value or a factory) and its roles."""

    __slots__ = ("compare", "default", "default_factory", "init", "name", "repr")

    def __init__(
        self,
        default: Any = MISSING,
        default_factory: Callable[[], Any] | Any = MISSING,
        init: bool = True,
        repr: bool = True,
        compare: bool = True,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("a field takes a default or a default_factory, not both")
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.compare = compare

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r})"


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
    init: bool = True,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """A field with a factory for its default, or left out of ``__init__``, repr or eq."""
    return Field(default, default_factory, init, repr, compare)


@overload
def recordclass(cls: type[T], /) -> type[T]: ...


@overload
def recordclass(
    *, frozen: bool = False, eq: bool = True, slots: bool = False
) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(field, Field))
def recordclass(
    cls: type[T] | None = None, /, *, frozen: bool = False, eq: bool = True, slots: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """Make ``cls`` a record: ``@recordclass`` or ``@recordclass(frozen=True, slots=True)``."""

    def wrap(cls: type[T]) -> type[T]:
        return _make(cls, frozen=frozen, eq=eq, slots=slots)

    return wrap if cls is None else wrap(cls)


def _make(cls: type[T], *, frozen: bool, eq: bool, slots: bool) -> type[T]:
    inherited: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get(FIELDS, ()):
            inherited[f.name] = f
    own: dict[str, Field] = {}
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        value = cls.__dict__.get(name, MISSING)
        f = value if isinstance(value, Field) else Field(default=value)
        if isinstance(f.default, (list, dict, set)):
            raise ValueError(f"{cls.__name__}.{name}: a mutable default needs default_factory")
        f.name = name
        own[name] = f
        if isinstance(value, Field):
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
    every = tuple({**inherited, **own}.values())
    if slots:
        cls = _with_slots(cls, tuple(own))
    # A method the class body defines is kept, as dataclasses keeps it; a body that defines
    # __eq__ alone gets __hash__ = None from Python itself, which is not an explicit hash.
    body = cls.__dict__
    explicit_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
    setattr(cls, FIELDS, every)
    methods: dict[str, Any] = {
        "__init__": _first_init(cls, every, frozen),
        "__repr__": _repr,
        "__match_args__": tuple(f.name for f in every if f.init),
    }
    if eq:
        methods["__eq__"] = _eq
    if frozen:
        methods["__setattr__"] = _frozen_setattr
        methods["__delattr__"] = _frozen_delattr
        if slots:
            methods["__getstate__"] = _getstate
            methods["__setstate__"] = _setstate
    for name, method in methods.items():
        if name not in body:
            setattr(cls, name, method)
    if eq and not explicit_hash:
        cls.__hash__ = _hash if frozen else None  # type: ignore[assignment]
    return cls


def _with_slots(cls: type[T], names: tuple[str, ...]) -> type[T]:
    """The class made again with ``__slots__`` for its own fields (as dataclasses does)."""
    body = dict(cls.__dict__)
    for name in names:
        body.pop(name, None)
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    body["__slots__"] = names
    meta: Any = type(cls)
    made: type[T] = meta(cls.__name__, cls.__bases__, body)
    made.__qualname__ = cls.__qualname__
    return made


# Instances a class makes through the shared __init__ before its own is compiled: compiling
# costs about a million instructions, the shared one about twice a compiled one per call.
COMPILE_AFTER = 16


def _first_init(cls: type, every: tuple[Field, ...], frozen: bool) -> Callable[..., None]:
    """``__init__`` for the first instances: it fills the fields itself (:func:`_fill`) and,
    from the ``COMPILE_AFTER``-th instance on, compiles the class's own (:func:`_init`) and
    puts it in its place. A hook imports about fifty records and makes a few of each."""
    _check_order(cls, every)
    made = 0
    set_field = object.__setattr__ if frozen else setattr
    post_init = hasattr(cls, "__post_init__")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal made
        made += 1
        if made < COMPILE_AFTER:
            _fill(cls, every, set_field, self, args, kwargs)
            if post_init:
                self.__post_init__()
            return
        real = _init(cls, every, frozen)
        type.__setattr__(cls, "__init__", real)
        real(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _fill(
    cls: type,
    every: tuple[Field, ...],
    set_field: Callable[[Any, str, Any], None],
    self: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    """What the compiled ``__init__`` does, field by field, with its errors."""
    params = [f for f in every if f.init]
    if len(args) > len(params):
        raise TypeError(
            f"{cls.__qualname__}.__init__() takes {len(params) + 1} positional arguments"
            f" but {len(args) + 1} were given"
        )
    given = dict(zip((f.name for f in params), args, strict=False))
    for name, value in kwargs.items():
        if name in given:
            raise TypeError(
                f"{cls.__qualname__}.__init__() got multiple values for argument {name!r}"
            )
        given[name] = value
    unknown = set(given) - {f.name for f in params}
    if unknown:
        raise TypeError(
            f"{cls.__qualname__}.__init__() got an unexpected keyword argument {min(unknown)!r}"
        )
    missing = [
        f.name
        for f in params
        if f.name not in given and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise TypeError(f"{cls.__qualname__}.__init__() missing required arguments: {missing}")
    for f in every:
        if f.init and f.name in given:
            value = given[f.name]
        elif f.default_factory is not MISSING:
            value = f.default_factory()
        elif f.default is not MISSING:
            value = f.default
        else:
            continue  # init=False without a default: left unset, as by the compiled one
        set_field(self, f.name, value)


def _check_order(cls: type, every: tuple[Field, ...]) -> None:
    """A field of ``__init__`` without a default may not follow one with (as in Python)."""
    seen_default = False
    for f in every:
        if not f.init:
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            seen_default = True
        elif seen_default:
            raise TypeError(f"{cls.__name__}.{f.name}: no default, after a field with one")


def _init(cls: type, every: tuple[Field, ...], frozen: bool) -> Callable[..., None]:
    """``__init__``, compiled for this field list, as fast as a hand-written one."""
    scope: dict[str, Any] = {"_factory": MISSING, "_set": object.__setattr__}
    params: list[str] = []
    lines: list[str] = []
    for n, f in enumerate(every):
        value = f.name
        if f.default_factory is not MISSING:
            scope[f"_f{n}"] = f.default_factory
            value = f"_f{n}() if {f.name} is _factory else {f.name}" if f.init else f"_f{n}()"
        elif not f.init:
            if f.default is MISSING:
                continue
            scope[f"_d{n}"] = f.default
            value = f"_d{n}"
        if f.init:
            if f.default is not MISSING:
                scope[f"_d{n}"] = f.default
                params.append(f"{f.name}=_d{n}")
            elif f.default_factory is not MISSING:
                params.append(f"{f.name}=_factory")
            else:
                params.append(f.name)
        if frozen:
            lines.append(f"    _set(self, {f.name!r}, {value})")
        else:
            lines.append(f"    self.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        lines.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(lines) or "    pass")
    exec(compile(source, f"<record {cls.__qualname__}>", "exec"), scope)
    made: Callable[..., None] = scope["__init__"]
    made.__qualname__ = f"{cls.__qualname__}.__init__"
    return made


def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
    return f"{type(self).__qualname__}({shown})"


def _key(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, f.name) for f in getattr(self, FIELDS) if f.compare)


def _eq(self: Any, other: object) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _key(self) == _key(other)


def _hash(self: Any) -> int:
    return hash(_key(self))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in getattr(self, FIELDS)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(getattr(self, FIELDS), state, strict=True):
        object.__setattr__(self, f.name, value)


def is_record(value: object) -> bool:
    """Whether ``value`` is a record or a record class."""
    return hasattr(type(value) if not isinstance(value, type) else value, FIELDS)


def fields(value: object) -> tuple[Field, ...]:
    """The fields of a record or record class, in ``__init__`` order."""
    found: tuple[Field, ...] | None = getattr(value, FIELDS, None)
    if found is None:
        raise TypeError(f"{value!r} is not a record")
    return found


def replace(value: T, /, **changes: Any) -> T:
    """A copy of the record ``value`` with some fields changed."""
    for f in fields(value):
        if f.init and f.name not in changes:
            changes[f.name] = getattr(value, f.name)
        elif not f.init and f.name in changes:
            raise ValueError(f"field {f.name!r} is not set by __init__: replace cannot change it")
    return type(value)(**changes)


def asdict(value: object) -> dict[str, Any]:
    """The record as a dict, records inside it (and in its lists, tuples, dicts) too."""
    if not is_record(value) or isinstance(value, type):
        raise TypeError(f"{value!r} is not a record")
    return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}


def _plain(value: Any) -> Any:
    if is_record(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return (
            type(value)(*map(_plain, value))
            if hasattr(value, "_fields")
            else tuple(map(_plain, value))
        )
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value
