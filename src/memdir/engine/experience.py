"""What the knowledge engine learns from: its episodes, the lessons drawn from them and the
snapshot they feed.

Every verb that runs records an operational episode; a user or an agent adds life and signal
episodes; ``reflect`` merges their insights into LESSONS.md, stamps old episodes distilled and
regenerates SNAPSHOT.md; and a consolidation recalls the lessons and the nearest episodes
first (:meth:`Experience.recaller`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import lazy
from ..doc import frontmatter, ids
from ..doc.text import one_line, read_utf8
from ..doc.tokencount import count as count_tokens
from ..errors import InvalidDocument, InvalidInput
from ..records import replace

if TYPE_CHECKING:
    from ..files.store import Store
    from ..index import Index
    from ..settings import EmbeddingsSettings
    from . import consolidate as consolidating
    from . import files, harness, program, reflect, terms
    from . import refine as refining
else:  # loaded when a verb first needs them (memdir.lazy)
    consolidating = lazy.module("memdir.engine.consolidate")
    files = lazy.module("memdir.engine.files")
    harness = lazy.module("memdir.engine.harness")
    reflect = lazy.module("memdir.engine.reflect")
    refining = lazy.module("memdir.engine.refine")
    terms = lazy.module("memdir.engine.terms")

# The second router: the kinds of experience recorded (the wiki's index.md is the first).
ROUTER = "episodes/index.md"
KINDS = (
    ("operational", "Operational", "the engine's own runs"),
    ("life", "Life", "what happened to the user or the agent"),
    ("signal", "Signal", "what the user asked for or corrected"),
)
RECALL_LESSONS = 10
RECALL_EPISODES = 3
EXPERIENCE_FOLDERS = ("episodes/operational/", "episodes/life/", "episodes/signal/")


class Experience:
    """The episodes of one store and what reflection makes of them.

    Built by :class:`memdir.engine.verbs.KnowledgeEngine` with the store, its index, and
    three callables: ``sync`` (bring the index in step), ``program`` (PROGRAM.md as the
    engine reads it) and ``keyword_search`` (BM25 pointers, for recall).
    """

    def __init__(
        self,
        store: Store,
        index: Index,
        *,
        sync: Callable[..., object],
        program: Callable[[], program.Program],
        keyword_search: Callable[..., Any],
        embeddings: EmbeddingsSettings | None = None,
    ) -> None:
        self.store = store
        self.index = index
        self.sync = sync
        self.program = program
        self.keyword_search = keyword_search
        self.embeddings = embeddings

    def likeness(self) -> reflect.Likeness:
        """How lessons are merged: by meaning with the configured embedder, by words when
        embeddings are off or their packages are missing."""
        if self.embeddings is None or not self.embeddings.enabled:
            return reflect.WORDS
        from ..errors import ProviderError
        from ..vectors.embedder import get_embedder

        try:
            embedder = get_embedder(self.embeddings)
        except ProviderError:  # MissingExtra included: the lexical fallback, said so
            return reflect.WORDS
        return reflect.by_meaning(embedder.embed)

    @property
    def _root(self) -> Path:
        return self.store.root

    def lessons(self) -> list[str]:
        path = self._root / "LESSONS.md"
        if not path.is_file():
            return []
        return [line[2:] for line in read_utf8(path).splitlines() if line.startswith("- ")]

    def recaller(self, lessons: list[str]) -> consolidating.Recall:
        """Recall first: the lessons, then the few experience episodes closest to a source."""
        fixed = tuple(f"lesson: {line}" for line in lessons[:RECALL_LESSONS])

        def recall(text: str) -> tuple[str, ...]:
            found: list[str] = []
            try:
                hits = self.keyword_search(text, limit=RECALL_EPISODES * 4)
            except InvalidInput:  # a source with no searchable words recalls only lessons
                hits = []
            for hit in hits:
                if hit.path.startswith(EXPERIENCE_FOLDERS):
                    found.append(f"episode {hit.path}: {hit.snippet or hit.title}")
                if len(found) >= RECALL_EPISODES:
                    break
            return fixed + tuple(found)

        return recall

    def record_operational(
        self,
        batch: files.Batch,
        verb: str,
        *,
        situation: str,
        actions: list[str],
        outcome: str,
        insights: list[str],
    ) -> str:
        now = reflect.now_utc()
        stamp = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"
        eid = f"operational-{verb}-{stamp}-{ids.random_tag(4)}"
        rel = f"episodes/operational/{now:%Y/%m/%d}/{eid}.md"
        n = 2
        while (self._root / rel).exists():
            rel = f"episodes/operational/{now:%Y/%m/%d}/{eid}-{n}.md"
            n += 1
        text = reflect.render_episode(
            episode_id=eid,
            kind="operational",
            at=now,
            situation=situation,
            intent=verb,
            actions=actions,
            outcome=outcome,
            insights=insights,
            tags=[verb],
        )
        return batch.write(rel, text)

    def episode_add(
        self,
        *,
        kind: str,
        situation: str,
        actions: Sequence[str] = (),
        outcome: str = "success",
        insights: Sequence[str] = (),
        tags: Sequence[str] = (),
        intent: str = "",
        slug: str | None = None,
    ) -> dict[str, Any]:
        """Record a life or signal episode (operational ones are written by the verbs)."""
        harness.check(self._root)
        if kind not in ("life", "signal"):
            raise InvalidInput("episode kind must be 'life' or 'signal'")
        if outcome not in reflect.OUTCOMES:
            raise InvalidInput(f"outcome must be one of {', '.join(reflect.OUTCOMES)}")
        if not situation.strip():
            raise InvalidInput("an episode needs a situation")
        # Each is one line of the episode's body: a newline could start a section of its own
        # (a situation holding "## Insights" would add lessons nobody gave). Refused as the
        # document it would make, like any other content a write refuses.
        fields = [("situation", situation), ("intent", intent)]
        fields += [("action", a) for a in actions] + [("insight", i) for i in insights]
        try:
            for name, value in fields + [("tag", t) for t in tags]:
                one_line(name, value)
        except InvalidInput as exc:
            raise InvalidDocument(exc.message) from None
        now = reflect.now_utc()
        # The tag makes the id unique beyond this store: stores synced over git never name
        # two episodes alike (memdir.files.sync relies on it).
        day = ids.day_tag(int(now.timestamp() * 1000))
        signal = f"signal-{terms.slugify(slug or situation, 40)}-{day}"
        base = f"life-{now:%Y-%m-%d}-{day}" if kind == "life" else signal
        eid, n = base, 2
        while list((self._root / "episodes" / kind).rglob(f"{eid}.md")):
            eid, n = f"{base}-{n}", n + 1
        rel = f"episodes/{kind}/{eid}.md"
        text = reflect.render_episode(
            episode_id=eid,
            kind=kind,
            at=now,
            situation=situation,
            intent=intent or situation,
            actions=list(actions),
            outcome=outcome,
            insights=list(insights),
            tags=list(tags),
        )
        batch = files.Batch(self.store, self.index)
        batch.write(rel, text)
        batch.commit(f"episode add {eid}")
        self.sync()
        return {"path": rel, "episode_id": eid}

    def reflect(self, *, now: datetime | None = None) -> dict[str, Any]:
        """Merge insights into LESSONS.md, distil, regenerate SNAPSHOT.md."""
        harness.check(self._root)
        self.sync()
        batch = files.Batch(self.store, self.index)
        with batch.all_or_nothing("reflect"):
            result = self.reflect_into(batch, now=now)
            if result["distilled"] or result["lessons_changed"]:
                # A reflect that changed nothing leaves its runs.tsv row and no episode.
                self.record_operational(
                    batch,
                    "reflect",
                    situation=(
                        f"reflect: {result['lessons']} lesson(s) from {result['episodes']} "
                        f"episode(s), {len(result['distilled'])} distilled"
                    ),
                    actions=[f"distilled {p}" for p in result["distilled"][:20]]
                    + [f"snapshot {result['snapshot_tokens']}/{result['snapshot_cap']} tokens"],
                    outcome="success",
                    insights=_reflect_insights(result),
                )
            batch.log_run(
                "reflect",
                "ok",
                {
                    "episodes": result["episodes"],
                    "lessons": result["lessons"],
                    "distilled": len(result["distilled"]),
                    "snapshot_tokens": result["snapshot_tokens"],
                },
            )
        batch.commit(
            f"reflect: {result['lessons']} lessons, {len(result['distilled'])} episodes distilled"
        )
        self.sync()
        return result

    def _turn_count(self) -> int:
        return sum(1 for _ in files.markdown_under(self._root, "episodes/turns"))

    def reflect_into(
        self, batch: files.Batch, *, now: datetime | None = None, distill: bool = True
    ) -> dict[str, Any]:
        """LESSONS.md, SNAPSHOT.md and the router of episodes written from the episodes;
        with ``distill``, old episodes are marked distilled first (reflect), without it
        the files are only written again from what is there (a sync's merge)."""
        moment = now or reflect.now_utc()
        prog = self.program()
        episodes: list[reflect.Episode] = []
        for folder in refining.EXPERIENCE:
            for rel in files.markdown_under(self._root, folder):
                ep, _ = reflect.read_episode(
                    rel, (self._root / rel).read_text(encoding="utf-8", errors="replace")
                )
                if ep is not None:
                    episodes.append(ep)
        likeness = self.likeness()
        lessons = reflect.lessons_from(episodes, likeness, [b.name for b in prog.bundles])
        stamped = (
            reflect.to_distill(lessons, moment, prog.thresholds.distill_age_days) if distill else []
        )
        for ep in stamped:
            # Through the batch, so a run that fails later puts the episode back too.
            text = read_utf8(self._root / ep.path)
            batch.write(
                ep.path, frontmatter.edit(text, lambda fm: fm.__setitem__("distilled", True))
            )
        gone = {e.path for e in stamped}
        live = [replace(e, distilled=e.distilled or e.path in gone) for e in episodes]
        merged = _distilled_entries(self._root / "LESSONS.md", live, moment)
        lessons_text = reflect.render_lessons(lessons, merged_from=merged)
        lessons_file = self._root / "LESSONS.md"
        before = lessons_file.read_text(encoding="utf-8") if lessons_file.is_file() else None
        batch.write("LESSONS.md", lessons_text)
        recent = sorted(
            (e for e in live if not e.distilled), key=lambda e: e.timestamp, reverse=True
        )
        decisions = [e for e in recent if "decision" in e.tags]
        snapshot = reflect.render_snapshot(
            identity=prog.identity,
            lessons=lessons,
            recent=recent,
            decisions=decisions,
            cap=prog.snapshot.token_cap,
            count=count_tokens,
            max_lessons=prog.snapshot.lessons,
            max_recent=prog.snapshot.recent_episodes,
        )
        batch.write("SNAPSHOT.md", snapshot)
        batch.write(ROUTER, render_router(live, len(lessons), self._turn_count()))
        return {
            "episodes": len(episodes),
            "lessons": len(lessons),
            "distilled": sorted(gone),
            "snapshot_tokens": count_tokens(snapshot),
            "snapshot_cap": prog.snapshot.token_cap,
            "lessons_changed": before != lessons_text,
            "lessons_merged_by": likeness.name,
        }


def _distilled_entries(
    lessons_file: Path, episodes: list[reflect.Episode], moment: datetime
) -> list[dict[str, Any]]:
    """``merged-from`` of LESSONS.md: every distilled episode, each entry kept as it was
    first written (its date says when it was distilled), new ones dated ``moment``."""
    known: dict[str, dict[str, Any]] = {}
    if lessons_file.is_file():
        parsed = frontmatter.parse(lessons_file.read_text(encoding="utf-8", errors="replace"))
        items = parsed.fm.get("merged-from") if parsed.has_block and not parsed.error else None
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                known[item["path"]] = item
    stamp = reflect.rfc3339(moment)
    out = []
    for ep in sorted((e for e in episodes if e.distilled), key=lambda e: e.path):
        entry = {"type": "episode", "id": ep.episode_id, "path": ep.path, "date": stamp}
        out.append(known.get(ep.path, entry))
    return out


def _reflect_insights(result: dict[str, Any]) -> list[str]:
    """Only what the figures say: a snapshot filled to its cap leaves lessons out."""
    used, cap = result["snapshot_tokens"], result["snapshot_cap"]
    if used >= 0.9 * cap:
        return [
            f"The snapshot uses {used} of its {cap} tokens with {result['lessons']} lesson(s) "
            "to show, so some lessons and recent episodes are left out: raise the snapshot "
            "token_cap in PROGRAM.md or let more episodes distil."
        ]
    return []


def render_router(episodes: Sequence[reflect.Episode], lessons: int, turns: int) -> str:
    """episodes/index.md: each kind of experience with its count and its latest episode
    (a router: the context pack offers it beside the wiki's; not itself an episode)."""
    lines = ["# Experience", "", "The kinds of experience this memory records.", ""]
    for kind, title, what in KINDS:
        mine = sorted((e for e in episodes if e.kind == kind), key=lambda e: e.timestamp)
        line = f"- [{title}]({kind}/): {len(mine)} episode(s), {what}"
        if mine:
            last = mine[-1]
            situation = " ".join(last.situation.split())[:120]
            line += f"; latest {last.timestamp:%Y-%m-%d}: {situation} ({last.outcome})"
        lines.append(line)
    lines.append(f"- [Turns](turns/): {turns} turn record(s), the agent's own interactions")
    lines.append(f"- [Lessons](../LESSONS.md): {lessons} lesson(s) drawn from the episodes")
    fm = {"type": "router", "memory_kind": "semantic", "title": "Experience"}
    return frontmatter.render(fm, "\n".join(lines) + "\n")
