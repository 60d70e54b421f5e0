# The two commands a newcomer needs: `make run` and `make test`. Everything else is optional.
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8000
# Loopback unless told otherwise (HOST=0.0.0.0 make run serves the whole network).
HOST ?= 127.0.0.1
JETSTREAM_PORT ?= 6008
PYTHON ?= python3

.PHONY: run test lint nightly install worker demo bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# Third-party front-end code is installed from the npm registry (pinned by the lockfile), never committed:
# htmx (served) and axe-core (injected by the browser tests, tests/browser/test_browser_pages.py).
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

static/vendor/htmx.min.js: node_modules/.installed
	mkdir -p static/vendor
	cp node_modules/htmx.org/dist/htmx.min.js static/vendor/htmx.min.js

install: $(BIN)/.installed static/vendor/htmx.min.js

# Serves on SQLite (instance/feather.db) with the background workers, in development mode
# unless FEATHERREADER_ENV says otherwise.
run: install
	FEATHERREADER_ENV=$${FEATHERREADER_ENV:-development} $(BIN)/flask --app app db upgrade
	FEATHERREADER_ENV=$${FEATHERREADER_ENV:-development} PORT=$(PORT) \
		$(BIN)/gunicorn -k gevent -w 1 --access-logfile - --bind $(HOST):$(PORT) app:app

worker: install
	FEATHERREADER_ENV=$${FEATHERREADER_ENV:-development} $(BIN)/flask --app app worker

# Offline tour: a local Jetstream replaying demo/events.jsonl and Feather against it (instance/demo.db).
demo: install
	$(BIN)/python demo/run.py --port $(PORT) --jetstream-port $(JETSTREAM_PORT)

# The guards that keep the shape: ruff (pyproject.toml) and the import contracts (.importlinter).
lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

test: install lint
	$(BIN)/pytest $(PYTEST_ARGS)

# The tests that read the public atproto network (marked `live`; every other run deselects them).
# Scheduled nightly by .github/workflows/nightly.yml, never on a pull request.
nightly: install
	FEATHER_LIVE_NETWORK=1 $(BIN)/pytest -m live $(PYTEST_ARGS)

# Node 22 from the npm registry (pinned by bench/contrail/package-lock.json): node:sqlite for the
# Contrail-shaped side of bench/fanout.py and bench/getfeed.py. A failure is not fatal ("-"): the
# benches then print why the Contrail comparison is skipped and still measure Feather.
bench/contrail/node_modules/.installed: bench/contrail/package.json bench/contrail/package-lock.json
	-npm ci --prefix bench/contrail --no-audit --no-fund --loglevel=error && touch $@

# Every benchmark at full size (ratios against bare baselines measured in the same run), one table.
bench: install bench/contrail/node_modules/.installed
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) node_modules static/vendor bench/contrail/node_modules
