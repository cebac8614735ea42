"""One op taxonomy for both frameworks: an aten op name or an XLA HLO instruction -> a category.

Categories: matmul, attention (scores/softmax/SDPA), normalization, element-wise, reductions, data movement
(copy, transpose, concatenate, gather/scatter), collectives, optimizer, other. A torch op is named by its
aten name; an HLO instruction by its opcode, and a fusion by the instructions it contains: the fusion counts
whole for its *dominant* category (the first present in :data:`DOMINANCE`: a fusion holding a dot is a
matmul even if it also adds a bias). The ``optimizer`` category is decided by scope (the update marked
``optimizer``), not by op: every op inside it counts there.
"""

from __future__ import annotations

import re

CATEGORIES = ("matmul", "attention", "normalization", "element-wise", "reductions", "data movement",
              "collectives", "optimizer", "other")

#: when a fusion mixes categories it is counted whole for the first of these it contains
DOMINANCE = ("collectives", "attention", "matmul", "normalization", "reductions", "data movement", "element-wise")

_TORCH = [
    ("attention", r"scaled_dot_product|_flash_attention|_efficient_attention|sdpa|softmax|attention"),
    ("matmul", r"::(mm|bmm|addmm|matmul|linear|baddbmm|addbmm|einsum|_mm|dot|mv|addmv)\b|gemm|cublas|sgemm"),
    ("normalization", r"layer_norm|batch_norm|group_norm|rms_norm|native_layer_norm|norm_backward"),
    ("collectives", r"c10d|nccl|all_reduce|allreduce|all_gather|allgather|reduce_scatter|broadcast_|gloo"),
    ("reductions", r"::(sum|mean|max|min|amax|amin|argmax|norm|linalg_vector_norm|prod|var|std|_foreach_norm|"
                   r"nll_loss\w*|cross_entropy\w*|log_softmax\w*|_log_softmax\w*|logsumexp|all|any)\b"),
    ("data movement", r"::(copy_|_to_copy|to|clone|contiguous|transpose|t|permute|cat|stack|index\w*|gather|"
                      r"scatter\w*|embedding\w*|split\w*|chunk|narrow|slice\w*|select\w*|view|reshape|"
                      r"_unsafe_view|expand|as_strided|unsqueeze|squeeze|flatten|unbind|fill_|zero_|zeros\w*|"
                      r"empty\w*|ones\w*|new_\w*|detach\w*|_reshape_alias|resize_|set_|roll|where|masked_fill\w*|"
                      r"pad|constant_pad_nd|repeat\w*|embedding_dense_backward)\b"),
    ("element-wise", r"::\w+"),
]
_TORCH_RE = [(c, re.compile(p)) for c, p in _TORCH]


def torch_op(name: str) -> str:
    """The category of a torch profiler op (``aten::addmm``, ``aten::_foreach_mul_``...)."""
    n = name.lower()
    for cat, rx in _TORCH_RE:
        if rx.search(n):
            return cat
    return "other"


#: HLO opcodes by category (the rest: element-wise when listed below, else other)
_HLO = {
    "matmul": {"dot", "convolution", "custom-call:matmul", "cublas", "gemm"},
    "collectives": {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                    "all-reduce-start", "all-reduce-done", "all-gather-start", "all-gather-done",
                    "collective-permute-start", "collective-permute-done", "send", "recv"},
    "reductions": {"reduce", "reduce-window", "reduce-precision", "argmax", "sort"},
    "data movement": {"copy", "copy-start", "copy-done", "transpose", "concatenate", "gather", "scatter",
                      "dynamic-slice", "dynamic-update-slice", "slice", "pad", "reverse", "broadcast",
                      "reshape", "bitcast", "iota", "select-and-scatter", "bitcast-convert"},
    "element-wise": {"add", "subtract", "multiply", "divide", "maximum", "minimum", "exponential", "log",
                     "tanh", "sqrt", "rsqrt", "power", "negate", "abs", "select", "compare", "convert",
                     "and", "or", "not", "xor", "clamp", "sign", "log-plus-one", "exponential-minus-one",
                     "logistic", "erf", "floor", "ceil", "round-nearest-even", "round-nearest-afz", "cbrt",
                     "remainder", "atan2", "cosine", "sine", "is-finite", "constant", "shift-left",
                     "shift-right-logical", "shift-right-arithmetic", "popcnt", "rng-bit-generator",
                     "stochastic-convert", "real", "imag", "tan", "expm1", "log1p"},
}
_HLO_OF = {op: cat for cat, ops in _HLO.items() for op in ops}
#: op_name scope fragments that decide a category whatever the opcode
_SCOPE_CATS = [("attention", re.compile(r"softmax|dot_product_attention|attention_weights|attn_scores|"
                                        r"scaled_dot|/attn/.*(softmax|scores)")),
               ("normalization", re.compile(r"layer_?norm|rms_?norm|batch_?norm|/ln_\w+|/norm\b"))]
_NO_TIME = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all", "partition-id",
            "replica-id", "opt-barrier"}


def hlo_op(opcode: str, op_name: str = "") -> str:
    """The category of one (non-fusion) HLO instruction, from its opcode and its ``op_name`` metadata."""
    cat = _HLO_OF.get(opcode, "other")
    if cat in ("matmul", "collectives"):
        return cat
    for scat, rx in _SCOPE_CATS:
        if rx.search(op_name):
            return scat
    if opcode in ("custom-call",):
        return "other"
    return cat


def dominant(categories: list[str]) -> str:
    """The category a fusion of instructions with these categories counts for (see :data:`DOMINANCE`)."""
    present = set(categories)
    for cat in DOMINANCE:
        if cat in present:
            return cat
    return "other"


def timed_opcode(opcode: str) -> bool:
    """Whether an HLO instruction does work (parameters, tuples, bitcasts do not)."""
    return opcode not in _NO_TIME


_NODES = [("attention", ("attention", "softmaxbackward", "sdpa")), ("matmul", ("addmm", "mmbackward", "bmm", "linear")),
          ("normalization", ("layernorm", "batchnorm", "groupnorm", "rmsnorm")),
          ("reductions", ("nllloss", "logsoftmax", "sumbackward", "meanbackward", "norm")),
          ("data movement", ("view", "tbackward", "transpose", "permute", "split", "embedding", "reshape",
                             "expand", "select", "slice", "index", "cat", "stack", "clone", "copy", "unsafe",
                             "accumulategrad", "squeeze", "unbind")),
          ("element-wise", ("backward",))]


def torch_any(name: str) -> str:
    """The category of any torch profiler event: an aten op, or an autograd node (``AddmmBackward0``,
    ``autograd::engine::evaluate_function: AddmmBackward0``; their own time is the node's glue)."""
    if name.startswith("aten::") or ("::" in name and not name.startswith("autograd::")):
        return torch_op(name)
    n = name.rsplit(": ", 1)[-1].lower()
    for cat, keys in _NODES:
        if any(k in n for k in keys):
            return cat
    return "other"
