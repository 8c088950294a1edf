# Quick start on a fresh machine: `make run` (the main job) and `make test` (the tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# the CPU build of torch that lies on disk here; the GPU machine brings its own torch (2.11)
TORCH_PIN ?= torch==2.13.0

.PHONY: run test lint clean

$(BIN)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_PIN)"
	$(BIN)/python -m pip install -q -e ".[dev,triton,onnx]"
	touch $@

run: $(BIN)/.installed
	$(BIN)/dayzero run

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q

lint: $(BIN)/.installed
	$(BIN)/ruff check dayzero tests bench

clean:
	rm -rf $(VENV)
