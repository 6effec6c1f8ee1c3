"""Documents as text: frontmatter, links, paths, ids, provenance, input checks (pure)."""
