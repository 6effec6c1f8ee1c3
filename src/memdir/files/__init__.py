"""Everything on disk and in git: the store, atomic writes, locks, journal, undo, git log."""
