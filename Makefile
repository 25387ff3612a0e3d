# Two commands do everything on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-fast test-durations demo clean

install: $(STAMP)

# Re-install whenever the pins or the package metadata change.
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m bert_ds.runtime.prebuild_ops
	touch $@

# Two pytest workers, each running whole test files (--dist loadfile: a file's module-scoped
# Slurm cluster is started once): most tests are real multi-process jobs that leave about a third
# of two cores idle, so the suite took 32 min instead of 40 on the 2-core dev machine (2026-12-02).
# One worker per core (2 to 8): a machine with more cores than the dev machine's two uses them.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 8 ] && n=8; [ $$n -lt 2 ] && n=2; echo $$n)

PYTEST := OMP_NUM_THREADS=2 $(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadfile

test: install
	$(PYTEST) --durations=30

# The quick tier for the edit-test loop: every test that took at most 12 s when durations were
# last recorded (unit tests and the small real 2-rank jobs); the long multi-process jobs are `slow`.
test-fast: install
	$(PYTEST) -m "not slow"

# The whole suite, writing each test's seconds to tests/durations.json (test order, fast tier).
test-durations: install
	BERT_DS_RECORD_DURATIONS=1 $(PYTEST) --durations=30

demo: install
	$(PY) -m bert_ds.demo

clean:
	rm -rf $(VENV) build *.egg-info
