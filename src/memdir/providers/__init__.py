"""Plugins: how embedders, rerankers, compactors and writers are found."""
