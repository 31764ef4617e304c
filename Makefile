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

# The lint, then the tests on three workers (pytest-xdist: most tests wait on servers, processes and JVMs; on
# two cores three took 13.5 min where two took 16), a whole file per worker (tests/conftest.py sends the
# longest files first).
# make test ARGS="-k channel" passes arguments to pytest; ARGS="-n 0" runs them in one process.
test: lint
	.venv/bin/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder $(ARGS)

# The documentation site into site/ (open site/index.html): offline, strict (a warning fails it).
docs: setup
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict
