"""The knowledge engine of one store: the verbs :class:`memdir.Memory` calls for it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import lazy
from ..doc import frontmatter
from ..doc.ids import new_id
from ..doc.text import actor_name, lone_surrogate, one_line, read_utf8
from ..doc.tokencount import count as count_tokens
from ..errors import ConfigError, Conflict, InvalidDocument, InvalidInput, NotFound, TooLarge
from ..index import listing
from ..index.search import query_words
from ..providers import plugins
from ..settings import pin, pinned, pinned_harness
from .experience import Experience

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..files import sync as gitsync
    from ..files.store import Store
    from ..index import Index
    from ..settings import Settings
    from . import consolidate as consolidating
    from . import evaluate as evaluating
    from . import (
        files,
        harness,
        placing,
        program,
        reflect,
        runepisode,
        runs,
        terms,
        threads,
        turnfacts,
        wiki,
    )
    from . import judge as judging
    from . import quarantine as quarantining
    from . import query as querying
    from . import refine as refining
    from . import writer as writing
else:  # loaded when a verb first needs them (memdir.lazy)
    harness = lazy.module("memdir.engine.harness")
    program = lazy.module("memdir.engine.program")
    consolidating = lazy.module("memdir.engine.consolidate")
    judging = lazy.module("memdir.engine.judge")
    evaluating = lazy.module("memdir.engine.evaluate")
    querying = lazy.module("memdir.engine.query")
    quarantining = lazy.module("memdir.engine.quarantine")
    refining = lazy.module("memdir.engine.refine")
    files = lazy.module("memdir.engine.files")
    placing = lazy.module("memdir.engine.placing")
    reflect = lazy.module("memdir.engine.reflect")
    runepisode = lazy.module("memdir.engine.runepisode")
    runs = lazy.module("memdir.engine.runs")
    terms = lazy.module("memdir.engine.terms")
    threads = lazy.module("memdir.engine.threads")
    turnfacts = lazy.module("memdir.engine.turnfacts")
    wiki = lazy.module("memdir.engine.wiki")
    gitsync = lazy.module("memdir.files.sync")
    writing = lazy.module("memdir.engine.writer")

ACTOR = "memdir-engine"


class KnowledgeEngine:
    """consolidate, query, refine, evaluate, plus bundles and ingest; episodes and reflect are
    its :class:`~memdir.engine.experience.Experience` (``experience``).

    Built once by :meth:`memdir.Memory.open` and handed the store, its index and settings,
    and three callables of the store's reading side: ``sync`` (bring the index in step),
    ``synced`` (one sync held for a whole verb), ``keyword_search`` (BM25 pointers) and
    ``search`` (the store's own search, hybrid when vectors can be used).
    """

    def __init__(
        self,
        store: Store,
        index: Index,
        settings: Settings,
        *,
        sync: Callable[..., object],
        synced: Callable[[], AbstractContextManager[Any]],
        keyword_search: Callable[..., Any],
        search: Callable[..., list[Any]],
        memory_report: Callable[[], Any],
    ) -> None:
        self.store = store
        self.index = index
        self.settings = settings
        self.sync = sync
        self.synced = synced
        self.keyword_search = keyword_search
        self.search = search
        self.memory_report = memory_report
        self.experience = Experience(
            store,
            index,
            sync=sync,
            program=self.program,
            keyword_search=keyword_search,
            embeddings=settings.embeddings,
        )

    # -- program and harness -------------------------------------------------------------

    @property
    def _root(self) -> Path:
        return self.store.root

    def program(self) -> program.Program:
        path = self._root / "PROGRAM.md"
        text = read_utf8(path) if path.is_file() else ""
        return program.with_settings(program.parse(text), self.settings.engine)

    def _harness(self, *, writing: bool) -> harness.Harness:
        return harness.check(self._root) if writing else harness.load(self._root)

    def harness_accept(self) -> dict[str, Any]:
        """Pin the current HARNESS.md and evals/questions.yaml (logged as its own run)."""
        current = harness.load(self._root)
        before = pinned_harness(self._root)
        questions = harness.questions_digest(self._root)
        questions_before = pinned(self._root, "questions")
        pin(self._root, sha256=current.sha256, **({"questions": questions} if questions else {}))
        batch = files.Batch(self.store, self.index)
        batch.log_run(
            "harness-accept",
            "ok",
            {
                "sha256": current.sha256[:12],
                "previous": (before or "none")[:12],
                "questions": (questions or "none")[:12],
                "previous_questions": (questions_before or "none")[:12],
            },
        )
        batch.add_private("config.toml")
        batch.commit(f"harness accept: pin HARNESS.md {current.sha256[:12]}")
        return {
            "sha256": current.sha256,
            "previous": before,
            "changed": before != current.sha256,
            "questions": questions,
            "previous_questions": questions_before,
        }

    # -- bundles -------------------------------------------------------------------------

    def bundle_add(self, name: str, scope: str) -> dict[str, Any]:
        """Add (or rescope) a bundle in PROGRAM.md and create its OKF folder."""
        self._harness(writing=True)
        text = read_utf8(self._root / "PROGRAM.md")
        new = program.add_bundle(text, name, scope)
        batch = files.Batch(self.store, self.index)
        with batch.all_or_nothing("bundle add"):
            batch.write("PROGRAM.md", new)
            prog = self.program()
            wiki.regenerate(batch, self._root, prog, name)
            wiki.regenerate_top(batch, self._root, prog)
        batch.commit(f"bundle add {name}: {' '.join(scope.split())[:60]}")
        self.sync()
        spec = prog.bundle(name)
        return {"bundle": name, "scope": spec.scope if spec else scope}

    def bundle_list(self) -> list[dict[str, Any]]:
        prog = self.program()
        out = []
        for name in wiki.bundle_names(self._root, prog):
            spec = prog.bundle(name)
            out.append(
                {
                    "bundle": name,
                    "scope": spec.scope if spec else "",
                    "articles": len(wiki.articles(self._root, name)),
                    "in_program": spec is not None,
                }
            )
        return out

    def bundle_remove(self, name: str) -> dict[str, Any]:
        """Remove a bundle from PROGRAM.md (its articles stay on disk)."""
        self._harness(writing=True)
        # An unknown name is refused before the batch, so the error is not a failed run.
        new = program.remove_bundle(read_utf8(self._root / "PROGRAM.md"), name)
        batch = files.Batch(self.store, self.index)
        with batch.all_or_nothing("bundle remove"):
            batch.write("PROGRAM.md", new)
            kept = len(wiki.articles(self._root, name))
            wiki.regenerate_top(batch, self._root, self.program())
        batch.commit(f"bundle remove {name} ({kept} articles kept on disk)")
        self.sync()
        return {"bundle": name, "articles_kept": kept}

    def bundle_publish(self, name: str, to: str) -> dict[str, Any]:
        """The bundle as a standalone OKF v0.2 repository at ``to`` (engine/publish.py)."""
        from . import publish

        return publish.bundle(self.store, wiki.bundle_names(self._root, self.program()), name, to)

    # -- ingest --------------------------------------------------------------------------

    def ingest(
        self,
        items: Sequence[tuple[str, bytes | str]],
        *,
        actor: str | None = None,
        provenance: str | None = None,
    ) -> list[dict[str, Any]]:
        """Place raw sources in ``inbox/`` as episodic ``type: ingest`` documents."""
        self._harness(writing=True)
        prepared = []
        for name, content in items:
            one_line("source name", name, max_chars=1000)
            if isinstance(content, str) and lone_surrogate(content) is not None:
                raise InvalidDocument(f"{name}: not valid Unicode text (a lone surrogate)")
            raw = content.encode("utf-8") if isinstance(content, str) else content
            limit = self.settings.store.max_file_bytes
            if len(raw) > limit:
                raise TooLarge(f"{name}: {len(raw)} bytes is over the limit of {limit} bytes")
            if b"\x00" in raw[:8192]:
                raise InvalidDocument(f"{name}: binary content cannot be ingested")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidDocument(f"{name}: not UTF-8 text") from None
            if not text.strip():
                raise InvalidDocument(f"{name}: the source is empty")
            prepared.append((name, text))
        from ..doc import provenance as prov_mod

        # Checked before anything is written: a malformed value is refused for every source.
        given = prov_mod.parse(provenance) if provenance else None
        author = actor_name(actor) if actor and actor.strip() else ACTOR
        out = []
        batch = files.Batch(self.store, self.index)
        with batch.all_or_nothing("ingest"):
            for name, text in prepared:
                eid = new_id()
                parsed = frontmatter.parse(text)
                fm: dict[str, Any] = (
                    dict(parsed.fm) if parsed.has_block and not parsed.error else {}
                )
                body = parsed.body if parsed.has_block and not parsed.error else text
                fm.update(
                    {
                        "episode_id": eid,
                        "memory_kind": "episodic",
                        "type": "ingest",
                        "ingested": reflect.rfc3339(reflect.now_utc()),
                        "source_name": name,
                    }
                )
                if given is not None:
                    # derived-from records a given provenance (as --provenance and X-Provenance
                    # do for any write); an actor alone only authors the commit.
                    entry = prov_mod.derived_entry(*given, actor)
                    current = fm.get("derived-from")
                    # appended, as every write appends: the source's own entries are kept
                    if isinstance(current, list):
                        fm["derived-from"] = [*current, entry]
                    elif current is None:
                        fm["derived-from"] = [entry]
                    else:  # an unexpected shape is kept, never dropped
                        fm["derived-from"] = [current, entry]
                stem = terms.slugify(Path(name).stem if name != "-" else "stdin", 40)
                rel = f"inbox/{eid}-{stem}.md"
                batch.write(rel, frontmatter.render(fm, body))
                out.append({"path": rel, "episode_id": eid, "source": name})
        batch.commit(f"ingest {len(out)} source(s) into inbox/", actor=author)
        self.sync()
        return out

    # -- consolidate ---------------------------------------------------------------------

    def consolidate(
        self,
        *,
        plan: bool = False,
        apply: str | dict[str, Any] | None = None,
        limit: int | None = None,
        actor: str | None = None,
        turns: bool | None = None,
    ) -> dict[str, Any]:
        """Inbox sources -> cited articles (or quarantine); then refine, reflect, reindex and
        one git commit. ``plan`` returns the work packet; ``apply`` files returned articles.

        ``turns`` (default: the ``engine.consolidate_turns`` setting) also folds every
        unmerged turn record into its thread's page (:mod:`memdir.engine.threads`).
        """
        h = self._harness(writing=True)
        fold_turns = self.settings.engine.consolidate_turns if turns is None else turns
        if not (self._root / "PROGRAM.md").is_file():
            # With no bundles every source would be quarantined as a misfit.
            raise ConfigError(
                "PROGRAM.md is missing, so no bundle can take a source; restore it or run "
                "`memdir init --force`"
            )
        prog = self.program()
        self.sync()
        if not prog.bundles and apply is None and any(files.markdown_under(self._root, "inbox")):
            # The same reason: each waiting source would be moved to quarantine/. The store's
            # state, not the request, is what stops it (409, as for a changed harness).
            raise Conflict(
                "PROGRAM.md defines no bundle, so no source can be filed; add one with "
                "`memdir bundle add NAME --scope '...'` (the inbox is left as it is)"
            )
        root = self._root
        lessons = self.experience.lessons()
        recall = self.experience.recaller(lessons)
        turn_rels = (
            threads.unmerged_turns(e.path for e in self.memory_report().unmerged)
            if plan or fold_turns or apply is not None
            else []
        )
        rt = placing.router_for(self.settings) if apply is None else None
        if plan:  # the packet lists sources and threads with unmerged turns alike
            packet = consolidating.plan(root, prog, h, recall=recall, router=rt)
            return {**packet, "threads": turnfacts.plan_items(root, turn_rels)}
        who = (actor or "").strip() or ACTOR
        applied = consolidating.Applied()
        pages: dict[str, str] = {}
        if apply is not None:
            # Checked before the run starts: a refused packet is not a failed run.
            data = consolidating.load_apply_file(apply) if isinstance(apply, str) else apply
            applied = consolidating.validate_apply(
                root, prog, h, data, check_file=self.store.check_document
            )
            pages = turnfacts.agent_pages(root, data, turn_rels)
            fold_turns = fold_turns or bool(pages)
        judge = None
        batch = files.Batch(self.store, self.index)
        # All or nothing: if any step fails (an article no write accepts, a provider that
        # raises, a full disk), every file is put back and the inbox stays as it was.
        with batch.all_or_nothing("consolidate"):
            if apply is not None:
                outcome = consolidating.Outcome()
                for rel, request, text in applied.articles:
                    batch.write(rel, text)
                    outcome.articles.append(rel)
                    outcome.bundles.add(request.bundle)
                by = (actor or "").strip() or "agent"  # who decided, not the router
                for src, reason in applied.quarantine:
                    to = consolidating.quarantine(batch, src, reason, {}, by=by)
                    outcome.quarantined.append({"source": src.path, "to": to, "reason": reason})
                writer_name = "agent"
                writer: writing.Writer = writing.ExtractiveWriter()
            else:
                writer = plugins.build("writer", self.settings.engine.writer, self.settings)
                writer_name = writer.name
                judge = judging.for_settings(self.settings)
                outcome = consolidating.run(
                    batch,
                    root,
                    prog,
                    h,
                    writer,
                    actor=who,
                    limit=limit,
                    recall=recall,
                    router=rt,
                    judge=judge,
                )
            outcome.lessons_recalled = len(lessons)
            folded = threads.Folded()
            if fold_turns:
                at = reflect.rfc3339(reflect.now_utc())
                folded = threads.fold(batch, root, turn_rels, actor=who, date=at, pages=pages)
                filing = turnfacts.Filing(prog, h, writer, who, at, rt)
                outcome.bundles |= turnfacts.file_threads(batch, root, folded, filing)
                outcome.articles += folded.articles
            for bundle in sorted(outcome.bundles):
                wiki.regenerate(batch, root, prog, bundle)
            wiki.regenerate_top(batch, root, prog)
            notes = {
                "articles": len(outcome.articles),
                "quarantined": len(outcome.quarantined),
                "skipped": len(outcome.skipped),
                "bundles": ",".join(sorted(outcome.bundles)) or "-",
                "writer": writer_name,
                "router": outcome.router if apply is None else "agent",
                "fallbacks": sum(1 for n in outcome.notes if "fallback" in n or "refused" in n),
                **(outcome.judged.run_notes() if outcome.judged is not None else {}),
                "turns_folded": folded.turns,
                "thread_pages": len(folded.pages),
                **harness.yardstick(root),
            }
            status = "ok" if not outcome.skipped else "partial"
            batch.log_run("consolidate", status, notes)
            audit = self._refine_into(batch, label_run=True)
            if outcome.articles or outcome.quarantined or outcome.skipped or folded.turns:
                # A run that did nothing leaves its runs.tsv row and no episode.
                self.experience.record_operational(
                    batch,
                    "consolidate",
                    situation=runepisode.situation(outcome, folded.turns),
                    actions=runepisode.actions(outcome, folded, audit),
                    outcome=runepisode.outcome(outcome, folded.turns),
                    insights=runepisode.insights(outcome, audit, folded),
                )
            reflected = self.experience.reflect_into(batch)
            self.sync()
        message = (
            f"consolidate: {len(outcome.articles)} article(s) in "
            f"{', '.join(sorted(outcome.bundles)) or 'no bundle'}, "
            f"{len(outcome.quarantined)} quarantined; drift {audit['drift']} ({audit['label']})"
        )
        if fold_turns:
            message += f"; {folded.turns} turn(s) folded into {len(folded.pages)} thread page(s)"
        batch.commit(message, actor=who)
        return {
            "articles": outcome.articles,
            "turns": folded.to_dict(),
            "quarantined": outcome.quarantined,
            "placements": outcome.placements,
            "router": {"method": outcome.router, "note": outcome.router_note},
            "skipped": outcome.skipped,
            "notes": outcome.notes,
            "lessons_recalled": outcome.lessons_recalled,
            "refine": audit,
            "reflect": reflected,
            "commit": message,
        }

    # -- quarantine ----------------------------------------------------------------------

    def quarantine_list(self) -> list[dict[str, Any]]:
        """The quarantined sources, oldest first, with the reason and the routing scores."""
        return [e.to_dict() for e in quarantining.entries(self._root)]

    def quarantine_release(
        self, path: str, *, bundle: str, topic: str | None = None, actor: str | None = None
    ) -> dict[str, Any]:
        """Move a quarantined source back to the inbox naming ``bundle`` (and ``topic``), so
        the next consolidate files it there."""
        self._harness(writing=True)
        check_bundle_exists([b.name for b in self.program().bundles], bundle)
        if topic is not None:
            topic = terms.slugify(one_line("topic", topic, max_chars=200))
        who = actor_name(actor) if actor and actor.strip() else ACTOR
        batch = files.Batch(self.store, self.index)
        # One release at a time, across processes: two at once would both read the source
        # and file it twice (the second now finds it gone: NotFound).
        with quarantining.lock(self._root):
            with batch.all_or_nothing("quarantine release"):
                target = quarantining.release(batch, self._root, path, bundle, topic)
                notes = {"source": target, "bundle": bundle, "topic": topic}
                batch.log_run("quarantine-release", "ok", notes)
            batch.commit(f"quarantine release {path} to {bundle}", actor=who)
        self.sync()
        return {"from": path, "path": target, "bundle": bundle, "topic": topic}

    # -- refine --------------------------------------------------------------------------

    def refine(self, *, label: str | None = None) -> dict[str, Any]:
        """The drift audit, compared with the previous refine run (written to runs.tsv)."""
        self._harness(writing=True)  # judged against the pinned yardstick only
        self.sync()
        batch = files.Batch(self.store, self.index)
        result = self._refine_into(batch, label_run=True, name=label)
        batch.commit(f"refine: drift {result['drift']} ({result['label']})")
        return result

    def _refine_into(
        self, batch: files.Batch, *, label_run: bool, name: str | None = None
    ) -> dict[str, Any]:
        h = harness.load(self._root)
        audit = refining.audit(self._root, self.program(), h)
        # What this run wrote so far is indexed first: the index is stale only if the files
        # changed some other way (consolidate reported its own articles as staleness).
        self.index.sync_paths([p for p in batch.paths if not p.startswith(".memdir/")])
        audit.stale_index = not self.index.compare().in_step
        previous = [r for r in runs.history(self._root, "refine") if "drift" in r.notes]
        before = int(previous[-1].notes["drift"]) if previous else None
        verdict = runs.label(before, audit.drift, lower_is_better=True)
        delta = audit.drift - (before if before is not None else audit.drift)
        result = audit.to_dict()
        result.update({"label": verdict, "delta": delta, "previous": before})
        # Files two machines both changed, waiting for a person (memdir.files.sync).
        result["sync_conflicts"] = [c.path for c in gitsync.open_conflicts(self._root)]
        if label_run:
            head = f"run=refine {verdict}"
            notes: dict[str, Any] = {"drift": audit.drift, "delta": f"{delta:+d}"}
            if name:
                notes["name"] = name
            bad = [b for b, v in audit.okf.items() if v]
            notes["okf"] = "conformant" if not bad else "violations:" + ",".join(bad)
            notes.update(harness.yardstick(self._root))
            batch.log_run("refine", "ok", notes, head=head)
        return result

    # -- query ---------------------------------------------------------------------------

    def query(self, question: str) -> dict[str, Any]:
        """Tiered recall: snapshot, index walk, then search; pointers with citations."""
        if not question.strip():
            raise InvalidInput("query needs a question")
        query_words(question)  # one with no searchable word is refused, as search refuses it
        self._harness(writing=True)  # no recall judged against an edited harness
        with self.synced():  # one walk of the files for every tier
            recall = self._recall(question)
        out = recall.to_dict()
        out["tokens_read"] = sum(
            count_tokens((self._root / p).read_text(encoding="utf-8", errors="replace"))
            for p in recall.indexes_read + recall.bodies_read
        )
        return out

    def _recall(self, question: str) -> querying.Recall:
        def search(q: str, limit: int) -> list[Any]:
            hits: list[Any] = self.search(q, limit=limit, path_prefix="wiki/")
            # A nearest neighbour always exists; tier 2 keeps only hits the words support
            # or whose meaning is close enough (MiniLM cosine), so "nothing found" stays true.
            return [h for h in hits if _supported(getattr(h, "why", {}) or {})]

        def visible(rel: str) -> bool:
            # As search sees the store: indexed (inside it, a regular file), not forgotten,
            # not in quarantine/ or inbox/.
            return listing.searchable(self.index.conn, rel)

        return querying.run(
            self._root, self.program(), question, search, visible, settings=self.settings
        )

    # -- evaluate ------------------------------------------------------------------------

    def evaluate(self) -> dict[str, Any]:
        """Run evals/questions.yaml through query; compare MRR with the previous run."""
        self._harness(writing=True)
        questions = evaluating.load_questions(self._root)
        if not questions:
            # A score of 0 would be logged as a regression and become the next baseline.
            raise InvalidInput(
                "evals/questions.yaml has no questions: add items like "
                "{question: ..., expected: [wiki/<bundle>/<topic>/<article>.md]}; "
                "nothing was recorded"
            )
        # Pinned on the first evaluate; a changed set is refused until harness accept.
        digest = harness.check_questions(self._root) or ""
        with self.synced():  # one walk of the files for the whole question set
            result = evaluating.score(questions, self._recall, count_tokens, self._root)
        # Compared only with runs over the same questions: a new set starts a new baseline.
        previous = [
            r
            for r in runs.history(self._root, "evaluate")
            if "mrr" in r.notes and r.notes.get("questions_sha") == digest[:12]
        ]
        before = float(previous[-1].notes["mrr"]) if previous else None
        result["label"] = runs.label(before, result["mrr"], lower_is_better=False)
        result["previous_mrr"] = before
        notes = {k: result[k] for k in ("questions", "hit@1", "hit@3", "hit@5", "mrr")}
        notes.update(
            {
                "bodies_read_avg": result["bodies_read_avg"],
                "tokens_read_avg": result["tokens_read_avg"],
            }
        )
        for tier, value in result["recall_by_tier"].items():
            notes[f"recall_tier{tier}"] = value
        notes.update(harness.yardstick(self._root))
        batch = files.Batch(self.store, self.index)
        batch.log_run("evaluate", "ok", notes, head=f"run=evaluate {result['label']}")
        self.experience.record_operational(
            batch,
            "evaluate",
            situation=f"evaluate {result['questions']} question(s) through query",
            actions=[f"{k} {result[k]}" for k in ("hit@1", "hit@3", "mrr")],
            outcome="failure" if result["label"] == "regress" else "success",
            insights=(
                [f"Recall fell: MRR went from {before} to {result['mrr']}."]
                if result["label"] == "regress"
                else []
            ),
        )
        batch.commit(f"evaluate: mrr {result['mrr']} ({result['label']})")
        return result


def check_bundle_exists(names: Sequence[str], name: str) -> None:
    if name not in names:
        raise NotFound(f"no bundle named '{name}'")


TIER2_MIN_COSINE = 0.45


def _supported(why: dict[str, Any]) -> bool:
    if why.get("bm25_rank") is not None or why.get("mode", "bm25") == "bm25":
        return True
    return float(why.get("vector_score") or 0.0) >= TIER2_MIN_COSINE
