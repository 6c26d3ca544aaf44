# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The peers `make bench-peers` compares agentrt with, in a virtualenv of their own.
PEERS       ?= .venv-peers
PEERS_STAMP := $(PEERS)/.installed
# LiteLLM's proxy: a third-party OpenAI-compatible server the tests start, in a virtualenv of its
# own (its packages conflict with the project's pins; see constraints-litellm.txt).
LITELLM       ?= .venv-litellm
LITELLM_STAMP := $(LITELLM)/.installed
# Two MCP servers from PyPI the tests run through a daemon, in a virtualenv of their own.
MCP_SERVERS       ?= .venv-mcp-servers
MCP_SERVERS_STAMP := $(MCP_SERVERS)/.installed

.PHONY: run test lint typecheck unit bench bench-peers stress clean system-deps bytecode

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test,lab,otel]'
	touch $(STAMP)

$(LITELLM)/bin/python:
	$(PYTHON) -m venv $(LITELLM)

$(LITELLM_STAMP): constraints-litellm.txt | $(LITELLM)/bin/python
	$(LITELLM)/bin/pip install -q --upgrade pip
	$(LITELLM)/bin/pip install -q -c constraints-litellm.txt 'litellm[proxy]'
	touch $(LITELLM_STAMP)

$(MCP_SERVERS)/bin/python:
	$(PYTHON) -m venv $(MCP_SERVERS)

$(MCP_SERVERS_STAMP): constraints-mcp-servers.txt | $(MCP_SERVERS)/bin/python
	$(MCP_SERVERS)/bin/pip install -q --upgrade pip
	$(MCP_SERVERS)/bin/pip install -q -c constraints-mcp-servers.txt mcp-server-time mcp-server-git
	touch $(MCP_SERVERS_STAMP)

## run: start the terminal client on the embedded scripted model (starts a local daemon if none)
run: $(STAMP)
	@command -v bwrap >/dev/null 2>&1 || echo "make run: bubblewrap (bwrap) is not installed:" \
		"tools cannot be sandboxed, so every command is confirmed and full-auto is refused;" \
		"install it with: apt-get install bubblewrap (see docs/security.md)" >&2
	$(BIN)/agenttui

## system-deps: the sandbox (bubblewrap) and the tools the end-to-end tests drive (tmux, sudo,
## chromium); needs root
system-deps:
	./.ci/system-deps

## lint / typecheck: ruff (with the ASYNC rules) and mypy --strict
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples stress
	$(BIN)/ruff format --check src tests benchmarks examples stress

typecheck: $(STAMP)
	$(BIN)/mypy

# Test processes: one a core, at most 4 (the suite is mostly waits on real processes, sockets
# and browsers). `make unit TEST_JOBS=0` runs it in this process alone.
TEST_JOBS ?= $(shell $(PYTHON) -c 'import os; print(max(1, min(4, len(os.sched_getaffinity(0)))))')

## bytecode: agentrt's modules byte-compiled, and the methods attrs writes for its classes
## (agentrt.apps.codecache), as pip does for a regular install. An editable install run
## under PYTHONDONTWRITEBYTECODE would otherwise compile them anew in every process it
## starts: the suite, the benchmarks and the stress suites start thousands.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q src benchmarks stress > /dev/null
	$(BIN)/python -m agentrt.apps.codecache > /dev/null

unit: $(STAMP) $(LITELLM_STAMP) $(MCP_SERVERS_STAMP) bytecode
	$(BIN)/pytest -q -n $(TEST_JOBS) --dist loadgroup

## test: install everything, then lint, type-check and run the whole suite
test: $(STAMP) $(LITELLM_STAMP) $(MCP_SERVERS_STAMP) system-deps lint typecheck unit

## bench: benchmarks, each figure a ratio against a baseline measured in the same run
bench: $(STAMP) bytecode
	$(BIN)/python -m benchmarks

## bench-peers: agentrt's pause -> resume cycle beside LangGraph's and the OpenAI Agents SDK's,
## in one run; they are installed into $(PEERS) (never into the project's dependencies)
$(PEERS)/bin/python:
	$(PYTHON) -m venv $(PEERS)

$(PEERS_STAMP): pyproject.toml benchmarks/peers/constraints.txt | $(PEERS)/bin/python
	$(PEERS)/bin/pip install -q --upgrade pip
	$(PEERS)/bin/pip install -q -c benchmarks/peers/constraints.txt -e . \
		langgraph langgraph-checkpoint-sqlite langgraph-checkpoint-postgres openai-agents
	touch $(PEERS_STAMP)

bench-peers: $(PEERS_STAMP)
	$(PEERS)/bin/python -m compileall -q src benchmarks > /dev/null
	$(PEERS)/bin/python -m agentrt.apps.codecache > /dev/null
	$(PEERS)/bin/python -m benchmarks.peers

## stress: crash, disconnect, fuzz, isolation, secrets, load and fleet suites; prints a table, fails on any loss
stress: $(STAMP) bytecode
	$(BIN)/python -m stress

clean:
	rm -rf $(VENV) $(PEERS) $(LITELLM) $(MCP_SERVERS) .mypy_cache .pytest_cache .ruff_cache
