"""The turn DAG in the index: walks over ``turn_edges`` and ``turn_nodes``, a thread's turns.

Nothing here reads a file: a walk answers from the index alone (the turn verbs and the
context pack call it; :mod:`memdir.turns.verbs` drops turns whose file is a symlink).
"""

from __future__ import annotations

import sqlite3
from typing import Any, NamedTuple

from ..doc.turnrecord import is_turn_id, not_a_turn_id
from ..errors import InvalidInput, NotFound


class DagNode(NamedTuple):
    """A turn reached by a DAG walk, ``depth`` steps away (a named tuple: a walk can make a
    thousand of them, and a tuple is made three times faster than a frozen dataclass).

    Walking up also reaches the documents a turn names as parents (an article, an episode,
    a source): their ``id`` is their path, ``type`` their frontmatter type, and a walk goes
    no further up from them.
    """

    id: str
    path: str
    depth: int
    thread: str
    user: str
    created: str
    type: str = "turn"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "depth": self.depth,
            "thread": self.thread,
            "user": self.user,
            "created": self.created,
            "type": self.type,
        }


def walk(conn: sqlite3.Connection, start: str, depth: int, limit: int, up: bool) -> list[DagNode]:
    """The turns ``depth`` steps around ``start``, nearest first; never reads a file.

    One recursive query over (turn, depth) pairs first; on a DAG so dense that the
    pairs pass a cap (``limit`` x 20), the breadth-first walk with a visited set,
    which is bounded by ``limit``, answers instead.
    """
    if not is_turn_id(start):
        raise InvalidInput(not_a_turn_id(start))
    if depth < 0 or limit < 1:
        raise InvalidInput("depth must be >= 0 and limit >= 1")
    if up:
        step = "SELECT e.parent, w.depth + 1 FROM walk w CROSS JOIN turn_edges e "
        step += "WHERE e.child = w.eid AND w.depth < ?"
    else:
        step = "SELECT e.child, w.depth + 1 FROM walk w CROSS JOIN turn_edges e "
        step += "WHERE e.parent = w.eid AND w.depth < ?"
    cap = limit * 20
    # A step is one seek in turn_edges (by child upwards, by parent downwards); the walk
    # dedups (turn, depth) pairs; each turn found then takes its smallest depth and one
    # seek in turn_nodes for its columns. A dangling parent id has no turn_nodes row.
    cur = conn.cursor()
    cur.row_factory = None  # plain tuples: a walk can return a thousand rows
    rows = cur.execute(
        f"WITH RECURSIVE walk(eid, depth) AS (SELECT ?, 0 UNION {step} LIMIT ?), "
        "best(eid, depth, n) AS (SELECT eid, min(depth), count(*) FROM walk GROUP BY eid) "
        "SELECT b.eid, b.depth, b.n, n.path, n.thread, n.user, n.created, n.hidden "
        "FROM best b LEFT JOIN turn_nodes n ON n.eid = b.eid ORDER BY b.depth, b.eid DESC",
        (start, depth, cap),
    ).fetchall()
    if not rows or rows[0][0] != start or rows[0][3] is None:
        raise NotFound(f"no such turn: {start}")
    if sum({r[0]: r[2] for r in rows}.values()) >= cap:
        return walk_bfs(conn, start, depth, limit, up)
    docs = documents(conn, [r[0] for r in rows if r[3] is None and not is_turn_id(r[0])])
    nodes: list[DagNode] = []
    seen = {start}
    for eid, level, _n, path, thread, user, created, hidden in rows:
        if eid in seen:
            continue  # a second file with the same id
        if path is None:  # a document parent, or a dangling parent id (no turn_nodes row)
            doc = docs.get(eid)
            if doc is None:
                continue
            nodes.append(doc._replace(depth=level))
        elif hidden:
            continue  # a forgotten turn
        else:
            nodes.append(DagNode(eid, path, level, thread or "", user or "", created or ""))
        seen.add(eid)
        if len(nodes) == limit:
            break
    return nodes


def documents(conn: sqlite3.Connection, rels: list[str]) -> dict[str, DagNode]:
    """The visible documents among ``rels`` (paths named as parents), as nodes of depth 0."""
    out: dict[str, DagNode] = {}
    for i in range(0, len(rels), 500):
        chunk = rels[i : i + 500]
        marks = ",".join("?" * len(chunk))
        for path, kind, created in conn.execute(
            f"SELECT path, type, created FROM docs WHERE path IN ({marks}) AND hidden = 0",
            chunk,
        ):
            out[path] = DagNode(path, path, 0, "", "", str(created or ""), str(kind or "document"))
    return out


def walk_bfs(
    conn: sqlite3.Connection, start: str, depth: int, limit: int, up: bool
) -> list[DagNode]:
    """Breadth-first over the index: one query per level, a visited set, no file read.

    A cycle made by hand cannot loop (visited set); the work is bounded by ``depth``
    levels and stops once ``limit`` turns are found.
    """
    if not is_turn_id(start):
        raise InvalidInput(not_a_turn_id(start))
    if depth < 0 or limit < 1:
        raise InvalidInput("depth must be >= 0 and limit >= 1")
    cols = "n.eid AS episode_id, n.path, n.thread, n.user, n.created, n.hidden"
    if up:
        sql = (
            f"SELECT {cols}, e.parent AS next FROM turn_nodes n LEFT JOIN turn_edges e "
            "ON e.child = n.eid AND e.doc_id = n.doc_id WHERE n.eid IN ({})"
        )
    else:
        sql = (
            f"SELECT {cols}, n.eid AS next FROM turn_edges e CROSS JOIN turn_nodes n "
            "WHERE e.parent IN ({}) AND n.eid = e.child AND n.doc_id = e.doc_id"
        )
    info: dict[str, DagNode] = {}
    hidden: set[str] = set()
    seen = {start}
    found: list[tuple[str, int]] = []

    def query(ids: list[str]) -> list[sqlite3.Row]:
        rows: list[sqlite3.Row] = []
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            rows += conn.execute(sql.format(",".join("?" * len(chunk))), chunk).fetchall()
        return rows

    def note(row: sqlite3.Row, level: int) -> None:
        ident = row["episode_id"]
        if ident not in info:
            info[ident] = DagNode(
                ident, row["path"], level, row["thread"] or "", row["user"] or "",
                row["created"] or "",
            )  # fmt: skip
            if row["hidden"]:
                hidden.add(ident)

    if up:
        rows = query([start])
        if not rows:
            raise NotFound(f"no such turn: {start}")
    else:
        exists = conn.execute("SELECT 1 FROM turn_nodes WHERE eid = ? LIMIT 1", (start,)).fetchone()
        if exists is None:
            raise NotFound(f"no such turn: {start}")
        rows = []
    frontier = [start]
    level = 0
    while frontier and level < depth and len(found) < limit + len(hidden):
        level += 1
        if not up:
            rows = query(frontier)
        nxt: list[str] = []
        for row in rows:
            ident = row["next"]
            if ident and ident not in seen:
                seen.add(ident)
                nxt.append(ident)
            if not up:
                note(row, level)
        nxt.sort(reverse=True)
        found.extend((n, level) for n in nxt)
        frontier = nxt
        if up and frontier:
            rows = query(frontier)
            for row in rows:
                note(row, level)
    docs = documents(conn, [i for i, _ in found if i not in info and not is_turn_id(i)])
    nodes = []
    for ident, level in found:
        node = info.get(ident) or docs.get(ident)
        if node is None or ident in hidden:
            continue  # a dangling parent id, or a forgotten turn
        nodes.append(node._replace(depth=level))
    return nodes[:limit]


def thread_turns(conn: sqlite3.Connection, thread: str, last: int) -> list[DagNode]:
    """The latest ``last`` turns of a thread, newest first (depth 0)."""
    rows = conn.execute(
        "SELECT episode_id, path, thread, user, created FROM docs "
        "WHERE thread = ? AND +type = 'turn' AND hidden = 0 "
        "ORDER BY created DESC, episode_id DESC LIMIT ?",
        (thread, last),
    ).fetchall()
    return [
        DagNode(
            r["episode_id"], r["path"], 0, r["thread"] or "", r["user"] or "", r["created"] or ""
        )
        for r in rows
    ]
