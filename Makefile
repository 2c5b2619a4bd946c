# Turnpike: the two commands are `make run` (the stack on loopback) and
# `make test` (the whole suite). Everything else here serves those two.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PROTOS := $(shell find protos -name '*.proto' | sort)

.DEFAULT_GOAL := help
.PHONY: help venv protos ports settings requirements run test test-unit lint format lock clean images up down logs ps bench-services bench bench-load \
	bench-fairness bench-overload bench-pdf bench-codex soak chaos openapi fuzz docs

help:
	@echo "make run     the whole stack as local processes (gateway on http://127.0.0.1:8080/v1)"
	@echo "make test    the whole test suite"
	@echo "make test-unit  the unit tests only (tests/unit: in-process, no stack, under a minute)"
	@echo "make protos  regenerate gRPC stubs from protos/"
	@echo "make openapi  regenerate src/turnpike/gateway/api/openapi.json from specs/ (served at /openapi.json)"
	@echo "make ports   write the ports of src/turnpike/catalogue.py into .env and deploy/k8s"
	@echo "make settings  write the settings declared in src/turnpike/config.py into .env, deploy/k8s and docs/settings.md"
	@echo "make requirements  write the images' package lists (deploy/requirements/) from pyproject.toml and requirements.lock"
	@echo "make lint    ruff check and format check, mypy"
	@echo "make docs    check that every link and anchor of README.md and docs/ resolves (offline)"
	@echo "make up      the stack as containers (builds what is missing, waits until healthy); make down|ps|logs"
	@echo "make images  build the container images (no registry needed)"
	@echo "make bench-services  benchmark each backend service (results in bench/results/services/)"
	@echo "make bench   the agent-loop benchmark against a stack started by make run (bench/results/)"
	@echo "make bench-load  1 to 100 agent loops at once over raw WebSocket and HTTP/SSE (bench/results/load.*)"
	@echo "make bench-fairness  one tenant's agent loops, alone and while another floods (bench/results/fairness.*)"
	@echo "make bench-overload  300 and 600 long streams at once, shedding off and on (bench/results/overload.*)"
	@echo "make bench-codex  the Codex CLI on a scripted task, over HTTP and over WebSocket (bench/results/codex.*)"
	@echo "make bench-pdf  pypdf, pypdfium2 and the gateway's PDF workers on hostile PDFs (bench/results/pdf-extraction.*)"
	@echo "make fuzz    the HTTP, WebSocket and gRPC fuzzers, longer (FUZZ_EXAMPLES=200 examples per case)"
	@echo "make soak    a steady light load for 10 minutes, the memory of every service (bench/results/soak.*)"
	@echo "make chaos   stop and partition every container under load, one at a time (bench/results/chaos.md)"

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

# The gateway's OpenAPI document, assembled from the Open Responses schemas (a test fails
# when it is stale or misses a route).
openapi: venv
	$(PY) scripts/gen_openapi.py

# Ports live in src/turnpike/catalogue.py; .env and the Kubernetes base get theirs
# from it (a test fails when they are stale).
ports: venv
	$(PY) scripts/gen_ports.py

# Settings are declared in src/turnpike/config.py (type, range, default, description);
# .env's settings block, the Kubernetes ConfigMap and docs/settings.md get theirs from it
# (a test fails when they are stale).
settings: venv
	$(PY) scripts/gen_settings.py

# Dependencies are declared in pyproject.toml (an extra per service) and pinned in
# requirements.lock; each image's list in deploy/requirements/ is the closure of its
# service's extra, at the lock's pins (a test fails when they are stale).
requirements: venv
	$(PY) scripts/gen_requirements.py

run: venv
	$(PY) -m turnpike.devstack

# The documentation is plain Markdown (README.md, docs/); building it means checking it:
# every relative link, image and anchor must resolve. Standard library only, no network.
docs:
	$(PYTHON) scripts/check_docs.py

# With a Docker engine, the images come first: the container tests (tests/containers) run
# against them. Without one, those tests are skipped and say why.
test: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; \
	else echo "No Docker engine answers: the container tests will be skipped."; fi
	$(PY) -m pytest

# The unit tests (tests/unit/<package>): in-process, no stack, no processes, no containers.
# tests/stack holds the tests that start processes; tests/containers those of the containers.
test-unit: venv
	$(PY) -m pytest tests/unit -q

# Containers (deploy/, compose.yaml, .env). Compose is `docker compose` or `docker-compose`,
# whichever this machine has. PROFILES=redis adds the optional Redis tier; Jaeger runs
# when its image is here. LOGS_ARGS="--follow gateway-1" to follow one service.
images: requirements
	$(PY) deploy/images.py

up: images
	$(PY) deploy/compose.py up

down:
	$(PYTHON) deploy/compose.py down

ps:
	$(PYTHON) deploy/compose.py ps

logs:
	$(PYTHON) deploy/compose.py logs $(LOGS_ARGS)

# Each backend service's own work, in-process and over gRPC (a few minutes; BENCH_ARGS=--quick
# for a smoke run).
bench-services: venv
	$(PY) -m bench.services $(BENCH_ARGS)

# The agent loop over the OpenAI SDK, every pipeline side by side, against the stack `make run`
# started (about 20 minutes; BENCH_ARGS=--quick for a smoke run, --start-stack to start one).
bench: venv
	$(PY) -m bench.loop $(BENCH_ARGS)

# Many agent loops at once, without the SDK, against the stack `make run` started: turns/s,
# latency and API overhead, errors and CPU per turn of each service, for 1 to 100 loops
# (a few minutes; BENCH_ARGS=--quick for a smoke run, --start-stack to start one).
bench-load: venv
	$(PY) -m bench.load $(BENCH_ARGS)

# Tenants and admission, each on stacks of its own (BENCH_ARGS=--quick for a smoke run).
# Fairness: tenant A's agent loops alone, then while tenant B floods at 20x its request
# limit (about 1.5 minutes). Overload: 300 and 600 requests of ~2,000 tokens at once,
# shedding off and on, and the capacity sweep the in-flight bound comes from (about 2.5 minutes).
bench-fairness: venv
	$(PY) -m bench.admission.fairness $(BENCH_ARGS)

bench-overload: venv
	$(PY) -m bench.admission.overload $(BENCH_ARGS)

# The real Codex CLI (the pinned wheel) on a scripted 12-call task in a fresh git repository,
# over HTTP and over WebSocket, interleaved, on a stack of its own that traces to the
# benchmark (about 2 minutes; BENCH_ARGS=--quick for a smoke run, '--reps 10' for more).
bench-codex: venv
	$(PY) -m bench.codex $(BENCH_ARGS)

# PDF text extraction: pypdf, pypdfium2 and the gateway's bounded PDF workers on the
# compliance fixture and the hostile PDFs of tests/support/pdf_bombs.py (about 3 minutes;
# BENCH_ARGS='--cap 10' stops each read sooner).
bench-pdf: venv
	$(PY) -m bench.pdf_extraction $(BENCH_ARGS)

# Memory under a steady light load: a stack of its own with small store and cache bounds,
# every service's RSS sampled (10 minutes; BENCH_ARGS='--duration 1800' for 30).
soak: venv
	$(PY) -m bench.soak $(BENCH_ARGS)

# Chaos on the container stack (tests/containers/test_chaos.py): under a steady agent-loop
# load, every container stopped and started again, and a few cut off the network, one at a
# time (about 15 minutes). `make test` runs a short pass (a gateway replica and a worker).
chaos: images
	TURNPIKE_CHAOS=full CHAOS_RESULTS=bench/results/chaos.md $(PY) -m pytest \
		-s tests/containers/test_chaos.py -k one_container_at_a_time

# The fuzzers of the test suite (tests/stack/test_fuzz_*.py: schemathesis over the gateway's
# OpenAPI document, hypothesis over WebSocket frames and gRPC messages) with more examples
# than `make test` runs (8 per case); e.g. FUZZ_EXAMPLES=1000 for a night.
FUZZ_EXAMPLES ?= 200
fuzz: venv
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -p no:cacheprovider --timeout=0 \
		tests/stack/test_fuzz_http.py tests/stack/test_fuzz_websocket.py tests/stack/test_fuzz_grpc.py

# mypy's settings are in pyproject.toml ([tool.mypy]): src/ and bench/ checked, the
# pure modules strict. Its cache (.mypy_cache) makes a second run take seconds.
lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: venv
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# Re-pin: a throwaway virtual environment installs every extra of pyproject.toml (dev names
# them all) and its freeze, the project left out, is the lock; then the images' lists.
lock:
	rm -rf /tmp/turnpike-lock
	$(PYTHON) -m venv /tmp/turnpike-lock
	/tmp/turnpike-lock/bin/pip install --quiet -e '.[dev]'
	/tmp/turnpike-lock/bin/pip freeze --exclude-editable > requirements.lock
	$(MAKE) --no-print-directory requirements

clean:
	rm -rf $(VENV) var
