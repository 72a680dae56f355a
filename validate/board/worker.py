"""The board side of edgeport's runner protocol: one file, run by the board's own Python.

It imports nothing of edgeport and runs on Python 3.5 and later, with numpy and one TFLite
runtime (``tflite_runtime``, ``ai_edge_litert`` or TensorFlow's ``tf.lite``; in TensorFlow 1.x,
its interpreter loaded without the rest of TensorFlow) -- whatever the board has. edgeport copies
it into a run folder beside the model and the inputs:

    DIR/model.tflite          the model as the board runs it
    DIR/inputs/NNNN.npy       one input per image, already in the model's layout and dtype
    DIR/probes/*.tflite       (probe mode) one-op models, OP.VERSION.tflite
    DIR/uint8/*.tflite        (probe mode) one-op uint8 models, OP.tflite, each with OP.input.npy to run on
    DIR/time/K/model.tflite   (time mode) models K = 0, 1, ... to time against each other, each with
    DIR/time/K/inputs/*.npy   its inputs (the same images, in its layout and dtype)

and runs ``python board_worker.py run|once|probe|time|version DIR`` (``once``: as ``run``, each image
invoked once, without the repeat check). The worker writes

    DIR/outputs/NNNN_K.npy    output K of image NNNN, as the runtime returned it (raw dtype)
    DIR/outputs/uint8.OP.npy  (probe mode) what the runtime computed for OP's uint8 model
    DIR/result.json           {"ok", "runtime", "version", "package", "outputs", "ms", "intermediates"}
                              (time mode: "ms", each model's median invoke)
                              or {"ok": false, "error": KIND, "message": ...}

KIND is ``no_runtime`` (nothing to run TFLite with), ``load`` (the runtime refused the model:
its own message), or ``run`` (it failed while running). The exit status is 0 either way; a
crash of the interpreter itself is what a non-zero status means.
"""

import json
import os
import sys
import time


def _runtime():
    """(Interpreter class, runtime name, version, package) of the first runtime importable here."""
    try:
        import tflite_runtime
        from tflite_runtime import interpreter as tfl  # the board's usual, small runtime

        return tfl.Interpreter, "TFLite", getattr(tflite_runtime, "__version__", "?"), "tflite_runtime"
    except ImportError:
        pass
    try:
        import ai_edge_litert
        from ai_edge_litert import interpreter as litert

        return litert.Interpreter, "LiteRT", getattr(ai_edge_litert, "__version__", "?"), "ai-edge-litert"
    except ImportError:
        pass
    try:
        found = _tensorflow_1_lite()
    except Exception:  # noqa: BLE001 -- any surprise in that layout: TensorFlow imported whole, below
        found = None
    if found is not None:
        return found
    try:
        import tensorflow as tf

        lite = getattr(tf, "lite", None) or tf.contrib.lite
        return lite.Interpreter, "TFLite", tf.__version__, "tensorflow"
    except ImportError:
        return None


def _tensorflow_1_lite():
    """TensorFlow 1.x's own ``tf.lite.Interpreter`` without importing TensorFlow, most of a worker
    run on TFLite 1.13.1 whose invokes are quick (benchmarks/board_worker_bench.py). In 1.x the interpreter is
    TensorFlow's ``lite/python/interpreter.py`` over a SWIG module that loads on its own; that file
    asks TensorFlow for two helpers only, a lazy loader (given the SWIG module itself) and an export
    decorator (given one that changes nothing), and runs as it is. None where the installed
    TensorFlow is not laid out so (2.x: a pybind module), or its version is unknown."""
    import glob
    import importlib.util

    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = list(spec.submodule_search_locations)[0]
    lite = os.path.join(root, "lite", "python")
    wrapper_file = os.path.join(lite, "interpreter_wrapper", "tensorflow_wrap_interpreter_wrapper.py")
    interpreter_file = os.path.join(lite, "interpreter.py")
    # the installed distribution's version, from its folder's name: NAME-VERSION.dist-info
    versions = [name[:-len(".dist-info")].split("-", 1)[1]
                for name in map(os.path.basename, glob.glob(os.path.join(os.path.dirname(root), "tensorflow*-*.dist-info")))
                if name.split("-", 1)[0] in ("tensorflow", "tensorflow_cpu", "tensorflow_gpu")]
    if not (os.path.isfile(wrapper_file) and os.path.isfile(interpreter_file)) or len(versions) != 1 \
            or not versions[0].startswith("1."):
        return None
    wrapper_spec = importlib.util.spec_from_file_location("_edgeport_tflite1_wrapper", wrapper_file)
    wrapper = importlib.util.module_from_spec(wrapper_spec)
    wrapper_spec.loader.exec_module(wrapper)
    if not all(hasattr(wrapper, name) for name in ("InterpreterWrapper_CreateWrapperCPPFromFile",
                                                   "InterpreterWrapper_CreateWrapperCPPFromBuffer")):
        return None

    class _Helpers(object):
        @staticmethod
        def LazyLoader(name, scope, module):  # noqa: N802 -- TensorFlow's name
            return wrapper

        @staticmethod
        def tf_export(*names, **kwargs):
            return lambda obj: obj

    real_import = __import__

    def tf_import(name, globals_=None, locals_=None, fromlist=(), level=0):
        if name in ("tensorflow.python.util.lazy_loader", "tensorflow.python.util.tf_export"):
            return _Helpers
        return real_import(name, globals_, locals_, fromlist, level)

    import builtins

    scope = {"__name__": "_edgeport_tflite1_interpreter", "__file__": interpreter_file,
             "__builtins__": dict(vars(builtins), __import__=tf_import)}
    with open(interpreter_file, "rb") as f:
        exec(compile(f.read(), interpreter_file, "exec"), scope)
    return scope["Interpreter"], "TFLite", versions[0], "tensorflow"


def _write(folder, result):
    with open(os.path.join(folder, "result.json"), "w") as f:
        json.dump(result, f)


def _first_line(exc):
    text = str(exc).strip() or type(exc).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # TFLite 1.x prefixes the reason with its source location; keep the reason
    useful = [ln for ln in lines if "Didn't find op" in ln or "out of range" in ln]
    return (useful or lines)[0]


def run(folder, found, again=True):
    """Every input, each invoked twice (``again``) to report any difference, else once."""
    import numpy as np

    interpreter_cls, name, version, package = found
    base = {"runtime": name, "version": version, "package": package}
    try:
        interp = interpreter_cls(model_path=os.path.join(folder, "model.tflite"))
        interp.allocate_tensors()
    except Exception as exc:  # the runtime's own refusal: an unknown op, version or type
        base.update(ok=False, error="load", message=_first_line(exc))
        return base
    inp = interp.get_input_details()[0]
    outs = interp.get_output_details()
    names = sorted(n for n in os.listdir(os.path.join(folder, "inputs")) if n.endswith(".npy"))
    os.makedirs(os.path.join(folder, "outputs"), exist_ok=True)
    ms = []
    repeat = 0.0  # the largest difference between an image's first and second invoke
    try:
        for n in names:
            x = np.load(os.path.join(folder, "inputs", n))
            t0 = time.perf_counter()
            interp.set_tensor(inp["index"], x)
            interp.invoke()
            ys = [np.array(interp.get_tensor(d["index"])) for d in outs]
            ms.append((time.perf_counter() - t0) * 1e3)
            for k, y in enumerate(ys):
                np.save(os.path.join(folder, "outputs", "%s_%d.npy" % (n[:-4], k)), y)
            if not again:
                continue
            # the same image again: an interpreter that keeps state between invokes answers otherwise
            interp.set_tensor(inp["index"], x)
            interp.invoke()
            for d, y in zip(outs, ys):
                again_y = interp.get_tensor(d["index"])
                if y.size:
                    repeat = max(repeat, float(np.max(np.abs(y.astype(np.float64) - again_y.astype(np.float64)))))
    except Exception as exc:
        base.update(ok=False, error="run", message=_first_line(exc))
        return base
    details = [{"shape": [int(v) for v in d["shape"]], "dtype": np.dtype(d["dtype"]).name,
                "quantization": [float(d["quantization"][0]), int(d["quantization"][1])]} for d in outs]
    # no intermediates: TFLite reuses their memory, and 1.x cannot be told to keep it
    base.update(ok=True, outputs=details, ms=ms, images=len(names), intermediates=False)
    if again:
        base["repeat_max_abs"] = repeat if repeat == repeat and repeat != float("inf") else -1.0
    return base


def probe(folder, found):
    """Which one-op models the runtime accepts (why that is its op table: ``probe.py``)."""
    interpreter_cls, name, version, package = found
    accepted, refused = [], {}
    for n in sorted(os.listdir(os.path.join(folder, "probes"))):
        if not n.endswith(".tflite"):
            continue
        try:
            interpreter_cls(model_path=os.path.join(folder, "probes", n))
            accepted.append(n[: -len(".tflite")])
        except Exception as exc:
            refused[n[: -len(".tflite")]] = _first_line(exc)
    return {"ok": True, "runtime": name, "version": version, "package": package, "accepted": accepted,
            "refused": refused, "uint8": _run_uint8(folder, interpreter_cls), "python": "%d.%d.%d" % sys.version_info[:3]}


def _run_uint8(folder, interpreter_cls):
    """Each one-op uint8 model, run on its input: OP -> "ran" (output in outputs/uint8.OP.npy) or why not."""
    import numpy as np

    where = os.path.join(folder, "uint8")
    if not os.path.isdir(where):
        return {}
    os.makedirs(os.path.join(folder, "outputs"), exist_ok=True)
    said = {}
    for n in sorted(os.listdir(where)):
        if not n.endswith(".tflite"):
            continue
        op = n[: -len(".tflite")]
        try:
            x = np.load(os.path.join(where, op + ".input.npy"))
            interp = interpreter_cls(model_path=os.path.join(where, n))
            interp.allocate_tensors()
            interp.set_tensor(interp.get_input_details()[0]["index"], x)
            interp.invoke()
            y = np.array(interp.get_tensor(interp.get_output_details()[0]["index"]))
            np.save(os.path.join(folder, "outputs", "uint8." + op + ".npy"), y)
            said[op] = "ran"
        except Exception as exc:
            said[op] = _first_line(exc)
    return said


TIME_ROUNDS = 3


def time_models(folder, found):
    """Each model of DIR/time/K on its own inputs, timed against the others interleaved: a warm-up
    invoke each, then TIME_ROUNDS rounds of every image, the models in turn (the order turned each
    round), so that whatever else the machine does falls on all of them alike. Per model, the median
    of its invokes, in ms."""
    import numpy as np

    interpreter_cls, name, version, package = found
    base = {"runtime": name, "version": version, "package": package}
    runs = []
    for k in sorted(os.listdir(os.path.join(folder, "time")), key=int):
        where = os.path.join(folder, "time", k)
        try:
            interp = interpreter_cls(model_path=os.path.join(where, "model.tflite"))
            interp.allocate_tensors()
        except Exception as exc:
            base.update(ok=False, error="load", message=_first_line(exc))
            return base
        inputs = [np.load(os.path.join(where, "inputs", n)) for n in sorted(os.listdir(os.path.join(where, "inputs")))]
        runs.append((interp, interp.get_input_details()[0]["index"], inputs))
    times = [[] for _ in runs]
    try:
        for interp, index, inputs in runs:
            interp.set_tensor(index, inputs[0])
            interp.invoke()
        for r in range(TIME_ROUNDS):
            order = [(r + k) % len(runs) for k in range(len(runs))]
            for i in range(len(runs[0][2])):
                for k in order:
                    interp, index, inputs = runs[k]
                    interp.set_tensor(index, inputs[i])
                    t0 = time.perf_counter()
                    interp.invoke()
                    times[k].append((time.perf_counter() - t0) * 1e3)
    except Exception as exc:
        base.update(ok=False, error="run", message=_first_line(exc))
        return base
    base.update(ok=True, ms=[sorted(t)[len(t) // 2] for t in times])
    return base


def main(argv):
    if len(argv) != 2 or argv[0] not in ("run", "once", "probe", "time", "version"):
        sys.stderr.write("usage: board_worker.py run|once|probe|time|version DIR\n")
        return 2
    mode, folder = argv
    here = "Python %d.%d here" % sys.version_info[:2]
    try:
        import numpy  # noqa: F401
    except ImportError:
        found, missing = None, here + " has no numpy"
    else:
        found, missing = _runtime(), here + " has none of tflite_runtime, ai_edge_litert, tensorflow"
    if found is None:
        result = {"ok": False, "error": "no_runtime", "message": missing}
    elif mode in ("run", "once"):
        result = run(folder, found, again=mode == "run")
    elif mode == "probe":
        result = probe(folder, found)
    elif mode == "time":
        result = time_models(folder, found)
    else:
        result = {"ok": True, "runtime": found[1], "version": found[2], "package": found[3],
                  "python": "%d.%d.%d" % sys.version_info[:3]}
    _write(folder, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
