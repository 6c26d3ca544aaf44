# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck unit bench stress clean system-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test,lab]'
	touch $(STAMP)

## run: start the terminal client on the embedded scripted model (starts a local daemon if none)
run: $(STAMP)
	$(BIN)/agenttui

## system-deps: tools the end-to-end tests drive (tmux, sudo, chromium); needs root
system-deps:
	./.ci/system-deps

## lint / typecheck: ruff (with the ASYNC rules) and mypy --strict
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples stress
	$(BIN)/ruff format --check src tests benchmarks examples stress

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q

## test: install everything, then lint, type-check and run the whole suite
test: $(STAMP) system-deps lint typecheck unit

## bench: benchmarks, each figure a ratio against a baseline measured in the same run
bench: $(STAMP)
	$(BIN)/python -m benchmarks

## stress: crash, disconnect, fuzz, isolation, secrets and load suites; prints a table, fails on any loss
stress: $(STAMP)
	$(BIN)/python -m stress

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
