"""What writes the TFLite files: the ``Converter`` interface (``base.py``), its implementations
(onnx2tf, litert-torch, each with the child process it runs in) and the registry by name (``registry.py``)."""
