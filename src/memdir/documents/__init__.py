"""The document verbs of a store: write, read, list, grep, merge, forget, reindex, doctor."""
