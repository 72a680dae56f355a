# edgeport — the two commands a user needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# torch 2.14.1 with torchvision 0.29.1: pip takes both from this machine's wheel cache. It
# is a CUDA build that runs on the CPU: the trainer's device tests need its fake CUDA device,
# and torchvision pairs with it (PyPI's does not import beside the 2.13.0 CPU build).
TORCH  := torch==2.14.1 torchvision==0.29.1

.PHONY: setup demo demo-legacy test test-fast lint bench demo-weights gpu-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: setup
	$(VENV)/bin/edgeport convert models/weights/pdet_n_person.pt --imgsz 160 --out runs/demo --force

# The write-up's bug and its fix, on the bilinear detector for a TFLite 1.13 board:
# --legacy-resize runs there but computes something else (exit 1, divergence at the resize);
# the exact rewrite passes.
demo-legacy: setup
	-$(VENV)/bin/edgeport convert models/weights/pdet_n_bilinear_person.pt --imgsz 160 --board tflite-1.13 --legacy-resize --out runs/demo-legacy --force
	$(VENV)/bin/edgeport convert models/weights/pdet_n_bilinear_person.pt --imgsz 160 --board tflite-1.13 --out runs/demo-board --force

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

test-fast: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) benchmarks/convert_bench.py
	$(PY) benchmarks/upsample_bench.py
	$(PY) benchmarks/train_bench.py
	$(PY) benchmarks/validate_bench.py

# on a machine with CUDA GPUs: the NCCL trainer, resume, CPU convert, 2-rank = 1-rank (JSON summary)
gpu-check: setup
	scripts/gpu_check.sh runs/gpu_check

demo-weights: setup
	$(PY) scripts/train_demo.py --arch pdet-n
	$(PY) scripts/train_demo.py --arch pdet-n-bilinear

clean:
	rm -rf runs .pytest_cache
