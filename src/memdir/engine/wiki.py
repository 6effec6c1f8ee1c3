"""The wiki on disk: bundles, topics, articles, and the generated routers and logs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import frontmatter
from ..program import Program
from . import okf
from .files import Batch, markdown_under
from .writer import RelatedArticle


@dataclass
class Article:
    path: str  # store-relative
    bundle: str
    topic: str
    slug: str
    fm: dict[str, Any]
    body: str
    error: str | None

    @property
    def title(self) -> str:
        value = self.fm.get("title")
        return str(value) if isinstance(value, str) and value.strip() else self.slug

    @property
    def description(self) -> str:
        value = self.fm.get("description")
        return str(value) if isinstance(value, str) else ""

    @property
    def bundle_path(self) -> str:
        """``/topic/slug.md`` inside the bundle."""
        return "/" + self.path.split("/", 2)[2]


def bundle_names(root: Path, program: Program) -> list[str]:
    """Bundles of PROGRAM.md, then any other folder under ``wiki/``."""
    names = [b.name for b in program.bundles]
    wiki = root / "wiki"
    if wiki.is_dir():
        names += sorted(
            p.name
            for p in wiki.iterdir()
            if p.is_dir() and not p.name.startswith(".") and p.name not in names
        )
    return names


def articles(root: Path, bundle: str) -> list[Article]:
    out = []
    for rel in markdown_under(root, f"wiki/{bundle}"):
        parts = rel.split("/")
        if parts[-1] in okf.RESERVED:
            continue
        text = (root / rel).read_text(encoding="utf-8", errors="replace")
        parsed = frontmatter.parse(text)
        topic = parts[2] if len(parts) > 3 else ""
        slug = parts[-1][:-3]
        out.append(Article(rel, bundle, topic, slug, parsed.fm, parsed.body, parsed.error))
    return out


def related_candidates(items: list[Article]) -> tuple[RelatedArticle, ...]:
    return tuple(RelatedArticle(a.bundle_path, a.title, a.description) for a in items)


def _topic_title(topic: str) -> str:
    return topic.replace("-", " ").capitalize()


def regenerate(batch: Batch, root: Path, program: Program, bundle: str) -> list[str]:
    """Rewrite a bundle's topic indexes, root index and log.md from its articles."""
    items = articles(root, bundle)
    by_topic: dict[str, list[Article]] = {}
    for a in items:
        by_topic.setdefault(a.topic, []).append(a)
    written = []
    topic_entries = []
    for topic in sorted(t for t in by_topic if t):
        listed = sorted(by_topic[topic], key=lambda a: a.title.lower())
        entries = [okf.Entry(a.title, f"{a.slug}.md", a.description) for a in listed]
        text = okf.render_index(_topic_title(topic), [("Articles", entries)])
        written.append(batch.write(f"wiki/{bundle}/{topic}/index.md", text))
        count = len(listed)
        titles = ", ".join(a.title for a in listed[:3]) + (", ..." if count > 3 else "")
        topic_entries.append(
            okf.Entry(
                _topic_title(topic),
                f"{topic}/index.md",
                f"{count} article{'s' if count != 1 else ''}: {titles}",
            )
        )
    groups: list[tuple[str, list[okf.Entry]]] = [("Topics", topic_entries)]
    loose = sorted(by_topic.get("", []), key=lambda a: a.title.lower())
    if loose:
        groups.append(
            ("Articles", [okf.Entry(a.title, f"{a.slug}.md", a.description) for a in loose])
        )
    spec = program.bundle(bundle)
    title = bundle if spec is None else f"{bundle}"
    written.append(
        batch.write(f"wiki/{bundle}/index.md", okf.render_index(title, groups, root=True))
    )
    log_items = []
    for a in sorted(items, key=lambda a: (str(_generated_at(a)), a.path)):
        at = _generated_at(a)
        date = at[:10] if len(at) >= 10 else "1970-01-01"
        rel = a.path.split("/", 2)[2]
        log_items.append(okf.LogEntry(date, f"Added [{a.title}]({rel}) by {_generated_by(a)}"))
    written.append(batch.write(f"wiki/{bundle}/log.md", okf.render_log(f"{bundle} log", log_items)))
    return written


def _generated_at(a: Article) -> str:
    gen = a.fm.get("generated")
    return str(gen.get("at", "")) if isinstance(gen, dict) else ""


def _generated_by(a: Article) -> str:
    gen = a.fm.get("generated")
    return str(gen.get("by", "unknown")) if isinstance(gen, dict) else "unknown"


TOP_INDEX_FM = {"title": "Index", "memory_kind": "semantic", "type": "index"}


def regenerate_top(batch: Batch, root: Path, program: Program) -> str:
    """The store's top router: one line per bundle, pointing at its index."""
    entries = []
    for name in bundle_names(root, program):
        spec = program.bundle(name)
        entries.append(okf.Entry(name, f"wiki/{name}/index.md", spec.scope if spec else ""))
    body = okf.render_index("Index", [("Bundles", entries)])
    return batch.write("index.md", frontmatter.render(dict(TOP_INDEX_FM), body))
