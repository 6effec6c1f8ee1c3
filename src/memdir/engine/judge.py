"""A judge of where a source goes: a model's say over the router's (``[engine] judge``).

The offline router files a note by how near it is to a bundle's texts, so a note about a
bundle's setting (a relative's party at the club a bundle is about, a neighbour's fish) goes
in with the bundle's own notes: the embedder puts it as near (docs/experiments.md). A reader
of the note tells them apart. With ``[engine] judge`` naming a judge (``openai``: the
``[llm]`` chat endpoint; a plugin registers others through ``register_judges``), consolidate
shows it each source the router placed by itself, with every bundle's scope and the router's
proposal, and files the source where the judge says: one bundle or two, or quarantine when it
says none. A source that names its bundle (released from quarantine by a person) is not
judged. A judge that fails, times out or answers with no bundle of PROGRAM.md and no clear
"none" leaves the router's placement, and the run counts it as a fallback; after
``GIVE_UP`` failures in a row the run stops asking (a service that is down would otherwise
cost every source its timeout and retries).

Each verdict is recorded in the source's placement (``consolidate --json``: ``judge`` with
the judge's name, its bundles and reason, and the router's bundles), in the quarantine
reason, and in runs.tsv (``judged``, ``overruled``, ``judge_fallbacks``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..doc.text import bad_char
from ..errors import ConfigError, ProviderError
from ..providers.openai import chat_with, json_reply
from ..providers.plugins import hookimpl
from ..records import field, recordclass
from . import routing
from .program import Bundle

NONE = "none"  # the setting that asks for no judge
MODEL = "openai"
MAX_REASON_CHARS = 300
MAX_TEXT_CHARS = 6000  # of a source shown to the judge
GIVE_UP = 3  # failures in a row after which a run stops asking the judge


@recordclass(frozen=True)
class JudgeRequest:
    """What a judge is shown about one source."""

    source: str  # its inbox path
    title: str
    text: str
    bundles: tuple[tuple[str, str], ...]  # (name, scope) of every bundle
    proposed: tuple[str, ...]  # the router's bundles (empty: it would quarantine)
    scores: Mapping[str, float] = field(default_factory=dict)


@recordclass(frozen=True)
class Verdict:
    """Where the judge files the source: its bundles, none (quarantine), and why."""

    bundles: tuple[str, ...]
    reason: str = ""


class Judge(Protocol):
    name: str

    def judge(self, request: JudgeRequest) -> Verdict: ...


@recordclass
class Review:
    """What judging a run's routes did."""

    by: str = ""  # the judge's name
    judged: int = 0
    overruled: int = 0
    fallbacks: int = 0
    notes: list[str] = field(default_factory=list)

    def run_notes(self) -> dict[str, Any]:
        """The run's runs.tsv fields."""
        return {
            "judge": self.by,
            "judged": self.judged,
            "overruled": self.overruled,
            "judge_fallbacks": self.fallbacks,
        }


def for_settings(settings: Any) -> Judge | None:
    """The judge ``[engine] judge`` names (a ConfigError for a name nothing registered), or
    None for ``none``."""
    from ..providers import plugins

    name = settings.engine.judge
    return None if name == NONE else plugins.build("judge", name, settings)


def review(
    routes: Mapping[str, routing.Route],
    texts: Mapping[str, tuple[str, str]],
    bundles: Sequence[Bundle],
    judge: Judge,
) -> tuple[dict[str, routing.Route], Review]:
    """The routes with the judge's verdicts in place of the router's placements.

    ``texts`` is each source's (title, body) by path; a route of the ``hint`` method (the
    source names its bundle) is kept as it is."""
    out = dict(routes)
    done = Review(judge.name)
    names = tuple((b.name, b.scope) for b in bundles)
    known = {b.name for b in bundles}
    failed = 0  # failures in a row
    for path, route in routes.items():
        if route.method == "hint" or path not in texts or not known:
            continue
        if failed >= GIVE_UP:
            done.fallbacks += 1  # not asked: the judge's service is down
            continue
        title, text = texts[path]
        request = JudgeRequest(path, title, text, names, route.bundles, dict(route.scores))
        try:
            verdict = _ask(judge, request)
            chosen = _checked(verdict, known)
        except JudgeFault:
            raise
        except ProviderError as exc:
            done.fallbacks += 1
            done.notes.append(
                f"{path}: judge {judge.name} failed, the router's placement kept: {exc}"
            )
            failed += 1
            if failed == GIVE_UP:
                done.notes.append(
                    f"judge {judge.name} failed {GIVE_UP} times in a row: the run's other "
                    "sources keep the router's placements without asking it"
                )
            continue
        failed = 0
        done.judged += 1
        if set(chosen) != set(route.bundles):
            done.overruled += 1
        said = {
            "by": judge.name,
            "bundles": list(chosen),
            "reason": (why := _line(verdict.reason)),
            "router": list(route.bundles),
        }
        if not chosen:
            reason = f"judge {judge.name}: no bundle is for it" + (f" ({why})" if why else "")
        else:  # a router's reason to quarantine does not hold for a source the judge files
            reason = route.reason if route.bundles else f"judge {judge.name}: {why}"
        out[path] = routing.Route(
            chosen,
            route.scores,
            route.matched,
            reason,
            route.method,
            {**route.details, "judge": said},
        )
    return out, done


def _line(reason: object) -> str:
    """A judge's reason as one line a file can hold: whitespace runs made one space,
    control characters and lone surrogates left out, at most ``MAX_REASON_CHARS``."""
    text = reason if isinstance(reason, str) else ""
    kept = "".join(ch for ch in " ".join(text.split()) if not bad_char(ch))
    return kept[:MAX_REASON_CHARS]


def _ask(judge: Judge, request: JudgeRequest) -> Verdict:
    """The judge's verdict; what it raises other than a ProviderError is a fault of the
    judge that stops the run (undone), named with the source, as for a writer."""
    try:
        verdict = judge.judge(request)
    except ProviderError:
        raise
    except Exception as exc:  # a plugin's own error: named, not passed on bare
        raise JudgeFault(
            f"judge '{judge.name}' failed on {request.source}: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(verdict, Verdict):
        raise JudgeFault(f"judge '{judge.name}' returned no Verdict for {request.source}")
    return verdict


class JudgeFault(ProviderError):
    """A judge that broke (not a model service that failed): the run stops, undone."""


def _checked(verdict: Verdict, known: set[str]) -> tuple[str, ...]:
    """The verdict's bundles, each a bundle of PROGRAM.md, at most two; a verdict that names
    only bundles memdir does not have is no verdict."""
    named = list(dict.fromkeys(verdict.bundles))
    chosen = tuple(b for b in named if b in known)[:2]
    if named and not chosen:
        raise ProviderError(f"the judge named no bundle of PROGRAM.md ({', '.join(named)[:200]})")
    return chosen


# ---- the model judge ---------------------------------------------------------------------

_SYSTEM = """You sort a person's notes into the bundles of their memory. Each bundle has a
scope: one sentence saying what it is for. A note belongs to a bundle only when it is about
what the scope says, not when it merely shares a word, a place or a person with it (a
friend's party at the tennis club is not about playing tennis). Most notes belong to one
bundle, a few to two, and some to none. Reply with one JSON object and nothing else:
{"bundles": [bundle names, at most two, [] when none fits], "reason": one short sentence}."""


class ModelJudge:
    """Asks an OpenAI-compatible chat endpoint (``[llm]``) where each source goes."""

    name = MODEL

    def __init__(self, settings: Any) -> None:
        self.llm = settings.llm
        if not self.llm.base_url or not self.llm.model:
            # A judge asked for and not set up: said once, before the run, not per source.
            raise ConfigError(
                "engine.judge is 'openai' but [llm] base_url and model are not both set"
            )

    def judge(self, request: JudgeRequest) -> Verdict:
        scopes = "\n".join(f"- {name}: {scope}" for name, scope in request.bundles)
        proposed = ", ".join(request.proposed) or "none (quarantine)"
        user = (
            f"Bundles:\n{scopes}\n\nA router that compares meanings proposes: {proposed}.\n\n"
            f"Note title: {request.title}\n\n{request.text[:MAX_TEXT_CHARS]}"
        )
        messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]
        data = json_reply("model judge", chat_with(self.llm, "model judge", messages))
        listed = data.get("bundles")
        if not isinstance(listed, list) or not all(isinstance(b, str) for b in listed):
            raise ProviderError('model judge reply has no "bundles" list of names')
        return Verdict(tuple(b.strip() for b in listed if b.strip()), _line(data.get("reason")))


@hookimpl
def register_judges(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register(MODEL, ModelJudge)
