"""refine: the read-only audit. Drift is the number of defects the harness lists, each with
its files; OKF conformance, contested/superseded pages, oversized topics and a stale index are
reported beside it."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..doc import frontmatter, links
from ..doc.text import read_utf8
from ..records import field, recordclass
from . import okf, reflect, wiki
from .files import markdown_under
from .harness import Harness, validate_article
from .program import Program

EXPERIENCE = ("episodes/operational", "episodes/life", "episodes/signal")


@recordclass
class Audit:
    defects: dict[str, list[str]] = field(default_factory=dict)
    okf: dict[str, list[str]] = field(default_factory=dict)
    contested: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    oversized_topics: list[str] = field(default_factory=list)
    stale_index: bool = False

    @property
    def drift(self) -> int:
        return sum(len(v) for v in self.defects.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "drift": self.drift,
            "components": {k: {"count": len(v), "items": v} for k, v in self.defects.items()},
            "okf": {b: (v or "conformant") for b, v in self.okf.items()},
            "contested": self.contested,
            "superseded": self.superseded,
            "oversized_topics": self.oversized_topics,
            "stale_index": self.stale_index,
        }


def _resolve(src: str, target: str, root: Path) -> str | None:
    """Store-relative path a markdown link points at (None for external links)."""
    if "://" in target or target.startswith(("mailto:", "#")):
        return None
    target = target.split("#", 1)[0]
    if not target:
        return None
    if target.startswith("/"):
        bundle_root = "/".join(src.split("/")[:2])  # wiki/<bundle>
        return posixpath.normpath(bundle_root + target)
    return posixpath.normpath(posixpath.join(posixpath.dirname(src), target))


def _in_store(root: Path, bundle: str, ref: okf.Reference) -> bool:
    """Whether a reference of ``wiki/<bundle>/`` names a file of the store."""
    if ref.path is None:
        return False
    rel = ref.path if ref.kind == "source" else posixpath.normpath(f"wiki/{bundle}/{ref.path}")
    return (root / rel).is_file() or (ref.kind in ("link", "index") and (root / rel).exists())


def store_resolver(root: Path, bundle: str) -> Callable[[okf.Reference], bool]:
    """How a bundle's cross-references resolve in the store: in its own folder, in another
    bundle's (``../<bundle>/...``), and sources from the store root."""
    return lambda ref: _in_store(root, bundle, ref)


def audit(root: Path, program: Program, harness: Harness) -> Audit:
    result = Audit(defects={name: [] for name in harness.defects})

    def add(kind: str, item: str) -> None:
        if kind in result.defects:
            result.defects[kind].append(item)

    all_articles: dict[str, wiki.Article] = {}
    stems: dict[str, list[str]] = {}
    bundles = wiki.bundle_names(root, program)
    for bundle in bundles:
        for a in wiki.articles(root, bundle):
            all_articles[a.path] = a
            stems.setdefault(a.slug.lower(), []).append(a.path)
    top = read_utf8(root / "index.md") if (root / "index.md").is_file() else ""
    top_urls = {e.path for e in okf.entries(top)}
    for bundle in bundles:
        files = {
            rel.split("/", 2)[2]: (root / rel).read_text(encoding="utf-8", errors="replace")
            for rel in markdown_under(root, f"wiki/{bundle}")
        }
        result.okf[bundle] = okf.conformance(files, resolve=store_resolver(root, bundle))
        if f"wiki/{bundle}/index.md" not in top_urls:
            add("index_mismatch", f"index.md: bundle '{bundle}' is not listed")
        inbound: dict[str, set[str]] = {}
        for rel_in_bundle, text in files.items():
            src = f"wiki/{bundle}/{rel_in_bundle}"
            parsed = frontmatter.parse(text)
            name = rel_in_bundle.rsplit("/", 1)[-1]
            folder = posixpath.dirname(src)
            if name == "index.md":
                listed = set()
                for entry in okf.entries(text):
                    dest = _resolve(src, entry.path, root)
                    if dest is None:
                        continue
                    listed.add(dest)
                    if not (root / dest).is_file():
                        add("index_mismatch", f"{src}: entry '{entry.url}' points at no file")
                    else:
                        inbound.setdefault(dest, set()).add(src)
                for child in sorted((root / folder).iterdir()):
                    crel = f"{folder}/{child.name}"
                    if child.name.startswith("."):
                        continue
                    if child.is_dir() and f"{crel}/index.md" not in listed:
                        add("index_mismatch", f"{src}: topic '{child.name}' is not listed")
                    elif (
                        child.suffix == ".md"
                        and child.name not in okf.RESERVED
                        and (crel not in listed)
                    ):
                        add("index_mismatch", f"{src}: '{child.name}' is not listed")
                continue
            if name != "log.md" and not (root / folder / "index.md").is_file():
                add("index_mismatch", f"{src}: its folder has no index.md")
            for link in links.extract(parsed.body):
                if link.external:
                    continue
                if link.kind == "markdown":
                    dest = _resolve(src, link.target, root)
                    if dest is None:
                        continue
                    if not (root / dest).exists():
                        add("broken_link", f"{src}: link '{link.target}' points at no file")
                    elif dest.startswith(f"wiki/{bundle}/"):
                        inbound.setdefault(dest, set()).add(src)
                else:
                    target = link.target.split("#", 1)[0].strip()
                    slug = posixpath.basename(target)
                    slug = slug[:-3] if slug.endswith(".md") else slug
                    found = stems.get(slug.lower(), [])  # Obsidian resolves names in any case
                    same = [p for p in found if p.startswith(f"wiki/{bundle}/")]
                    if same:
                        for p in same:
                            inbound.setdefault(p, set()).add(src)
                    elif found:
                        add("cross_bundle_wikilink", f"{src}: [[{link.target}]] -> {found[0]}")
                    elif not (root / (target if "." in slug else target + ".md")).exists():
                        add("broken_link", f"{src}: [[{link.target}]] resolves to nothing")
            if name == "log.md":
                continue
            article = all_articles.get(src)
            if article is None:
                continue
            problems = validate_article(harness, parsed.fm, parsed.body, fm_error=parsed.error)
            if not parsed.has_block:
                problems = ["no frontmatter"]
            for p in problems:
                add("schema_violation", f"{src}: {p}")
            for ref in okf.references(rel_in_bundle, parsed.fm, ""):
                if ref.kind == "related" and not _in_store(root, bundle, ref):
                    add("broken_link", f"{src}: related '{ref.target}' points at no file")
            status = str(parsed.fm.get("memory_status", "")).strip().lower()
            if status == "contested" or parsed.fm.get("contradicts"):
                result.contested.append(src)
            if status == "superseded":
                result.superseded.append(src)
        for path, a in all_articles.items():
            if a.bundle == bundle and not (inbound.get(path, set()) - {path}):
                add("orphan", f"{path}: no inbound link from bundle '{bundle}'")
        counts: dict[str, int] = {}
        for a in all_articles.values():
            if a.bundle == bundle and a.topic:
                counts[a.topic] = counts.get(a.topic, 0) + 1
        for topic, n in sorted(counts.items()):
            if n > program.budgets.topic_max_articles:
                result.oversized_topics.append(
                    f"wiki/{bundle}/{topic}: {n} articles > {program.budgets.topic_max_articles}"
                )
    _episodes(root, add)
    return result


def _episodes(root: Path, add: Any) -> None:
    known: set[str] = set()
    for folder in EXPERIENCE:
        for rel in markdown_under(root, folder):
            known.add(rel)
            text = (root / rel).read_text(encoding="utf-8", errors="replace")
            _, problems = reflect.read_episode(rel, text)
            for p in problems:
                add("episode_integrity", f"{rel}: {p}")
    lessons = root / "LESSONS.md"
    if lessons.is_file():
        body = frontmatter.parse(lessons.read_text(encoding="utf-8", errors="replace")).body
        for link in links.extract(body):
            if (
                link.kind == "markdown"
                and not link.external
                and link.target.startswith("episodes/")
                and not (root / link.target).is_file()
            ):
                add("episode_integrity", f"LESSONS.md: cites missing episode {link.target}")


def summary(audit_: Audit) -> Mapping[str, int]:
    return {k: len(v) for k, v in audit_.defects.items()}
