# Two commands do all the set-up on a fresh machine:
#   make run    creates .venv, installs gradpick, starts the Streamlit explorer
#   make test   the same set-up plus Debian's chromium, then lint, types and the test suite
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
# The shared CIFAR-10 copy beside the checkout, when present, saves the download.
SHARED_CIFAR10 := $(abspath ../shared/data/cifar10-jpg)
export GRADPICK_CIFAR10_DIR ?= $(if $(wildcard $(SHARED_CIFAR10)/test),$(SHARED_CIFAR10),)

# The hosted demo installs CPU-only torch, whose import costs ~330 MB less than the CUDA build
# in .venv; the server-memory test serves the app from this second environment. It takes the
# CPU wheel this machine holds on disk (torch 2.13.0, no matching torchvision: the app needs
# torchvision only to download CIFAR-10, and the test serves a cached copy) and the app's other
# pins from requirements.txt.
CPU_VENV ?= .venv-cpu
CPU_TORCH ?= torch==2.13.0
export GRADPICK_SERVER_PYTHON ?= $(abspath $(CPU_VENV))/bin/python

.PHONY: run test lint browser bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,distributed]'
	touch $@

$(CPU_VENV)/.installed: pyproject.toml requirements.txt
	$(PYTHON) -m venv $(CPU_VENV)
	$(CPU_VENV)/bin/python -m pip install -q --upgrade pip
	$(CPU_VENV)/bin/python -m pip install -q $(CPU_TORCH) \
		$$(grep -E '^(streamlit|plotly|pillow|numpy)\b' requirements.txt)
	$(CPU_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

run: $(BIN)/.installed
	$(BIN)/streamlit run app.py

browser:
	@command -v chromium >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy src/

test: $(BIN)/.installed $(CPU_VENV)/.installed browser lint
	$(BIN)/python -m pytest

bench: $(BIN)/.installed
	$(BIN)/gradpick bench --quick

clean:
	rm -rf $(VENV) $(CPU_VENV) .pytest_cache .mypy_cache .ruff_cache
