# Quick start on a fresh machine: `make run` (the main job) and `make test` (the tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# the CPU build of torch that lies on disk here; the GPU machine brings its own torch (2.11)
TORCH_PIN ?= torch==2.13.0

.PHONY: run test lint clean image

$(BIN)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_PIN)"
	$(BIN)/python -m pip install -q -e ".[dev,triton,onnx]"
	touch $@

run: $(BIN)/.installed
	$(BIN)/dayzero run

# one worker a core (tests/conftest.py gives each worker's torch its share of the threads); a module's tests stay on
# one worker, so a module-scoped fixture (an AOTI compile, an ONNX export) is built once
test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n auto --dist loadscope

lint: $(BIN)/.installed
	$(BIN)/ruff check dayzero tests bench

clean:
	rm -rf $(VENV)

# the CPU serving image (podman, offline; container/build.sh says what it needs); `make image BAKE=1` bakes the
# embedded model's engine in
image: $(BIN)/.installed
	PYTHON=$(BIN)/python bash container/build.sh dayzero:cpu --build-arg BAKE=$(or $(BAKE),0)
