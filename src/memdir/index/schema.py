"""The index schema as named, ordered migrations (applied once each, in order)."""

from __future__ import annotations

# Migration 0700: where a turn's no-tool-calls note starts and ends in its full-text body.
_NOTE_AT = "instr(body, char(10, 10) || '## Compact' || char(10, 10) || '- No tool calls.')"
_OUTPUT_AT = "instr(body, char(10, 10) || '## Output' || char(10, 10))"
_NOTE = f"substr(body, {_NOTE_AT} + 14, {_OUTPUT_AT} - {_NOTE_AT} - 14)"

# Migration pg_0001: the Postgres engine's change log logs only once it is on.
_PG_ON = "EXISTS (SELECT 1 FROM meta WHERE key = 'pg_log_epoch')"


def _pg_note(path: str) -> str:
    return (
        f"INSERT INTO pg_log(path, seq) VALUES ({path}, "
        "(SELECT coalesce(max(seq), 0) + 1 FROM pg_log)) "
        "ON CONFLICT(path) DO UPDATE SET seq = excluded.seq;"
    )


def _pg_note_doc(doc_id: str) -> str:
    return (
        "INSERT INTO pg_log(path, seq) SELECT path, (SELECT coalesce(max(seq), 0) + 1 "
        f"FROM pg_log) FROM docs WHERE id = {doc_id} "
        "ON CONFLICT(path) DO UPDATE SET seq = excluded.seq;"
    )


MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_documents",
        """
        CREATE TABLE docs (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL UNIQUE,
            walk_key BLOB NOT NULL,
            hash TEXT NOT NULL,
            mtime_ns INTEGER NOT NULL,
            size INTEGER NOT NULL,
            fm TEXT NOT NULL,
            fm_ok INTEGER NOT NULL,
            title TEXT NOT NULL,
            memory_kind TEXT,
            type TEXT,
            status TEXT,
            episode_id TEXT,
            thread TEXT,
            user TEXT,
            created TEXT,
            hidden INTEGER NOT NULL DEFAULT 0,
            zone INTEGER NOT NULL DEFAULT 0,
            facts TEXT NOT NULL
        );
        CREATE INDEX docs_walk ON docs(walk_key);
        CREATE INDEX docs_episode ON docs(episode_id);
        CREATE INDEX docs_thread ON docs(thread, created);
        CREATE INDEX docs_user ON docs(user, created);
        CREATE INDEX docs_type ON docs(type, created);
        CREATE TABLE links (
            src INTEGER NOT NULL,
            kind TEXT NOT NULL,
            target TEXT NOT NULL,
            label TEXT
        );
        CREATE INDEX links_src ON links(src);
        CREATE INDEX links_target ON links(kind, target);
        CREATE VIRTUAL TABLE docs_fts USING fts5(
            title, body, tokenize = 'porter unicode61 remove_diacritics 2'
        );
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """,
    ),
    (
        # chunk vectors, derived (see memdir.vectors.index)
        "vectors_0001",
        """
        CREATE TABLE chunks (
            doc_id INTEGER NOT NULL,
            chunk_no INTEGER NOT NULL,
            start INTEGER NOT NULL,
            end INTEGER NOT NULL,
            text_hash TEXT NOT NULL,
            PRIMARY KEY (doc_id, chunk_no)
        );
        CREATE INDEX chunks_hash ON chunks(text_hash);
        CREATE TABLE vectors (
            model TEXT NOT NULL,
            text_hash TEXT NOT NULL,
            dim INTEGER NOT NULL,
            vec BLOB NOT NULL,
            PRIMARY KEY (model, text_hash)
        );
        CREATE TABLE embedded (
            doc_id INTEGER PRIMARY KEY,
            hash TEXT NOT NULL,
            model TEXT NOT NULL
        );
        """,
    ),
    (
        "0100_turns",
        """
        CREATE INDEX docs_routers ON docs(path)
            WHERE path = 'index.md' OR path LIKE '%/index.md';
        CREATE TABLE worklogs (
            doc_id INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL
        );
        CREATE VIRTUAL TABLE worklog_fts USING fts5(
            body, tokenize = 'porter unicode61 remove_diacritics 2'
        );
        """,
    ),
    (
        # cached postings of common words for BM25 (see memdir.index.postings)
        "0200_postings",
        """
        CREATE VIRTUAL TABLE docs_fts_vocab USING fts5vocab(docs_fts, row);
        CREATE TABLE fts_postings (
            term TEXT PRIMARY KEY,
            seq INTEGER NOT NULL,
            ids BLOB NOT NULL,
            w BLOB NOT NULL,
            dl BLOB NOT NULL
        );
        CREATE TABLE fts_log (doc_id INTEGER PRIMARY KEY, seq INTEGER NOT NULL);
        CREATE INDEX fts_log_seq ON fts_log(seq);
        """,
    ),
    (
        # DAG walks read only indexes: a turn's doc id and the columns a walk returns by
        # episode id, and a turn's parent ids by doc id (see memdir.turns.verbs)
        "0300_turn_walk",
        """
        CREATE INDEX docs_turn_walk
            ON docs(episode_id, type, hidden, path, thread, user, created);
        CREATE INDEX links_src_kind ON links(src, kind, target);
        """,
    ),
    (
        # the stamps a sync compares, read from this index alone (not the wide docs rows)
        "0400_stamps",
        """
        CREATE INDEX docs_stamp ON docs(path, mtime_ns, size);
        """,
    ),
    (
        # The turn DAG as two narrow tables keyed by episode id: a walk step is one seek
        # (child -> parents, or parent -> children) and a node's columns one more, instead
        # of a docs index seek and a links seek per step (see memdir.turns.verbs). They replace
        # the covering indexes of 0300, which only the walks used.
        "0500_turn_graph",
        """
        CREATE TABLE turn_nodes (
            eid TEXT NOT NULL,
            doc_id INTEGER NOT NULL,
            path TEXT NOT NULL,
            thread TEXT,
            user TEXT,
            created TEXT,
            hidden INTEGER NOT NULL,
            PRIMARY KEY (eid, doc_id)
        ) WITHOUT ROWID;
        CREATE TABLE turn_edges (
            child TEXT NOT NULL,
            parent TEXT NOT NULL,
            doc_id INTEGER NOT NULL,
            PRIMARY KEY (child, parent, doc_id)
        ) WITHOUT ROWID;
        CREATE INDEX turn_edges_parent ON turn_edges(parent, child);
        INSERT INTO turn_nodes(eid, doc_id, path, thread, user, created, hidden)
            SELECT episode_id, id, path, thread, user, created, hidden FROM docs
            WHERE type = 'turn' AND episode_id IS NOT NULL;
        INSERT OR IGNORE INTO turn_edges(child, parent, doc_id)
            SELECT d.episode_id, l.target, d.id FROM links l JOIN docs d ON d.id = l.src
            WHERE l.kind = 'parent' AND d.type = 'turn' AND d.episode_id IS NOT NULL;
        DROP INDEX IF EXISTS docs_turn_walk;
        DROP INDEX IF EXISTS links_src_kind;
        """,
    ),
    (
        # cached postings of common words for the passages of hybrid search, per column
        # (see memdir.index.postings; passages_fts itself is made by memdir.index.passages)
        "0600_passage_postings",
        """
        CREATE TABLE passage_postings (
            term TEXT PRIMARY KEY,
            seq INTEGER NOT NULL,
            ids BLOB NOT NULL,
            w BLOB NOT NULL,
            dl BLOB NOT NULL
        );
        CREATE TABLE passage_log (doc_id INTEGER PRIMARY KEY, seq INTEGER NOT NULL);
        CREATE INDEX passage_log_seq ON passage_log(seq);
        """,
    ),
    (
        # a turn without tool calls: its Compact note ("- No tool calls." and "- Result: "
        # repeating the output) leaves the full-text body, as memdir.index.documents
        # .searchable_body does for new rows; the cached postings are dropped (they rebuild)
        "0700_turn_body_without_no_tools_note",
        f"""
        UPDATE docs_fts SET body = substr(body, 1, {_NOTE_AT} - 1) || substr(body, {_OUTPUT_AT})
        WHERE rowid IN (SELECT id FROM docs WHERE lower(type) = 'turn')
          AND {_NOTE_AT} > 0
          AND {_OUTPUT_AT} > {_NOTE_AT}
          AND ({_NOTE} = '- No tool calls.'
            OR (substr({_NOTE}, 1, 27) = '- No tool calls.' || char(10) || '- Result: '
              AND instr(substr({_NOTE}, 18), char(10)) = 0));
        DELETE FROM fts_postings;
        DELETE FROM fts_log;
        """,
    ),
    (
        # rows the next sync must parse again (a stamp no file has): frontmatter stored as
        # JSON that SQLite refuses (NaN, Infinity: every where filter failed on it), ints
        # beyond 64 bits (now stored as text; any run of 19 digits is parsed again), and
        # top-level keys that YAML 1.1 typed ("y: 1" stored as "true"; keys now stay text)
        "0800_frontmatter_json_reparse",
        f"""
        UPDATE docs SET size = -1, hash = ''
        WHERE CASE WHEN json_valid(fm) THEN fm GLOB '*{"[0-9]" * 19}*' OR EXISTS (
            SELECT 1 FROM json_each(docs.fm)
            WHERE key IN ('true', 'false', 'null') OR key GLOB '[0-9.+-]*'
        ) ELSE 1 END;
        """,
    ),
    (
        # Change logs for the vector index (see memdir.vectors.index), kept by triggers so every
        # writer, in any process, logs: a document deleted or changed in content or
        # visibility (what a vector sync must look at besides the new ids, which are above
        # the largest it has seen: an insert trigger cost a 20k rebuild 20% more CPU), and a
        # document whose chunk rows changed (what a loaded matrix must replace). Each row
        # holds the document's last change; seq only grows. Documents are logged once a
        # vector sync has set the meta key vectors_doc_log (a rebuild into a new index logs
        # nothing: its first sync checks every document). vectors_epoch names this
        # database's logs: a rebuilt index or emptied vectors get a new one, and a cache of
        # another epoch loads afresh.
        "vectors_0002_change_logs",
        """
        CREATE TABLE vector_doc_log (doc_id INTEGER PRIMARY KEY, seq INTEGER NOT NULL);
        CREATE INDEX vector_doc_log_seq ON vector_doc_log(seq);
        CREATE TRIGGER vector_doc_log_update AFTER UPDATE OF hash, hidden, zone ON docs
        WHEN (OLD.hash IS NOT NEW.hash OR OLD.hidden IS NOT NEW.hidden OR OLD.zone IS NOT NEW.zone)
        AND EXISTS (SELECT 1 FROM meta WHERE key = 'vectors_doc_log')
        BEGIN
            INSERT INTO vector_doc_log(doc_id, seq)
            VALUES (NEW.id, (SELECT coalesce(max(seq), 0) + 1 FROM vector_doc_log))
            ON CONFLICT(doc_id) DO UPDATE SET seq = excluded.seq;
        END;
        CREATE TRIGGER vector_doc_log_delete AFTER DELETE ON docs
        WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'vectors_doc_log')
        BEGIN
            INSERT INTO vector_doc_log(doc_id, seq)
            VALUES (OLD.id, (SELECT coalesce(max(seq), 0) + 1 FROM vector_doc_log))
            ON CONFLICT(doc_id) DO UPDATE SET seq = excluded.seq;
        END;
        CREATE TABLE vector_chunk_log (doc_id INTEGER PRIMARY KEY, seq INTEGER NOT NULL);
        CREATE INDEX vector_chunk_log_seq ON vector_chunk_log(seq);
        CREATE TRIGGER vector_chunk_log_insert AFTER INSERT ON chunks BEGIN
            INSERT INTO vector_chunk_log(doc_id, seq)
            VALUES (NEW.doc_id, (SELECT coalesce(max(seq), 0) + 1 FROM vector_chunk_log))
            ON CONFLICT(doc_id) DO UPDATE SET seq = excluded.seq;
        END;
        CREATE TRIGGER vector_chunk_log_delete AFTER DELETE ON chunks BEGIN
            INSERT INTO vector_chunk_log(doc_id, seq)
            VALUES (OLD.doc_id, (SELECT coalesce(max(seq), 0) + 1 FROM vector_chunk_log))
            ON CONFLICT(doc_id) DO UPDATE SET seq = excluded.seq;
        END;
        CREATE TRIGGER vector_chunk_log_update AFTER UPDATE ON chunks BEGIN
            INSERT INTO vector_chunk_log(doc_id, seq)
            VALUES (OLD.doc_id, (SELECT coalesce(max(seq), 0) + 1 FROM vector_chunk_log))
            ON CONFLICT(doc_id) DO UPDATE SET seq = excluded.seq;
            INSERT INTO vector_chunk_log(doc_id, seq)
            VALUES (NEW.doc_id, (SELECT coalesce(max(seq), 0) + 1 FROM vector_chunk_log))
            ON CONFLICT(doc_id) DO UPDATE SET seq = excluded.seq;
        END;
        INSERT INTO meta(key, value) VALUES ('vectors_epoch', lower(hex(randomblob(8))))
        ON CONFLICT(key) DO UPDATE SET value = excluded.value;
        """,
    ),
    (
        # The change log of what the Postgres engine mirrors (see memdir.index.pglog): every
        # path whose document row, chunks or vectors changed, with the seq of its last
        # change. Triggers keep it for every writer in any process, but only once the
        # Postgres engine has set the meta key pg_log_epoch: an index that never meets
        # Postgres pays one meta lookup per row written and logs nothing. Passages (FTS5
        # rows, which take no triggers) are logged by memdir.index.passages.
        "pg_0001_change_log",
        f"""
        CREATE TABLE pg_log (path TEXT PRIMARY KEY, seq INTEGER NOT NULL);
        CREATE INDEX pg_log_seq ON pg_log(seq);
        CREATE TRIGGER pg_log_doc_insert AFTER INSERT ON docs WHEN {_PG_ON} BEGIN
            {_pg_note("NEW.path")}
        END;
        CREATE TRIGGER pg_log_doc_update AFTER UPDATE ON docs WHEN {_PG_ON} AND (
            OLD.path IS NOT NEW.path OR OLD.hash IS NOT NEW.hash OR OLD.zone IS NOT NEW.zone
            OR OLD.hidden IS NOT NEW.hidden OR OLD.memory_kind IS NOT NEW.memory_kind
            OR OLD.type IS NOT NEW.type OR OLD.thread IS NOT NEW.thread
            OR OLD.user IS NOT NEW.user OR OLD.created IS NOT NEW.created
            OR OLD.fm IS NOT NEW.fm) BEGIN
            {_pg_note("OLD.path")}
            {_pg_note("NEW.path")}
        END;
        CREATE TRIGGER pg_log_doc_delete AFTER DELETE ON docs WHEN {_PG_ON} BEGIN
            {_pg_note("OLD.path")}
        END;
        CREATE TRIGGER pg_log_chunk_insert AFTER INSERT ON chunks WHEN {_PG_ON} BEGIN
            {_pg_note_doc("NEW.doc_id")}
        END;
        CREATE TRIGGER pg_log_chunk_update AFTER UPDATE ON chunks WHEN {_PG_ON} BEGIN
            {_pg_note_doc("OLD.doc_id")}
            {_pg_note_doc("NEW.doc_id")}
        END;
        CREATE TRIGGER pg_log_chunk_delete AFTER DELETE ON chunks WHEN {_PG_ON} BEGIN
            {_pg_note_doc("OLD.doc_id")}
        END;
        CREATE TRIGGER pg_log_vector_insert AFTER INSERT ON vectors WHEN {_PG_ON} BEGIN
            INSERT INTO pg_log(path, seq)
            SELECT d.path, (SELECT coalesce(max(seq), 0) + 1 FROM pg_log)
            FROM chunks c JOIN docs d ON d.id = c.doc_id WHERE c.text_hash = NEW.text_hash
            ON CONFLICT(path) DO UPDATE SET seq = excluded.seq;
        END;
        """,
    ),
]
