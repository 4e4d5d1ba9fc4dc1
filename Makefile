# Herald: `make demo` runs the whole system on this machine; `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: demo up down status test test-unit test-deploy test-integration test-e2e lint bench services install clean

demo: install services   ## install what is missing, start the stack, tell the story: send, stop at 12,000, audit, correct
	$(BIN)/python -m devstack demo

up: install services     ## start the stack (nx-27017, FCM emulator, api, dispatcher, 2 senders, scheduler)
	$(BIN)/python -m devstack up

down:                    ## stop the stack gracefully (SIGTERM, then wait)
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m devstack down; fi

status:
	@$(BIN)/python -m devstack status

test: install services lint  ## lint and types, then the whole suite: unit, integration, end to end
	$(BIN)/python -m pytest -n 2 tests/unit tests/deploy tests/integration
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not exclusive" tests/e2e; \
	  shared=$$?; $(BIN)/python -m pytest -m exclusive tests/e2e && exit $$shared

test-unit: install
	$(BIN)/python -m pytest tests/unit

test-deploy: install services  # Compose, Prometheus rules (promtool), Kubernetes manifests
	$(BIN)/python -m pytest tests/deploy

test-integration: install services
	$(BIN)/python -m pytest tests/integration

test-e2e: install services
	$(BIN)/python -m pytest tests/e2e

lint: install            ## ruff (with a complexity limit) and mypy --strict; any finding fails
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: install services  ## transport and pipeline benchmarks (see bench/README.md)
	$(BIN)/python -m bench.transport
	$(BIN)/python -m bench.pipeline

services:                ## RabbitMQ and Redis from the distribution, installed/started if missing
	@bash deploy/local/ensure-services.sh

install: $(STAMP)

$(STAMP): pyproject.toml
	@bash deploy/local/ensure-services.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv  # uv resolves and installs the same versions ~6x faster than pip
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

clean: down             ## also removes the stack's RabbitMQ vhost and users
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m devstack clean; fi
	rm -rf .run .pytest_cache .mypy_cache .ruff_cache
