"""The wiki on disk: bundles, topics, articles, and the generated routers and logs."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from ..doc import frontmatter
from ..records import recordclass
from . import okf
from .files import Batch, markdown_under
from .program import Program
from .writer import RelatedArticle


@recordclass
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


def _folder_entry(folder: str, under: list[Article]) -> okf.Entry:
    """The index line of a folder: its index, with how many articles it holds (at any depth)."""
    name = folder.rsplit("/", 1)[-1]
    listed = sorted(under, key=lambda a: a.title.lower())
    count = len(listed)
    titles = ", ".join(a.title for a in listed[:3]) + (", ..." if count > 3 else "")
    return okf.Entry(
        _topic_title(name),
        okf.url_for(f"{name}/index.md"),
        f"{count} article{'s' if count != 1 else ''}: {titles}",
    )


def _article_entries(items: list[Article]) -> list[okf.Entry]:
    listed = sorted(items, key=lambda a: a.title.lower())
    return [okf.Entry(a.title, okf.url_for(a.slug + ".md"), a.description) for a in listed]


def regenerate(batch: Batch, root: Path, program: Program, bundle: str) -> list[str]:
    """Rewrite a bundle's indexes (one per folder that holds articles), root index and log.md.

    A topic is a folder under the bundle; an article filed deeper (``topic/part/a.md``) gets an
    index in each folder down to it, so every index line points at a file in its own folder or
    at the index of a folder just below.
    """
    items = articles(root, bundle)
    prefix = f"wiki/{bundle}/"
    direct: dict[str, list[Article]] = {}  # bundle-relative folder ("" is the root) -> articles
    under: dict[str, list[Article]] = {}  # folder -> articles at any depth below it
    for a in items:
        folder = posixpath.dirname(a.path[len(prefix) :])
        direct.setdefault(folder, []).append(a)
        parts = folder.split("/") if folder else []
        for n in range(1, len(parts) + 1):
            under.setdefault("/".join(parts[:n]), []).append(a)
    children: dict[str, list[str]] = {}
    for folder in under:
        children.setdefault(posixpath.dirname(folder), []).append(folder)
    written = []
    for folder in sorted(f for f in under if f):
        groups: list[tuple[str, list[okf.Entry]]] = []
        subs = sorted(children.get(folder, []))
        if subs:
            groups.append(("Topics", [_folder_entry(f, under[f]) for f in subs]))
        if direct.get(folder):
            groups.append(("Articles", _article_entries(direct[folder])))
        title = _topic_title(folder.rsplit("/", 1)[-1])
        text = okf.render_index(title, groups)
        written.append(batch.write(f"{prefix}{folder}/index.md", text))
    groups = [("Topics", [_folder_entry(f, under[f]) for f in sorted(children.get("", []))])]
    if direct.get(""):
        groups.append(("Articles", _article_entries(direct[""])))
    written.append(batch.write(f"{prefix}index.md", okf.render_index(bundle, groups, root=True)))
    log_items = []
    for a in sorted(items, key=lambda a: (str(_generated_at(a)), a.path)):
        rel = a.path[len(prefix) :]
        link = f"[{okf.link_text(a.title)}]({okf.url_for(rel)})"
        date = okf.log_date(_generated_at(a))
        log_items.append(okf.LogEntry(date, f"Added {link} by {_generated_by(a)}"))
    written.append(batch.write(f"{prefix}log.md", okf.render_log(f"{bundle} log", log_items)))
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
        entries.append(
            okf.Entry(name, okf.url_for(f"wiki/{name}/index.md"), spec.scope if spec else "")
        )
    body = okf.render_index("Index", [("Bundles", entries)])
    return batch.write("index.md", frontmatter.render(dict(TOP_INDEX_FM), body))
