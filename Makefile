# Two commands do all the set-up on a fresh machine:
#   make run    creates .venv, installs gradpick, starts the Streamlit explorer (through
#               gradpick.ui.launch: torch and the default model loaded before it serves)
#   make test   the same set-up plus Debian's chromium, then the test suite with lint, types and
#               the docs build beside it
# For development, `make quick` runs the suite without the browser and load tests (tests/browser/);
# `make mutants` mutation-tests the core modules (docs/mutation.md; MUTANTS=request narrows it).
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
# The shared CIFAR-10 copy beside the checkout, when present, saves the download.
SHARED_CIFAR10 := $(abspath ../shared/data/cifar10-jpg)
export GRADPICK_CIFAR10_DIR ?= $(if $(wildcard $(SHARED_CIFAR10)/test),$(SHARED_CIFAR10),)

# The hosted demo installs requirements.txt: CPU-only torch, whose import costs ~330 MB less than
# the CUDA build in .venv, and gradpick itself through its `.` line, a normal (not editable)
# install that reads the shipped weights from the installed package. The server-memory test serves
# the app from this second environment, made the same way: the pins of requirements.txt and a
# non-editable install of this checkout, re-made whenever a file of the package changes. The CPU
# wheel this machine holds on disk stands in for the host's torch (torch 2.13.0, no matching
# torchvision: the app needs torchvision only to download CIFAR-10, and the test serves a cached
# copy), so torch and torchvision are left out of the pins and gradpick is installed --no-deps.
CPU_VENV ?= .venv-cpu
CPU_TORCH ?= torch==2.13.0
PACKAGE_FILES := pyproject.toml README.md $(shell find src -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*')
export GRADPICK_SERVER_PYTHON ?= $(abspath $(CPU_VENV))/bin/python

.PHONY: run test suite quick lint style types docs browser bench mutants clean

# Python may keep what it compiles: some machines set PYTHONDONTWRITEBYTECODE, and uv (unlike pip)
# compiles nothing at install, so every process (each server, Ray worker and command a test
# starts) would compile torch, streamlit and ray anew, about 3 CPU-seconds each. Each module is
# then compiled once, by the first process that imports it.
unexport PYTHONDONTWRITEBYTECODE

# The installer is uv, in .venv beside pip: it fetches and unpacks in parallel, which takes the
# set-up of both environments from about 4 minutes to about 1 (most of it torch's CUDA libraries),
# and it is what Streamlit Community Cloud installs requirements.txt with. uv reads no pip
# configuration, so the machine's pip settings (find-links, constraints) are handed to it; read
# only when an install runs.
PIP_SETTINGS_FOR_UV = $(shell $(PYTHON) -m pip config list 2>/dev/null | sed -n \
	-e "s/^[^.]*\.find-links='\(.*\)'$$/--find-links \1/p" \
	-e "s/^[^.]*\.constraint='\(.*\)'$$/--constraint \1/p" | sort -u)
UV := $(BIN)/uv
UV_INSTALL = $(UV) pip install -q $(PIP_SETTINGS_FOR_UV) --python

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv

$(BIN)/.installed: pyproject.toml | $(UV)
	$(UV_INSTALL) $(BIN)/python -e '.[app,test,distributed]'
	touch $@

$(CPU_VENV)/.requirements: requirements.txt | $(UV)
	$(UV) venv -q --allow-existing --python $(PYTHON) $(CPU_VENV)
	$(UV_INSTALL) $(CPU_VENV)/bin/python $(CPU_TORCH) \
		$$(grep -E '^[A-Za-z]' requirements.txt | grep -vE '^torch(vision)?\b')
	touch $@

# A stale build/ folder would put files deleted since into the wheel.
# After the editable install (order only): both write the package's egg-info.
$(CPU_VENV)/.installed: $(CPU_VENV)/.requirements $(PACKAGE_FILES) | $(BIN)/.installed
	rm -rf build
	$(UV_INSTALL) $(CPU_VENV)/bin/python --no-deps --reinstall --no-cache .
	touch $@

run: $(BIN)/.installed
	$(BIN)/python -m gradpick.ui.launch app.py

browser:
	@command -v chromium >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

# The docs site (mkdocs.yml): built with warnings as errors, offline, into the ignored site/.
DOCS_SITE ?= site
export NO_MKDOCS_2_WARNING := 1

lint: style types docs

style: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(BIN)/.installed
	$(BIN)/mypy src/

docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(DOCS_SITE)

# Two pytest workers, a test file each at a time (--dist loadfile): a file's module-scoped server
# or Ray instance starts once, and the browser tests' waits overlap the other worker's compute.
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=15

# The set-up in two lanes: the two environments install side by side (pip mostly waits on the
# disk), the hosted environment's package beside them once the first is in. Then the suite and
# the lint side by side: mypy alone holds a core for 0.5 to 1.5 minutes from a cold cache, which
# before the suite would leave the other core idle; beside it, the two share the machine. Either
# failing fails the target; the lint's few lines land among the suite's.
test:
	$(MAKE) -j2 $(BIN)/.installed $(CPU_VENV)/.installed browser
	$(MAKE) -j2 suite lint

suite: $(BIN)/.installed
	$(PYTEST)

quick: $(BIN)/.installed
	$(PYTEST) -m 'not e2e'

$(BIN)/.dev: $(BIN)/.installed
	$(UV_INSTALL) $(BIN)/python -e '.[test,distributed,dev]'
	touch $@

# One module at a time, each against its own tests; niced, since a full run takes a while.
MUTANTS ?=
MUTANTS_JOBS ?= 1
MUTANTS_TIMEOUT ?= 3600
MUTANTS_ARGS ?=
mutants: $(BIN)/.dev
	nice -n 19 $(BIN)/python tools/mutants.py $(MUTANTS) --jobs $(MUTANTS_JOBS) \
		--timeout $(MUTANTS_TIMEOUT) $(MUTANTS_ARGS)

bench: $(BIN)/.installed
	$(BIN)/gradpick bench --quick

clean:
	rm -rf $(VENV) $(CPU_VENV) .pytest_cache .mypy_cache .ruff_cache $(DOCS_SITE) build/mutants
