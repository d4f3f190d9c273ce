# The two commands a newcomer needs: `make run` (the platform) and `make test` (the suite).
# Both set up everything on a fresh machine: virtualenv, pinned packages, and embedded
# PostgreSQL/Redis when DATABASE_URL / CELERY_BROKER_URL are unset; `make test` also a private
# RabbitMQ node when none answers on 5672 (devtools/rabbitmq.py).

# No "Entering directory" lines either when make runs under another make (a script, the tests).
MAKEFLAGS += --no-print-directory

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed-$(shell cat requirements/dev.txt pyproject.toml | sha1sum | cut -c1-12)

# The second environment: Django 6.0 on Python 3.12 (Django 6 needs 3.12 or newer), in its own
# virtualenv with its own pins (requirements/dev-django6.txt, `make lock-django6`). Python 3.12
# is pyenv's newest 3.12 when pyenv has one, else `python3.12` on the PATH; another interpreter
# with e.g. `PYTHON_DJANGO6="PYENV_VERSION=3.13.0 python3.13" VENV_DJANGO6=.venv-py313`.
PYENV_312 := $(shell pyenv versions --bare 2>/dev/null | grep -E '^3\.12\.[0-9]+$$' | sort -V | tail -1)
PYTHON_DJANGO6 ?= $(if $(PYENV_312),PYENV_VERSION=$(PYENV_312) )python3.12
VENV_DJANGO6 ?= .venv-django6
BIN_DJANGO6 := $(VENV_DJANGO6)/bin
INSTALLED_DJANGO6 := $(VENV_DJANGO6)/.installed-$(shell cat requirements/dev-django6.txt pyproject.toml | sha1sum | cut -c1-12)

.PHONY: run test nemesis test-django6 chromium rabbitmq-server faketime promtool pgbouncer manage lint docs format typecheck migrations-check migrations-check-django6 ci lock lock-django6 clean

# Quiet, and on stderr: `make manage ARGS="jobs list --json"` prints only the command's output,
# even the first time, when it installs.
$(INSTALLED): requirements/dev.txt pyproject.toml
	@echo "installing requirements/dev.txt into $(VENV)" >&2
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip >&2
	@$(BIN)/python -m pip install --quiet -r requirements/dev.txt >&2
	@rm -f $(VENV)/.installed-*
	@touch $@

$(INSTALLED_DJANGO6): requirements/dev-django6.txt pyproject.toml
	@echo "installing requirements/dev-django6.txt into $(VENV_DJANGO6)" >&2
	@test -x $(BIN_DJANGO6)/python || $(PYTHON_DJANGO6) -m venv $(VENV_DJANGO6)
	@$(BIN_DJANGO6)/python -m pip install --quiet --upgrade pip >&2
	@$(BIN_DJANGO6)/python -m pip install --quiet -r requirements/dev-django6.txt >&2
	@rm -f $(VENV_DJANGO6)/.installed-*
	@touch $@

run: $(INSTALLED)
	$(BIN)/python -m devtools run

test: $(INSTALLED) chromium rabbitmq-server faketime promtool pgbouncer
	$(BIN)/python -m devtools test $(PYTEST_ARGS)

# The nemesis (tests/nemesis, docs/nemesis.md) for as long as asked, with a seed of your own or
# one that failed (its report names it): `make nemesis MINUTES=30 SEED=7`, `BEATS=3` for three
# beats. Without SEED, one drawn now, printed first. The suite runs the same test for two
# minutes with fixed seeds and two beats.
MINUTES ?= 10
BEATS ?= 2
ifndef SEED
SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
nemesis: $(INSTALLED)
	@echo "nemesis: $(MINUTES) minutes, seed $(SEED)"
	NEMESIS_MINUTES=$(MINUTES) NEMESIS_SEED=$(SEED) NEMESIS_BEATS=$(BEATS) \
		NEMESIS_HISTORY=$(CURDIR)/.dev/nemesis \
		$(BIN)/python -m devtools test \
		tests/nemesis/test_nemesis.py -p no:xdist -s -q $(PYTEST_ARGS)

# The same suite, run the same way (embedded services, side by side), on Django 6.0 and
# Python 3.12: CI runs it on tests/unit, tests/integration and the Django Tasks acceptance modules.
test-django6: $(INSTALLED_DJANGO6) chromium rabbitmq-server faketime promtool pgbouncer
	$(BIN_DJANGO6)/python -m devtools test $(PYTEST_ARGS)

# The browser test drives Debian's Chromium (tests/browser); install it only when it is missing.
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

# The private RabbitMQ node of the tests runs Debian's rabbitmq-server scripts (and its Erlang's
# epmd); install the package only when it is missing.
rabbitmq-server:
	@test -x /usr/lib/rabbitmq/bin/rabbitmq-server || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server; }

# The clock-skew tests run beats and workers under Debian's libfaketime
# (tests/acceptance/test_clock_skew.py); install it only when it is missing.
faketime:
	@command -v faketime >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime; }

# The alerting rules and the /metrics exposition are checked with Prometheus' promtool
# (tests/deployment/test_prometheus_rules.py); install Debian's prometheus only when it is missing.
promtool:
	@command -v promtool >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus; }

# The pooled-database scenarios run through Debian's PgBouncer in transaction pooling
# (devtools/pgbouncer.py); install it only when it is missing.
pgbouncer:
	@test -x /usr/sbin/pgbouncer || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer; }

# Silent (no echo of the command), so `make manage ARGS="jobs runs demo.quick --json"` is pure JSON.
manage: $(INSTALLED)
	@$(BIN)/python -m devtools manage $(ARGS)

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The documentation site (mkdocs.yml, docs/) into the git-ignored site/. --strict, as CI runs it:
# a broken link or anchor, a page missing from the nav, or a generated reference (the CLI's,
# the configuration's: devtools/docs_reference.py) that no longer matches the code fails it.
docs: $(INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

format: $(INSTALLED)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(INSTALLED)
	$(BIN)/python -m devtools manage check
	DJANGO_DEBUG=1 DATABASE_URL=postgresql://unused@localhost/unused CELERY_BROKER_URL=redis://localhost/0 $(BIN)/mypy .

migrations-check: $(INSTALLED)
	$(BIN)/python -m devtools manage makemigrations --check --dry-run

# Both Django series must see the same models: no migration one of them would add.
migrations-check-django6: $(INSTALLED_DJANGO6)
	$(BIN_DJANGO6)/python -m devtools manage makemigrations --check --dry-run

lock: $(INSTALLED)
	$(BIN)/pip-compile -q --strip-extras --no-emit-index-url --no-emit-find-links --extra platform -o requirements/base.txt pyproject.toml
	$(BIN)/pip-compile -q --strip-extras --no-emit-index-url --no-emit-find-links --extra platform --extra dev -o requirements/dev.txt pyproject.toml

# The Django 6 pins, compiled under Python 3.12 like requirements/dev.txt under 3.11, Django
# held at 6.0 (requirements/django6.in); everything else resolves as in dev.txt where it can.
lock-django6: $(INSTALLED_DJANGO6)
	$(BIN_DJANGO6)/pip-compile -q --strip-extras --no-emit-index-url --no-emit-find-links --extra platform --extra dev -c requirements/django6.in -o requirements/dev-django6.txt pyproject.toml

clean:
	rm -rf .dev .pytest_cache .mypy_cache .ruff_cache site
