"""Run a .tflite model in the real TensorFlow Lite 1.13.1 (Python 3.7): model, NHWC input .npy, output .npz.

Executed by the board environment's own interpreter (`make setup-tflite113`), not by pytest.
"""
import sys

import numpy as np
import tensorflow as tf

model, inputs, out = sys.argv[1:4]
interp = tf.lite.Interpreter(model_path=model)
interp.allocate_tensors()
interp.set_tensor(interp.get_input_details()[0]["index"], np.load(inputs))
interp.invoke()
outs = {"out%d" % i: interp.get_tensor(d["index"]) for i, d in enumerate(interp.get_output_details())}
np.savez(out, version=np.array(tf.__version__), **outs)
