"""Prepares memtape's MiniLM for fast int8 inference (run by `memtape models fetch`).

1. Folds the int8-weight export's dequantizing casts into float weights with ONNX
   Runtime's basic graph optimisations.
2. Replaces each layer's self-attention (the query, key and value projections and the
   two dozen reshapes, transposes, scalings, mask and softmax operators between them) by
   one `com.microsoft.Attention` operator with the three projections packed into one
   weight. The export guards each softmax with `Where(IsNaN(x), 0, x)`, which only
   matters for a row with every key masked; a text run alone never has one, and the
   fused operator handles that case itself. The vectors are those of the float model as
   before (docs/benchmarks.md, "Attention in one operator").
3. Fuses each GELU (the exact, erf-based one) with the bias added before it into one
   `BiasGelu` operator, with ONNX Runtime's own BERT fusions (nothing else of them).
4. Quantizes every matrix product with constant weights dynamically (int8 weights per
   output channel, uint8 activations quantized per run), attention included, so ONNX
   Runtime runs them as integer products.

The result is deterministic for pinned packages; its sha256 is pinned in assets.rs.

Usage: python3 quantize.py SOURCE.onnx OUT.onnx
"""

import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers import optimizer
from onnxruntime.transformers.fusion_options import FusionOptions

LAYERS = 6
HEADS = 12


def fold(source: str, out: str) -> None:
    """ONNX Runtime's basic optimisations: constant folding of the weights' casts."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = out
    ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def fuse_attention(model: onnx.ModelProto) -> None:
    """Replaces each softmax's attention block by one Attention operator (see above)."""
    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def projection(tensor):
        """Walks up from `tensor` to the projection `Add(MatMul(x, W), b)` it comes from."""
        while True:
            node = producer[tensor]
            if node.op_type == "Add":
                for k, name in enumerate(node.input):
                    p = producer.get(name)
                    if p is not None and p.op_type == "MatMul" and p.input[1] in weights:
                        return p.input[0], p.input[1], node.input[1 - k]
            tensor = next(i for i in node.input if i in producer and i not in weights)

    def only_consumer(tensor, op_type):
        found = consumers.get(tensor, [])
        if len(found) != 1 or found[0].op_type != op_type:
            sys.exit(f"unexpected graph: {tensor} does not feed one {op_type}")
        return found[0]

    def skip_nan_guard(tensor):
        """The softmax's value past its `Where(IsNaN(x), 0, x)` guard, if it has one."""
        users = consumers.get(tensor, [])
        where = [n for n in users if n.op_type == "Where"]
        return where[0].output[0] if where else tensor

    mask = "memtape_attention_mask"
    fused, replaced = [], set()
    softmaxes = [n for n in graph.node if n.op_type == "Softmax"]
    for layer, softmax in enumerate(softmaxes):
        scores = producer[softmax.input[0]]  # Add(Q·Kᵀ, mask)
        qk = next(
            producer[i] for i in scores.input if i in producer and producer[i].op_type == "MatMul"
        )
        x, wq, bq = projection(qk.input[0])
        xk, wk, bk = projection(qk.input[1])
        weighted = only_consumer(skip_nan_guard(softmax.output[0]), "MatMul")
        xv, wv, bv = projection(weighted.input[1])
        if not x == xk == xv:
            sys.exit("unexpected graph: query, key and value read different inputs")
        heads_out = only_consumer(weighted.output[0], "Transpose")
        merged = only_consumer(heads_out.output[0], "Reshape")
        w = np.concatenate([numpy_helper.to_array(weights[n]) for n in (wq, wk, wv)], axis=1)
        b = np.concatenate([numpy_helper.to_array(weights[n]) for n in (bq, bk, bv)])
        w_name, b_name = f"memtape_qkv_weight_{layer}", f"memtape_qkv_bias_{layer}"
        graph.initializer.extend(
            [numpy_helper.from_array(w, w_name), numpy_helper.from_array(b, b_name)]
        )
        fused.append(
            helper.make_node(
                "Attention",
                [x, w_name, b_name, mask],
                [merged.output[0]],
                name=f"memtape_attention_{layer}",
                domain="com.microsoft",
                num_heads=HEADS,
            )
        )
        replaced.add(merged.output[0])
    if len(fused) != LAYERS:
        sys.exit(f"unexpected graph: {len(fused)} attention blocks, not {LAYERS}")
    cast = helper.make_node(
        "Cast", ["attention_mask"], [mask], name="memtape_mask_int32", to=TensorProto.INT32
    )
    kept = [n for n in graph.node if not set(n.output) & replaced]
    # What fed only the replaced blocks is now unused: drop it, then its weights.
    outputs = {o.name for o in graph.output}
    while True:
        used = {i for n in kept + fused for i in n.input} | outputs
        live = [n for n in kept if any(o in used for o in n.output)]
        if len(live) == len(kept):
            break
        kept = live
    used = {i for n in kept + fused for i in n.input}
    initializers = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    # Topological order: each node after the nodes it reads from.
    ready = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = [cast] + kept + fused, []
    while pending:
        runnable = [n for n in pending if all(i in ready for i in n.input)]
        if not runnable:
            sys.exit("unexpected graph: a cycle after fusing attention")
        for n in runnable:
            ordered.append(n)
            ready.update(n.output)
        pending = [n for n in pending if n not in runnable]
    del graph.node[:]
    graph.node.extend(ordered)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.checker.check_model(model)


def fuse_gelu(source: str, out: str) -> None:
    """ONNX Runtime's BiasGelu fusion, and none of its other BERT fusions."""
    options = FusionOptions("bert")
    for name in vars(options):
        if name.startswith("enable_"):
            setattr(options, name, False)
    options.enable_gelu = True
    options.enable_bias_gelu = True
    fused = optimizer.optimize_model(
        source,
        model_type="bert",
        num_heads=HEADS,
        hidden_size=384,
        optimization_options=options,
        opt_level=0,
        use_gpu=False,
    )
    fused.save_model_to_file(out)


def main(source: str, out: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        folded = os.path.join(work, "folded.onnx")
        fold(source, folded)
        model = onnx.load(folded)
        fuse_attention(model)
        attention = os.path.join(work, "attention.onnx")
        onnx.save(model, attention)
        gelu = os.path.join(work, "gelu.onnx")
        fuse_gelu(attention, gelu)
        quantize_dynamic(gelu, out, weight_type=QuantType.QInt8, per_channel=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
