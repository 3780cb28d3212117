# forkq developer and CI entry points (GNU make).
#
#   make test          MariaDB set-up, the whole suite except fault injection, ruff, mypy
#   make test-faults   the fault-injection suite (-m faults)
#   make lint | bench | run | clean
#
# The tests read FORKQ_TEST_MYSQL_URL; override it to use another server:
#   make test FORKQ_TEST_MYSQL_URL=mysql://u:p@db.example:3306/forkq_test

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY = $(VENV)/bin/python
STAMP ?= $(VENV)/.installed
FORKQ_TEST_MYSQL_URL ?= mysql://forkq:forkq@127.0.0.1:3306/forkq_test
PYTEST = FORKQ_TEST_MYSQL_URL='$(FORKQ_TEST_MYSQL_URL)' $(PY) -m pytest -q -p no:cacheprovider
CONFIG ?= deploy/forkq.toml

.PHONY: all venv test test-faults db lint bench run clean

all: test

# The stamp is newer than pyproject.toml once its dependencies are installed.
venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

db:
	bash scripts/ensure-mariadb.sh

test: venv db
	$(PYTEST) -m "not faults"
	$(MAKE) --no-print-directory lint

# Exit status 5 is pytest's "no tests collected": not a failure while none exist yet.
test-faults: venv db
	rc=0; $(PYTEST) -m faults || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "test-faults: no tests marked faults"; rc=0; fi; \
	exit $$rc

lint: venv
	$(VENV)/bin/ruff check supervisor handlers tests
	$(VENV)/bin/mypy

bench: venv
	$(PY) benchmarks/run.py

# Bytecode as a wheel install ships it: an editable install under PYTHONDONTWRITEBYTECODE
# would compile every module at each start.
run: venv
	$(PY) -m compileall -q supervisor handlers >/dev/null
	$(PY) -m supervisor schema apply -c $(CONFIG) && $(PY) handlers/demo_enqueue.py && $(PY) -m supervisor run -c $(CONFIG)

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
