# edgeport — the two commands a user needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Make the CPU wheel of torch that lies on this machine's disk the one that is taken.
TORCH  := torch==2.13.0

.PHONY: setup demo demo-legacy test test-fast bench demo-weights clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
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
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(PY) benchmarks/convert_bench.py
	$(PY) benchmarks/upsample_bench.py
	$(PY) benchmarks/train_bench.py
	$(PY) benchmarks/validate_bench.py

demo-weights: setup
	$(PY) scripts/train_demo.py --arch pdet-n
	$(PY) scripts/train_demo.py --arch pdet-n-bilinear

clean:
	rm -rf runs .pytest_cache
