# Two commands on a fresh machine with only Python: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck gate-quality clean

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

test: lint typecheck
	$(BIN)/pytest -p no:cacheprovider tests examples

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
