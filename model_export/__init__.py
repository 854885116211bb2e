"""Training, evaluation and ONNX export of pgnl's models (torch, transformers: the `[export]`
extra). Nothing at runtime imports this package; its output is committed to `proxy/models/`."""
