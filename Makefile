# forkq developer and CI entry points (GNU make).
#
#   make run           the demo: a venv with the runtime and the demo's extras (web,
#                      metrics), the schema on SQLite, demo jobs, the daemon
#   make test          MariaDB set-up, the whole suite except fault injection, ruff, mypy
#                      (the venv gets the `test` extra: the pinned test and lint tools)
#   make test-faults   the fault-injection suite (-m faults)
#   make dist          dist/forkq-VERSION-py3-none-any.whl, to install on app servers
#   make lint | bench | clean
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

.PHONY: all venv test test-faults db tools lint bench run dist clean FORCE

all: test

# A stamp is newer than pyproject.toml once its dependencies are installed, and is
# touched last: a failed or interrupted install runs again next time. `run` needs the
# runtime and the demo's extras only (RUN_STAMP); `test`, `lint` and `bench` the `test`
# extra too (STAMP, which `make venv` makes). Both install forkq editable, and put the
# checkout itself on the venv's sys.path (forkq-checkout.pth), so the demo's `handlers`
# package, kept out of the wheel, imports from it: `.venv/bin/forkq web -c
# deploy/forkq.toml` works as `make run` does.
# A venv whose pip does not run is half-made (`python3 -m venv` without Debian's
# python3-venv leaves bin/python and no pip; an interrupted pip upgrade leaves no pip)
# or stale (its Python was removed): it is deleted and built again, and a creation that
# fails deletes what it made, so no later run trips over it. VENV_OK is that test; a
# venv whose python does not start is redone even when its stamp is up to date.
RUN_STAMP ?= $(VENV)/.installed-run
RUN_EXTRAS ?= web,metrics
VENV_OK = $(PY) -m pip --version >/dev/null 2>&1
VENV_BROKEN := $(shell $(PY) -c '' >/dev/null 2>&1 || echo FORCE)
# setuptools notes at every editable install of a flat layout that a folder named like
# the package may shadow it: that folder is the package here, so the note is not shown.
define PIP_EDITABLE
	PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install -q -e '.[$(1)]'
	$(PY) -c 'import sys, sysconfig; open(sysconfig.get_path("purelib") + "/forkq-checkout.pth", "w").write(sys.argv[1] + "\n")' '$(CURDIR)'
endef
define MAKE_VENV
	@if ! $(VENV_OK); then \
	  if [ -e '$(VENV)' ] && [ ! -f '$(VENV)/pyvenv.cfg' ]; then \
	    echo "make: $(VENV) exists and is not a venv: move it away or set VENV=DIR" >&2; exit 1; \
	  fi; \
	  rm -rf '$(VENV)'; \
	  echo "$(PYTHON) -m venv $(VENV)"; \
	  if ! { $(PYTHON) -m venv '$(VENV)' && $(VENV_OK); }; then \
	    rm -rf '$(VENV)'; \
	    echo "make: could not create $(VENV) with $(PYTHON): on Debian or Ubuntu run" \
	      "'apt-get install python3-venv' (Python 3.11+), then make again" >&2; \
	    exit 1; \
	  fi; \
	  $(PY) -m pip install -q -U pip; \
	fi
endef

venv: $(STAMP)

FORCE:

$(STAMP): pyproject.toml $(VENV_BROKEN)
	$(MAKE_VENV)
	$(call PIP_EDITABLE,test)
	touch $@

$(RUN_STAMP): pyproject.toml $(VENV_BROKEN)
	$(MAKE_VENV)
	$(call PIP_EDITABLE,$(RUN_EXTRAS))
	touch $@

db:
	bash scripts/ensure-mariadb.sh

tools: venv
	PY='$(PY)' bash scripts/ensure-tools.sh

# The suite mostly waits (daemons, timeouts, the database: a load average under 1 on two
# cores when run in one process), so it runs in TEST_JOBS processes, each file whole in
# one, each process with databases named by its pid. TEST_JOBS=0 runs it in one.
TEST_JOBS ?= 2
test: venv db tools
	$(PYTEST) -m "not faults" -n $(TEST_JOBS) --dist loadfile
	$(MAKE) --no-print-directory lint

# Exit status 5 is pytest's "no tests collected": not a failure while none exist yet.
# Each fault test kills only what it started (its own mariadbd, port, daemons), so the
# files run in TEST_JOBS processes too.
test-faults: venv db tools
	rc=0; $(PYTEST) -m faults -n $(TEST_JOBS) --dist loadfile || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "test-faults: no tests marked faults"; rc=0; fi; \
	exit $$rc

lint: venv
	$(VENV)/bin/ruff check supervisor handlers tests benchmarks
	$(VENV)/bin/mypy

bench: venv
	PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install -q -e '.[test,bench]'
	$(PY) benchmarks/run.py

# Bytecode as a wheel install ships it: an editable install under PYTHONDONTWRITEBYTECODE
# would compile every module at each start.
run: $(RUN_STAMP)
	$(PY) -m compileall -q supervisor handlers >/dev/null
	$(PY) -m supervisor schema apply -c $(CONFIG) && $(PY) handlers/demo_enqueue.py && $(PY) -m supervisor run -c $(CONFIG)

# The wheel for app servers (the `supervisor` package and its SQL files, templates and
# static files; no examples): `pip install 'dist/forkq-0.1.0-py3-none-any.whl[web]'`.
# build/ goes first: setuptools packs what it finds there, stale files included.
DIST ?= dist
dist: FORCE
	$(MAKE_VENV)
	rm -rf build '$(DIST)'
	$(PY) -m pip wheel -q --no-deps -w '$(DIST)' .
	rm -rf build
	@ls '$(DIST)'/*.whl

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
