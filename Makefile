.PHONY: setup demo lint test docs

# Every target sets up what it needs first (scripts/setup.sh: system packages, .venv).
setup:
	@scripts/setup.sh

demo: setup
	@scripts/demo.sh

# ruff (style, imports, likely bugs) and mypy (types) over the whole repository.
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy

# The lint, then the tests. make test ARGS="-k channel" passes arguments to pytest.
test: lint
	.venv/bin/python -m pytest -q $(ARGS)

# The documentation site into site/ (open site/index.html): offline, strict (a warning fails it).
docs: setup
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict
