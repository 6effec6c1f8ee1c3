# memdir: every target creates .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean install claude-cli ui-browser ui-screenshots postgres

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m memdir.demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	# The layer contract of docs/architecture.md ([tool.importlinter] in pyproject.toml).
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -n 2

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

# The Postgres engine's driver and, for its tests and benchmarks, a PostgreSQL with pgvector
# bundled in a wheel (pgserver); tests/test_postgres*.py skip without them.
postgres: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[postgres]' 'pgserver==0.1.4'
	$(BIN)/python -m memdir.index.pglocal --check

# The web UI in a real browser: Debian's chromium (installed when apt-get can), driven by
# Playwright (in the dev extra); ui-screenshots also rewrites docs/ui/*.png.
ui-browser: $(STAMP)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		{ apt-get install -y chromium >/dev/null 2>&1 || sudo -n apt-get install -y chromium \
		  >/dev/null 2>&1 || echo "chromium not installed: the browser tests will skip"; }
	$(BIN)/python -m pytest -q tests/test_ui_browser.py -rs

ui-screenshots: $(STAMP)
	MEMDIR_UI_SCREENSHOTS=1 $(BIN)/python -m pytest -q tests/test_ui_browser.py -rs

# `memdir` on the user's PATH: pipx or uv's tool install where present, else a venv of its
# own in $(TOOL_HOME) with a link in $(TOOL_BIN) (docs/agents.md).
TOOL_HOME ?= $(HOME)/.local/share/memdir
TOOL_BIN ?= $(HOME)/.local/bin
install:
	@if command -v pipx >/dev/null 2>&1; then \
		pipx install --force '.[all]'; \
	elif command -v uv >/dev/null 2>&1; then \
		uv tool install --force '.[all]'; \
	else \
		$(PY) -m venv $(TOOL_HOME)/venv && \
		$(TOOL_HOME)/venv/bin/python -m pip install --quiet --upgrade pip && \
		$(TOOL_HOME)/venv/bin/python -m pip install --quiet '.[all]' && \
		mkdir -p $(TOOL_BIN) && ln -sf $(TOOL_HOME)/venv/bin/memdir $(TOOL_BIN)/memdir && \
		echo "memdir installed in $(TOOL_HOME)/venv, linked from $(TOOL_BIN)/memdir"; \
	fi

# The real Claude Code CLI for tests/test_claude_e2e.py, kept in the checkout (git-ignored).
CLAUDE_CLI := .cache/claude-cli
claude-cli:
	npm install --prefix $(CLAUDE_CLI) --no-audit --no-fund @anthropic-ai/claude-code
	$(CLAUDE_CLI)/node_modules/.bin/claude --version

clean:
	rm -rf $(VENV) build src/*.egg-info
