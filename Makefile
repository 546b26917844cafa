# Two commands on a fresh machine with only Python: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck browser docs gate-quality clean

$(STAMP): requirements/test.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements/test.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	BIN=$(BIN) bash examples/demo.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The HTML report's tests drive a real headless Chromium: Debian's package, installed when missing (as root,
# or through sudo). FXPROF_REQUIRE_BROWSER makes those tests fail rather than skip without it.
CHROMIUM ?= $(shell command -v chromium || command -v chromium-browser)
browser:
	@if [ -z "$(CHROMIUM)" ]; then \
		echo "installing Debian's chromium for the HTML report's browser tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	fi

# The documentation site (mkdocs.yml, docs/), built with --strict: a warning (a broken link, a page missing from
# the nav, a docstring mkdocstrings cannot read) fails it. Written outside the checkout unless SITE_DIR says.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(or $(SITE_DIR),/tmp/fxprof-site)

# Two xdist workers: most tests wait on processes they start, and measuring sections take turns through the
# plugin's lock; 9 min 51 s here against 12 min 53 s in one process (2 cores, 2026-11-26).
test: lint typecheck browser docs
	FXPROF_REQUIRE_BROWSER=1 $(BIN)/pytest -p no:cacheprovider -n 2 -rs tests examples

# The gate's error rates through the real command line, then the trade-off curve (BENCHMARKS.md; about an
# hour here). Measured with stricter tolerances than any setting the curve shows, so that every check one
# of them would confirm was confirmed, and each row at k >= 3 (the plugin's) is replayed exactly.
QUALITY_DIR ?= /tmp/fxprof-gate-quality
gate-quality: $(STAMP)
	rm -rf $(QUALITY_DIR)
	$(BIN)/python bench/gate_quality.py --keep $(QUALITY_DIR) $(ARGS) \
		-- --fxprof-node-tolerance 0.07 --fxprof-total-tolerance 0.08
	$(BIN)/python bench/gate_tradeoff.py $(QUALITY_DIR)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
