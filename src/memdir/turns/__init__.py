"""Turn records, work-log compaction, the context pack and the turn verbs."""
