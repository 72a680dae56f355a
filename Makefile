# edgeport — the two commands a user needs are `make demo` and `make test`.
# `make setup PYTHON=python3.12` (and VENV=.venv312 beside the default one): python3.12 on PATH,
# or pyenv's build of it (scripts/find_python.sh)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYBIN  := $(shell scripts/find_python.sh $(PYTHON))
PYVER  := $(shell $(PYBIN) -c 'import sys; print("%d%d" % sys.version_info[:2])' 2>/dev/null)
# the whole stack pinned per Python: 3.12 and later take onnx2tf 2.x and no TensorFlow
CONSTRAINTS := $(if $(filter 312 313,$(PYVER)),constraints-py312.txt,constraints.txt)
# torch 2.14.1 with torchvision 0.29.1: on Python 3.11 both come from this machine's local package
# index (pip's configuration, which scripts/pip_install.py gives uv too), on 3.12 and 3.13 from the
# registry. A CUDA build that runs on the CPU: the trainer's device tests need its fake CUDA device,
# and torchvision pairs with it.
TORCH  := torch==2.14.1 torchvision==0.29.1

# where flock is (Linux), editable installs into different venvs take turns (``setup``)
LOCKED := $(if $(shell command -v flock 2>/dev/null),flock .setup.lock,)

.PHONY: setup setup-boards setup-converters setup-bench test-converters test-all demo demo-legacy test test-fast lint bench demo-weights gpu-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -n "$(PYBIN)" || { echo "no $(PYTHON) found: install it, or pass PYTHON=/path/to/python"; exit 2; }
	@echo "setup: $(VENV) with $(PYBIN) ($(CONSTRAINTS))"
	@test -x $(PY) || $(PYBIN) -m venv $(VENV)
	@# scripts/pip_install.py: pip's install, through uv where uv installs (the same pinned packages,
	@# from where pip's configuration says; less than half the time), else pip's own. Errors only. (.pyc
	@# files are compiled here: where PYTHONDONTWRITEBYTECODE is set, as on this machine, nothing compiles them later)
	@echo "setup: $(TORCH) (a CUDA build that runs on the CPU: about 5.5 GB)"
	@$(PY) scripts/pip_install.py -c $(CONSTRAINTS) $(TORCH)
	@echo "setup: edgeport and its pinned dependencies"
	@# one editable install at a time: each writes edgeport.egg-info here (.ci/run sets up three environments side by side)
	@$(LOCKED) $(PY) scripts/pip_install.py -c $(CONSTRAINTS) -e ".[dev,zoo]"
	@touch $(STAMP)

# The write-up's board runtime, the real TensorFlow Lite 1.13.1, in its own Python 3.7
# environment, installed by edgeport itself where edgeport looks for it: $$EDGEPORT_HOME, else
# ~/.local/share/edgeport (venvs.py: home; validate/board/install.py). One home for the CLI, this target and
# the tests, so `make setup-boards && edgeport boards` lists the real runtime. Without a python3.7
# the tests that need it skip and say why.
setup-boards: setup
	@if scripts/find_python.sh python3.7 >/dev/null; then \
		$(VENV)/bin/edgeport boards install tflite-1.13; \
	else echo "no python3.7: the real TFLite 1.13.1 tests will be skipped"; fi

# The second converter, litert-torch (`convert --converter litert-torch`, `--cross-check`), in its
# own environment in the same home, layered on the venv's packages (about 1 GB, 50 s: convert/converters/litert.py)
setup-converters: setup
	$(VENV)/bin/edgeport converters install litert-torch

# A model trained by someone else, for benchmarks/quant_bench.py and mtcnn_bench.py: facenet-pytorch's
# wheel ships MTCNN's trained weights (MIT). Its pins are old (torch < 2.3): its model code and weights
# only, without its dependencies (benchmarks/mtcnn_models.py). scikit-image's wheel ships real photos
# (astronaut, camera, ...), beside Ultralytics' two, for mtcnn_bench.py's faces.
setup-bench: setup
	$(PY) -m pip install -qq --no-deps facenet-pytorch==2.6.0
	$(PY) -m pip install -qq scikit-image==0.26.0

DEMO_OUT ?= runs/demo
demo: setup
	$(VENV)/bin/edgeport convert models/weights/pdet_n_person.pt --imgsz 160 --out $(DEMO_OUT) --force

# The write-up's bug and its fix, on the bilinear detector for a TFLite 1.13 board:
# --legacy-resize runs there but computes something else (exit 1, divergence at the resize);
# the exact rewrite passes.
demo-legacy: setup
	-$(VENV)/bin/edgeport convert models/weights/pdet_n_bilinear_person.pt --imgsz 160 --board tflite-1.13 --legacy-resize --out runs/demo-legacy --force
	$(VENV)/bin/edgeport convert models/weights/pdet_n_bilinear_person.pt --imgsz 160 --board tflite-1.13 --out runs/demo-board --force

# everything but the second converter's tests (`make test-converters`), two at a time on two cores
# (most tests are one process on one core), the zoo last: about 10 minutes on Python 3.11, where the zoo runs on
# the models whose ends differ between the two onnx2tf lines; the rest of the zoo on Python 3.12 (but the models whose claims others make: SPARED)
# (tests/zoo/test_zoo.py: ON_128; EDGEPORT_ZOO=full runs it all on either line). TESTS narrows it:
# on 3.12, .ci/run runs the slow tests a converter line can change (TESTS="slow and not converters and not one_line":
# the fast ones run on 3.13, the same stack; one_line's, such as the trainer's processes, on 3.11)
TESTS ?= not converters
test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m "($(TESTS)) and not zoo" -n 2 --dist worksteal
	@# the zoo in processes of its own: importing Ultralytics patches PIL and cv2 process-wide; its
	@# longest tests first, each worker taking the next as it ends (tests/zoo/conftest.py)
	$(PY) -m pytest -q -m "($(TESTS)) and zoo" -n 2 --dist load

# litert-torch's own tests, and the zoo through it against onnx2tf (a model of each kind: about 4 minutes)
test-converters: setup-converters
	$(PY) -m pytest -q -m "converters and not zoo" -n 2
	$(PY) -m pytest -q -m "converters and zoo" -n 2 --dist load

# both: the same tests in the same two pytest runs as `make test` (everything but the zoo, then the
# zoo), each run collecting once and ending once instead of twice (.ci/run on Python 3.11)
test-all: setup-converters
	$(MAKE) test TESTS="converters or not converters"

test-fast: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m "not slow" -n 2

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) benchmarks/convert_bench.py
	$(PY) benchmarks/lowering_bench.py
	$(PY) benchmarks/board_bench.py
	$(PY) benchmarks/train_bench.py
	$(PY) benchmarks/validate_bench.py
	@if $(VENV)/bin/edgeport converters | grep -q "^litert-torch .* in "; then \
		$(PY) benchmarks/litert_bench.py; \
	else echo "litert-torch not installed (make setup-converters): benchmarks/litert_bench.py skipped"; fi

# on a machine with CUDA GPUs: the NCCL trainer, resume, 2-rank = 1-rank, bf16, CPU convert (JSON
# summary). On a lent machine without `make setup`: scripts/gpu_check.sh (docs/training.md)
gpu-check: setup
	PY=$(PY) scripts/gpu_check.sh runs/gpu_check

demo-weights: setup
	$(PY) scripts/train_demo.py --arch pdet-n
	$(PY) scripts/train_demo.py --arch pdet-n-bilinear

clean:
	rm -rf runs .pytest_cache
