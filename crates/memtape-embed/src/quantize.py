"""Prepares memtape's MiniLM for fast int8 inference (run by `memtape models fetch`).

Folds the int8-weight export's dequantizing casts into float weights with ONNX Runtime's
basic graph optimisations, then quantizes every MatMul with constant weights dynamically
(int8 weights per output channel, uint8 activations quantized per batch), so that ONNX
Runtime runs them as integer matrix products.

Usage: python3 quantize.py SOURCE.onnx OUT.onnx
"""

import os
import sys
import tempfile

import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic


def main(source: str, out: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        folded = os.path.join(work, "folded.onnx")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = folded
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        quantize_dynamic(folded, out, weight_type=QuantType.QInt8, per_channel=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
