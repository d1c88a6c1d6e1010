PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The test suite also covers the tensorflow backend: its CPU build (a 270 MB wheel) is installed for
# `make test` only, so `make serve` does not wait for it.
TEST_STAMP := $(VENV)/.installed-test

.PHONY: install serve test lint typecheck pytest soak lbtest bench proto model clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,flask]'
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,flask,tensorflow-cpu]'
	touch $(TEST_STAMP)

serve: $(STAMP)
	$(BIN)/grps-py serve .

lint: $(TEST_STAMP)
	$(BIN)/ruff check grps_py grps_framework grps_apis src tests scripts bench examples
	$(BIN)/ruff format --check grps_py grps_framework grps_apis src tests scripts bench examples

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

pytest: $(TEST_STAMP)
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

# Mixed traffic against a served project, checking RSS, descriptors, asyncio tasks and statuses
# (scripts/soak.py). SOAK_S=60 make soak for a short run (CI).
SOAK_S ?= 600
soak: $(STAMP)
	$(BIN)/python scripts/soak.py --seconds $(SOAK_S)

# 3 replicas of the bundled project behind HAProxy (Debian's package, installed with apt-get when missing:
# run as root) under steady HTTP and gRPC load: one replica offline and online, a rolling restart, a
# SIGKILL (scripts/lbtest.py). About a minute.
lbtest: $(STAMP)
	$(BIN)/python scripts/lbtest.py

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

model: $(STAMP)
	$(BIN)/python scripts/make_default_model.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# grps-py against Triton, KServe, MLServer and the transport floor (bench/compare.py; the peers are
# installed into their own virtualenvs under ~/.cache/grps-py-bench on first use). About 10 minutes.
bench: $(STAMP)
	$(BIN)/python bench/compare.py
