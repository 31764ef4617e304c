.PHONY: setup demo test

# Both targets set up what they need first (scripts/setup.sh: system packages, .venv).
setup:
	@scripts/setup.sh

demo: setup
	@scripts/demo.sh

# make test ARGS="-k channel" passes arguments to pytest.
test: setup
	.venv/bin/python -m pytest -q $(ARGS)
