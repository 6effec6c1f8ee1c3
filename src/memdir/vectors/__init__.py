"""Meaning: the embedders, the ONNX helpers and the vector index."""
