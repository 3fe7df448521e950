"""Run the bundled model's int8 weights as int8 (a graph rewrite at load time, with the `onnx` package).

The bundled model stores int8 weights that it dequantizes at run time (Cast + Mul) before fp32 MatMuls, so by
itself it computes no faster than fp32, and every run dequantizes the whole word-embedding table (twice 47 MB)
to gather a few rows. Rewriting each `MatMul(x, Mul(Cast(Wq), scale))` into ONNX Runtime's
`DynamicQuantizeMatMul(x, Wq, scale)` runs those matmuls as int8 GEMMs on the same weights, and gathering the
int8 rows before dequantizing them gives the same embeddings without the table. onnxruntime's own tooling
cannot do this: its quantizers start from fp32 weights, and its graph fusions look for DequantizeLinear, not
Cast + Mul. Measured (`benchmarks/bench_local.py`, "(a') graph as shipped"): 3.0x less CPU per 256-token
chunk on 2 cores (earlier, one thread: 86 -> 43 ms a chunk; PyTorch fp32: 75-80), arena after embedding
96 -> 15 MB; cosine to the fp32 model's vectors 0.988 min / 0.993 mean (0.999 before); SciFact nDCG@10 0.748,
the same as fp32 (0.747 before). The activations get one quantization scale per run, so each text runs alone: its vector
never depends on its batch (see `LocalProvider`); `quantizes_per_run` finds the same in a user's int8 export.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

MS_DOMAIN = "com.microsoft"


def int8_matmul_model(model: bytes) -> tuple[bytes, int]:
    """The model with its int8 weights used as int8; (serialized model, patterns rewritten). A model with
    nothing to rewrite comes back as it was (the same bytes). Raises ValueError for bytes that are no model,
    ImportError without the `onnx` package.

    MatMuls on dequantized weights become DynamicQuantizeMatMul; Gathers from dequantized tables gather the
    int8 rows first and dequantize only those.
    """
    import onnx
    from onnx import TensorProto, helper

    try:
        proto = onnx.load_from_string(model)
    except Exception as exc:  # protobuf's DecodeError
        raise ValueError(f"not an ONNX model ({exc})") from exc
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    nodes = list(graph.node)
    producer = {out: (i, n) for i, n in enumerate(nodes) for out in n.output}
    uses = Counter(name for n in nodes for name in n.input)
    uses.update(o.name for o in graph.output)

    def dequantized(name: str) -> tuple[int, int, Any, Any, Any] | None:
        """name = Mul(Cast(q), scale) with q an int8 and scale a float initializer, each used once:
        (the Mul's index, the Cast's index, the Cast, q, scale)."""
        mul_i, mul = producer.get(name, (-1, None))
        if uses[name] != 1 or mul is None or mul.op_type != "Mul" or len(mul.input) != 2:
            return None
        for deq, scale in (tuple(mul.input), tuple(mul.input)[::-1]):
            cast_i, cast = producer.get(deq, (-1, None))
            if cast is not None and cast.op_type == "Cast" and scale in inits:
                break
        else:
            return None
        q = inits.get(cast.input[0])
        if q is None or uses[deq] != 1 or uses[scale] != 1 or len(q.dims) != 2:
            return None
        if q.data_type != TensorProto.INT8 or inits[scale].data_type != TensorProto.FLOAT:
            return None
        return mul_i, cast_i, cast, q, inits[scale]

    def node(op: str, inputs: list[str], outputs: list[str], name: str, like: Any = None, **kw: Any) -> Any:
        made = helper.make_node(op, inputs, outputs, name=name, **kw)
        if like is not None:
            made.attribute.extend(like.attribute)  # Gather's axis, Cast's target type
        return made

    replace: dict[int, list[Any]] = {}  # node index -> the nodes that take its place
    dropped: set[int] = set()  # indices of the Mul and Cast nodes that dequantized a rewritten weight
    for i, n in enumerate(nodes):
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
        if n.op_type == "MatMul" and len(n.input) == 2 and (m := dequantized(n.input[1])):
            # MatMul(x, Mul(Cast(Wq), s)) -> DynamicQuantizeMatMul(x, Wq, s), s per column (1-D).
            mul_i, cast_i, _, q, scale = m
            n_cols = q.dims[1]
            if list(scale.dims) not in ([n_cols], [1, n_cols]):
                continue
            del scale.dims[:]
            scale.dims.append(n_cols)
            name = (n.name or n.output[0]) + "_int8"
            replace[i] = [
                node("DynamicQuantizeMatMul", [n.input[0], q.name, scale.name], list(n.output), name, domain=MS_DOMAIN)
            ]
        elif n.op_type == "Gather" and len(n.input) == 2 and axis == 0 and (m := dequantized(n.input[0])):
            # Gather(Mul(Cast(Eq), s), ids) -> Mul(Cast(Gather(Eq, ids)), Gather(s, ids)): the same numbers,
            # without dequantizing the whole 30522 x 384 table on every run (47 MB twice, per run).
            mul_i, cast_i, cast, q, scale = m
            rows, cols = q.dims
            ids, base = n.input[1], n.output[0] + "_int8"
            new = [
                node("Gather", [q.name, ids], [base + "_q"], base + "_gather", n),
                node("Cast", [base + "_q"], [base + "_f"], base + "_cast", cast),
            ]
            if list(scale.dims) == [rows, 1]:
                new.append(node("Gather", [scale.name, ids], [base + "_s"], base + "_gather_scale", n))
                new.append(node("Mul", [base + "_f", base + "_s"], list(n.output), base + "_mul"))
            elif list(scale.dims) in ([], [1], [cols], [1, cols]):
                new.append(node("Mul", [base + "_f", scale.name], list(n.output), base + "_mul"))
            else:
                continue
            replace[i] = new
        else:
            continue
        dropped.update((mul_i, cast_i))
    if not replace:
        return model, 0
    kept = [new for i, n in enumerate(nodes) if i not in dropped for new in replace.get(i, [n])]
    del graph.node[:]
    graph.node.extend(kept)
    if not any(o.domain == MS_DOMAIN for o in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return proto.SerializeToString(), len(replace)


# ops that quantize their input with a scale computed from the run's own activations (onnxruntime's dynamic
# quantization, what optimum and transformers.js int8 exports use)
# (DynamicQuantizeLinear, DynamicQuantizeMatMul, DynamicQuantizeLSTM; MatMulIntegerToFloat)
DYNAMIC_QUANT_OPS = (b"DynamicQuantize", b"MatMulIntegerToFloat")
SCAN_BLOCK = 16 << 20  # bytes read at a time when looking for them


def quantizes_per_run(path: Path) -> bool:
    """True when the graph at `path` quantizes activations per run: its output for a text then depends on the
    other texts batched with it (measured: bge-small-en-v1.5 int8, cosine 0.993 between a text embedded alone
    and in a batch of 16). False when unreadable (onnxruntime then says why when it loads the model).

    The op names are looked for in the file's bytes (a node's op_type is stored as plain text), not by parsing
    it: `onnx.load` decodes every weight (0.4 s and 300 MB more at each load of a 436 MB model; the search takes
    0.2 s there, a few ms for small models, and needs no `onnx` package). A name found elsewhere (a doc string)
    only makes texts run one at a time."""
    keep = max(len(op) for op in DYNAMIC_QUANT_OPS) - 1  # a name cut by a block boundary is still found
    try:
        # read in blocks, not mapped: a file cut short meanwhile is an error here, not a SIGBUS
        with open(path, "rb") as fh:
            tail = b""
            while block := fh.read(SCAN_BLOCK):
                seam = tail + block[:keep]
                if any(op in block or op in seam for op in DYNAMIC_QUANT_OPS):
                    return True
                # the last `keep` bytes read, whatever the block's size
                tail = block[-keep:] if len(block) >= keep else (tail + block)[-keep:]
    except OSError:
        pass
    return False
