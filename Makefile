# Turnpike: the two commands are `make run` (the stack on loopback) and
# `make test` (the whole suite). Everything else here serves those two.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PROTOS := $(shell find protos -name '*.proto' | sort)

.DEFAULT_GOAL := help
.PHONY: help venv protos run test lint format lock clean

help:
	@echo "make run     the whole stack as local processes (gateway on http://127.0.0.1:8080/v1)"
	@echo "make test    the whole test suite"
	@echo "make protos  regenerate gRPC stubs from protos/"
	@echo "make lint    ruff check and format check"

# The virtual environment is rebuilt whenever the lock file changes.
$(VENV)/.installed: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(VENV)/.installed

protos: venv
	$(PY) scripts/gen_protos.py

run: venv
	$(PY) -m devstack

test: venv
	$(PY) -m ruff check .
	$(PY) -m pytest

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: venv
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

lock:
	$(PYTHON) -m venv /tmp/turnpike-lock
	/tmp/turnpike-lock/bin/pip install --quiet -r requirements.in
	/tmp/turnpike-lock/bin/pip freeze --exclude-editable > requirements.lock

clean:
	rm -rf $(VENV) var
