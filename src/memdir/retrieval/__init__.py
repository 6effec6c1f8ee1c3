"""Search: orchestration, fusion, reranking and the hints read from a query."""
