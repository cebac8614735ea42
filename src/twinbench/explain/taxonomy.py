"""One op taxonomy for both frameworks: an aten op name or an XLA HLO instruction -> a category.

Categories: matmul, attention (scores/softmax/SDPA), normalization, element-wise, reductions, data movement
(copy, transpose, concatenate, gather/scatter), collectives, optimizer, compilation (a compiler at work
inside a step: :func:`compile_event`), other: each declared once (:class:`Category`, :data:`DECLARED`). A torch op is named by its
aten name; an HLO instruction by its opcode, and a fusion by the instructions it contains: the fusion counts
whole for its *dominant* category (the first present in :data:`DOMINANCE`: a fusion holding a dot is a
matmul even if it also adds a bias). The ``optimizer`` category is decided by scope (the update marked
``optimizer``), not by op: every op inside it counts there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Category:
    """An op category, declared once (:data:`DECLARED`): its ``name``, what bounds it (``compute``: FLOPs, its
    rate against the framework's matmul peak; ``memory``: bytes moved, told in GB/s, and named no further than
    its phase's memory-bound rows confirm where a compiler fuses; ``communication``, ``update``, ``host``: time
    no op of the model spends; ``unknown``), and what it holds. Every rule table below names categories by
    these names, checked when this module is imported: a misspelled one fails there, not at run time."""

    name: str
    bound: str
    holds: str


DECLARED = (
    Category("matmul", "compute", "matrix products and convolutions, forward and backward"),
    Category("attention", "compute", "the score and value products, the softmax and their backward"),
    Category("normalization", "memory", "layer, batch, group and RMS norms"),
    Category("element-wise", "memory", "pointwise arithmetic, activations, dropout, random numbers"),
    Category("reductions", "memory", "sums, means, maxima, pooling, the loss's softmax"),
    Category("data movement", "memory", "copies, transposes, concatenation, gather/scatter, views"),
    Category("collectives", "communication", "all-reduce, all-gather, reduce-scatter, send/recv"),
    Category("optimizer", "update", "every op inside the optimizer's update"),
    Category("compilation", "host", "a compiler at work inside a step: XLA, jit's tracing, torch.compile"),
    Category("other", "unknown", "an op no rule names"),
    Category("idle", "host", "step time no op covers: dispatch, Python, idle threads (rest / idle)"),
)
REGISTRY = {c.name: c for c in DECLARED}
#: the categories an op can be filed under (idle is the step's time no op covers)
CATEGORIES = tuple(c.name for c in DECLARED if c.name != "idle")


def bound_by(bound: str) -> tuple[str, ...]:
    """The declared categories of one bound (``compute``, ``memory``...), in their declared order."""
    return tuple(c.name for c in DECLARED if c.bound == bound)


#: categories whose throughput is FLOP/s; memory-bound ones are told in bytes per second
COMPUTE = bound_by("compute")
MEMORY_BOUND = bound_by("memory")


def declared(table: str, names: Iterable[str]) -> None:
    """Raise :class:`ValueError` naming ``table`` when it names a category :data:`DECLARED` does not."""
    unknown = sorted(set(names) - set(REGISTRY))
    if unknown:
        raise ValueError(f"{table} names categories never declared in taxonomy.DECLARED: {unknown}")


#: time a compiler ran inside a step (a recompile, an autotuning pass): a row of its own, never idle
COMPILATION = REGISTRY["compilation"].name

#: host events of a compiler at work, as the profilers record them: JAX's ``backend_compile`` (named
#: ``backend_compile_and_load`` from 0.5), PJRT's ``PjRtCpuClient::Compile``/``PjRtStreamExecutorClient::Compile``
#: and the compilers' own passes (``CpuCompiler::RunBackend``, ``GpuCompiler::RunHloPasses``, the GEMM
#: autotuners), jit's tracing and lowering where a TraceMe or the Python tracer names them
#: (``trace_to_jaxpr_dynamic``, ``$pjit.py:466 _trace_for_jit``, ``lower_sharding_computation``); torch's
#: Dynamo and Inductor phases (every ``dynamo_timed`` span is recorded as ``NAME (dynamo_timed)``: the
#: frame's ``_compile.compile_inner``, ``compile_fx_inner``...) and Inductor's benchmarking of candidate
#: kernels (``inductor_do_bench_using_profiling``, ``autotune_select_algorithm``)
_COMPILE = re.compile(r"^(backend_compile\w*|\w*Client::Compile|\w*Compiler::(RunBackend|RunHloPasses|Compile\w*)|"
                      r"\w*[Aa]utotun\w*|trace_to_jaxpr\w*|lower_sharding_computation|lower_mesh_computation|"
                      r"\$\S+ (_trace_for_jit|trace_to_jaxpr\w*|lower_sharding_computation|backend_compile\w*)|"
                      r".+ \(dynamo_timed\)|inductor_do_bench_using_profiling|autotune_select_algorithm)$")
#: the compile events that are one compile each (a module's backend compile, a Dynamo frame's); where a
#: trace has none of these, each outermost compile event is one
_ONE_COMPILE = re.compile(r"^(backend_compile\w*|_compile\.compile_inner \(dynamo_timed\))$")


def compile_event(name: str) -> bool:
    """Whether a host event's name is a compiler at work (see :data:`_COMPILE`)."""
    return bool(_COMPILE.match(name))


def one_compile(name: str) -> bool:
    """Whether a compile event is one compile of its own (see :data:`_ONE_COMPILE`)."""
    return bool(_ONE_COMPILE.match(name))


#: when a fusion mixes categories it is counted whole for the first of these it contains
DOMINANCE = ("collectives", "attention", "matmul", "normalization", "reductions", "data movement", "element-wise")

_TORCH = [
    ("attention", r"scaled_dot_product|_flash_attention|_efficient_attention|sdpa|(?<!log_)softmax|attention"),
    ("matmul", r"::(mm|bmm|addmm|matmul|linear|baddbmm|addbmm|einsum|_mm|dot|mv|addmv)\b|gemm|cublas|sgemm|"
               r"::(_?convolution\w*|conv\dd|conv_transpose\dd|mkldnn_convolution\w*|cudnn_convolution\w*|"
               r"_slow_conv\w*|thnn_conv\w*)\b|"  # a convolution is XLA's matmul category too
               r"::(mkldnn_rnn_layer\w*|_cudnn_rnn\w*|miopen_rnn\w*|lstm|gru|rnn_tanh|rnn_relu)\b"),  # a fused
    # recurrent layer runs its gate products for every step (XLA's are dots)
    ("normalization", r"layer_norm|batch_norm|group_norm|rms_norm|native_layer_norm|norm_backward"),
    ("collectives", r"c10d|nccl|all_reduce|allreduce|all_gather|allgather|reduce_scatter|broadcast_|gloo"),
    ("reductions", r"::(sum|mean|max|min|amax|amin|argmax|norm|linalg_vector_norm|prod|var|std|_foreach_norm|"
                   r"max_pool\dd\w*|avg_pool\dd\w*|adaptive_\w+_pool\dd\w*|"
                   r"nll_loss\w*|cross_entropy\w*|log_softmax\w*|_log_softmax\w*|logsumexp|all|any)\b"),
    ("data movement", r"::(copy_|_to_copy|to|clone|contiguous|transpose|t|permute|cat|stack|index\w*|gather|"
                      r"scatter\w*|embedding\w*|split\w*|chunk|narrow|slice\w*|select\w*|view|reshape|"
                      r"_unsafe_view|expand|as_strided|unsqueeze|squeeze|flatten|unbind|fill_|zero_|zeros\w*|"
                      r"empty\w*|ones\w*|new_\w*|detach\w*|_reshape_alias|resize_|set_|roll|where|masked_fill\w*|"
                      r"pad|constant_pad_nd|repeat\w*|embedding_dense_backward)\b"),
    # views, metadata and host-side bookkeeping: no arithmetic, at most a copy
    ("data movement", r"::(alias|expand_as|lift_fresh\w*|numpy_t|resolve_conj|resolve_neg|result_type|unflatten|"
                      r"is_nonzero|is_pinned|cudnn_is_acceptable|scalar_tensor|item|_local_scalar_dense|pin_memory|"
                      r"_pin_memory|record_stream|resize_as_|as_strided_|\w*flatten_dense_tensors|gather_backward|"
                      r"copy_bucket_to_grad)\b"),
    # pointwise arithmetic by name (and its backward): an op no rule names is "other", not element-wise, so a trace
    # of unknown kernels (a library's own fused ops) is not counted as categorized (explain/causes.py: 90%)
    ("element-wise", r"::(_foreach_\w+|(add|sub|rsub|mul|div|true_divide|floor_divide|remainder|fmod|neg|abs|sgn|"
                     r"sign|exp|exp2|expm1|log|log1p|log2|log10|sqrt|rsqrt|square|pow|reciprocal|sin|cos|tan|tanh|"
                     r"sigmoid|logit|relu|relu6|gelu|silu|mish|elu|selu|celu|glu|leaky_relu|hardtanh|hardsigmoid|"
                     r"hardswish|softplus|softshrink|hardshrink|threshold|clamp|clamp_min|clamp_max|clip|maximum|"
                     r"minimum|fmax|fmin|eq|ne|lt|le|gt|ge|logical_\w+|bitwise_\w+|isnan|isinf|isneginf|isposinf|"
                     r"isfinite|nan_to_num|floor|ceil|round|trunc|frac|lerp|addcmul|addcdiv|erf|erfc|erfinv|dropout|"
                     r"native_dropout|feature_dropout|alpha_dropout|bernoulli|normal|uniform|random|rand|rand_like|"
                     r"randn|randn_like|randint|randint_like|randperm|full|full_like|arange|linspace|tril|triu|"
                     r"copysign|hypot|atan2|xlogy|heaviside|mse_loss|binary_cross_entropy\w*|smooth_l1_loss|l1_loss|"
                     r"huber_loss|bucketize|searchsorted|_softmax_backward_data|accumulategrad)(_backward)?_?)\b|"
                     r"^autograd::engine::evaluate_function"),  # the autograd node around a backward op
]
_TORCH_RE = [(c, re.compile(p)) for c, p in _TORCH]
declared("taxonomy._TORCH", (c for c, _ in _TORCH))


def torch_op(name: str) -> str:
    """The category of a torch profiler op (``aten::addmm``, ``aten::_foreach_mul_``...)."""
    n = name.lower()
    for cat, rx in _TORCH_RE:
        if rx.search(n):
            return cat
    return "other"


#: HLO opcodes by category (the rest: element-wise when listed below, else other)
_HLO = {
    "matmul": {"dot", "convolution", "cublas-gemm", "cublas-lt-matmul", "gemm"},
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
COLLECTIVE_OPCODES = frozenset(_HLO["collectives"])
_HLO_OF = {op: cat for cat, ops in _HLO.items() for op in ops}
declared("taxonomy._HLO", _HLO)
#: op_name scope fragments that decide a category whatever the opcode
_SCOPE_CATS = [("reductions", re.compile(r"log_?softmax|cross_entropy|nll_loss|logsumexp")),  # the loss, as
               # torch's log_softmax/nll_loss rows are: a softmax over the vocabulary is not attention
               ("attention", re.compile(r"softmax|dot_product_attention|attention_weights|attn_scores|"
                                        r"scaled_dot|/attn/.*(softmax|scores)")),
               ("normalization", re.compile(r"layer_?norm|rms_?norm|batch_?norm|/ln_\w+|/norm\b"))]
_EINSUM = re.compile(r"([a-zA-Z.]+(?:,[a-zA-Z.]+)+->[a-zA-Z.]*)")


def attention_product(op_name: str) -> bool:
    """Whether an ``op_name`` path names an attention product: an einsum batched over two or more dimensions
    that both operands and the result carry (batch and heads: ``bqhd,bkhd->bhqk``, ``bhqk,bkhd->bqhd``, or
    ``...qhd,...khd->...hqk``; flax's ``vmap(BTNH,BSNH->BNTS)``). A projection (``btd,dhk->bthk``) shares no dimension between its operands and
    result, so stays a matmul. The backward of an attention product keeps the product's name in its path
    (``transpose(jvp(block1))/attn/bqhd,bkhd->bhqk/dot_general``), so it is attention too, as in torch's
    SDPA backward."""
    for spec in _EINSUM.findall(op_name):
        ins, out = spec.split("->")
        terms = ins.split(",")
        if len(terms) != 2:
            continue
        shared = set(terms[0].replace(".", "")) & set(terms[1].replace(".", "")) & set(out.replace(".", ""))
        ellipsis = all("..." in t for t in (*terms, out))
        if len(shared) + ellipsis >= 2:
            return True
    return False


def scope_category(op_name: str) -> str:
    """The category an ``op_name`` path decides whatever the op's kind ("" when it decides none): attention
    (an attention product, softmax, a fused attention primitive), normalization (a norm scope)."""
    if not op_name:
        return ""
    if attention_product(op_name):
        return "attention"
    for scat, rx in _SCOPE_CATS:
        if rx.search(op_name):
            return scat
    return ""


_NO_TIME = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all", "partition-id",
            "replica-id", "opt-barrier"}


def hlo_op(opcode: str, op_name: str = "") -> str:
    """The category of one (non-fusion) HLO instruction, from its opcode and its ``op_name`` metadata."""
    cat = _HLO_OF.get(opcode, "other")
    if cat == "collectives":
        return cat
    if attention_product(op_name):  # the score/value products and everything their path names: attention
        return "attention"
    if cat == "matmul":
        return cat
    for scat, rx in _SCOPE_CATS:
        if rx.search(op_name):
            return scat
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


_NODES = [("reductions", ("logsoftmax", "pool")), ("attention", ("attention", "softmaxbackward", "sdpa")),
          ("matmul", ("addmm", "mmbackward", "bmm", "linear", "convolution", "rnnlayer", "cudnnrnn", "miopenrnn")),
          ("normalization", ("layernorm", "batchnorm", "groupnorm", "rmsnorm")),
          ("reductions", ("nllloss", "logsoftmax", "sumbackward", "meanbackward", "norm")),
          ("data movement", ("view", "tbackward", "transpose", "permute", "split", "embedding", "reshape",
                             "expand", "select", "slice", "index", "cat", "stack", "clone", "copy", "unsafe",
                             "accumulategrad", "squeeze", "unbind", "detach")),
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


# --------------------------------------------------------------------------------------------- GPU kernels
#: kernel-name patterns, most specific first: what a kernel does, whatever op launched it. Vendor libraries
#: name their kernels (cuBLAS ``sm90_xmma_gemm``/``nvjet``, CUTLASS, rocBLAS/hipBLASLt ``Cijk_``, NCCL/RCCL,
#: FlashAttention/cuDNN/CK ``fmha``); a generic framework kernel (``vectorized_elementwise_kernel``) says less
#: than its launching op, so :func:`kernel` answers "" for those and :func:`generic_kernel` after the op.
_KERNEL = [
    ("collectives", r"nccl|rccl|msccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|"
                    r"one_?shot|two_?shot|ncclDevKernel"),
    ("optimizer", r"multi_tensor_apply|adam|fused_sgd|lamb_|_foreach_"),
    ("reductions", r"log_?softmax|logsoftmax|nll_loss|cross_entropy"),
    ("attention", r"flash|fmha|mha_|_mha|attention|attn|sdpa|softmax|dot_do_o|convert_dq"),
    ("normalization", r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|bn_fw|bn_bw|"
                      r"cuApplyLayerNorm|cuComputeGradInput|GammaBeta|welford"),
    ("matmul", r"gemm|gemv|cutlass|cublas|nvjet|xmma|hgemm|sgemm|Cijk_|wgrad|dgrad|fprop|implicit_?convolve|"
               r"conv2d|conv3d|convolution|im2col|im3d2col|splitKreduce|matmul|_mm_|\bmm\b|\bbmm_|triton_tem_fused_.*mm"),
]
_KERNEL_RE = [(c, re.compile(p, re.IGNORECASE)) for c, p in _KERNEL]
_GENERIC = [
    ("reductions", r"reduce|reduction|argmax|argmin|cub::Device(Reduce|Segmented|Radix|Scan)|sort|scan|cumsum"),
    ("data movement", r"copy|memcpy|memset|transpose|CatArray|concat|gather|scatter|index|embedding|pad|"
                      r"nchwToNhwc|nhwcToNchw|permute|fill|slice|roll|dynamic_update|broadcast|bitcast|"
                      r"split_embedding"),
    ("element-wise", r"elementwise|pointwise|unrolled|vectorized|activation|gelu|relu|silu|sigmoid|tanh|"
                     r"dropout|bias|add|mul|div|exp|rng|philox|distribution|convert|cast|where|clamp|"
                     r"sqrt|pow|neg|abs|loop_"),
]
_GENERIC_RE = [(c, re.compile(p, re.IGNORECASE)) for c, p in _GENERIC]
declared("taxonomy._KERNEL, _GENERIC", (c for c, _ in (*_KERNEL, *_GENERIC)))
_TRITON = re.compile(r"^triton_(poi|per|red|tem|for|unk)_(fused_)?(.*?)(_\d+)?$")
_XLA_FUSION = re.compile(r"^(loop|input)_(\w+?)_fusion(_\d+)?$")


def triton(name: str) -> str:
    """A Triton kernel of ``torch.compile`` (``triton_{poi,per,red,tem}_fused_<ops>_<n>``) by what it fuses:
    a template of mm is a matmul, one fusing softmax/layer_norm counts for that, a persistent or reduction
    kernel is a reduction, a pointwise one of copies only moves data, any other pointwise one is element-wise."""
    m = _TRITON.match(name)
    if not m:
        return ""
    kind, ops = m.group(1), m.group(3).lower()
    if kind == "tem" or re.search(r"(^|_)(mm|bmm|addmm|baddbmm|convolution)(_|$)", ops):
        return "matmul"
    for cat in ("reductions", "attention", "normalization"):
        found = dict(_KERNEL)[cat]
        if re.search(found, ops, re.IGNORECASE):
            return cat
    if kind in ("per", "red"):
        return "reductions"
    movement = {"clone", "copy", "to", "view", "permute", "transpose", "cat", "index", "embedding", "slice",
                "select", "gather", "scatter", "constant", "pad", "nd", "zeros", "fill", "unsafe", "expand",
                "new", "empty", "like", "split", "squeeze", "unsqueeze", "t", "stack", "full"}
    tokens = [t for t in ops.split("_") if t and not t.isdigit()]
    if tokens and all(t in movement for t in tokens):
        return "data movement"
    return "element-wise"


def xla_kernel(name: str) -> str:
    """An XLA:GPU kernel named after its fusion (``loop_add_fusion``, ``input_reduce_fusion_3``,
    ``wrapped_convert``) by the fusion's root opcode; "" for a name that says nothing (``fusion_949``)."""
    n = name.removesuffix(".kd")
    m = _XLA_FUSION.match(n)
    if m:
        cat = hlo_op(m.group(2).replace("_", "-"))
        if cat != "other":
            return cat
        return "reductions" if m.group(1) == "input" and "reduce" in m.group(2) else ""
    if n.startswith("wrapped_"):
        return hlo_op(re.sub(r"_\d+$", "", n.removeprefix("wrapped_")).replace("_", "-"))
    if n.startswith("gemm_fusion") or n.startswith("cublas") or n.startswith("triton_gemm"):
        return "matmul"
    return ""


def kernel(name: str) -> str:
    """The category a GPU kernel's name tells for sure ("" when it does not: ask its launching op)."""
    n = name.removeprefix("void ")
    t = triton(n)
    if t:
        return t
    x = xla_kernel(n)
    if x:
        return x
    for cat, rx in _KERNEL_RE:
        if rx.search(n):
            return cat
    return ""


def generic_kernel(name: str) -> str:
    """The category of a generic kernel (element-wise, reduction, copy templates) by its name; else other."""
    for cat, rx in _GENERIC_RE:
        if rx.search(name):
            return cat
    return "other"


#: XLA custom-call targets: cuBLAS/cuBLASLt and hipBLASLt matmuls, cuDNN fused attention and convolutions,
#: Transformer Engine's attention and GEMM FFI calls, NCCL-backed collectives
_CUSTOM = [("attention", r"fmha|fused_attn|flash|attention|sdpa|mha"),
           ("matmul", r"cublas|gemm|matmul|hipblas|rocblas|\$conv|cudnn\$conv|convolution|triton_gemm|"
                      r"nested_gemm"),
           ("normalization", r"norm"),
           ("collectives", r"nccl|all_reduce|allreduce|all_gather|reduce_scatter"),
           ("reductions", r"topk|sort|softmax_cross_entropy")]


def custom_call(target: str) -> str:
    """The category of an XLA custom call by its ``custom_call_target`` (``__cublas$lt$matmul``,
    ``__cudnn$fmhaSoftmaxBackward``, ``te_fused_attn_forward_ffi``...); other when it names nothing known."""
    for cat, p in _CUSTOM:
        if re.search(p, target, re.IGNORECASE):
            return cat
    return "other"


#: JAX primitives (the last segment of an ``op_name`` path) by category
_PRIMS = [("collectives", r"^(psum|pmax|pmin|all_gather|all_to_all|reduce_scatter|ppermute|psum_scatter)"),
          ("matmul", r"^(dot_general|conv_general_dilated|.*->.*)$"),
          ("attention", r"fused_attn|dot_product_attention|flash|fmha|mha|softmax"),
          ("reductions", r"^(reduce_\w+|argmax|argmin|cumsum|cumprod|cummax|sort|top_k|logsumexp)$"),
          ("data movement", r"^(transpose|reshape|broadcast_in_dim|concatenate|gather|scatter[\w-]*|"
                            r"dynamic_slice|dynamic_update_slice|slice|pad|squeeze|expand_dims|copy|copy_p|"
                            r"rev|select_and_scatter_add|iota|device_put)$"),
          ("element-wise", r"^\w+$")]


def jax_op_name(op_name: str) -> str:
    """A category from a JAX ``op_name`` path alone (``jit(f)/transpose(jvp(block0))/attn/dot_general``): a
    softmax/norm scope, else the primitive at its end; other when it names none."""
    if not op_name:
        return "other"
    last = op_name.rstrip("/").rsplit("/", 1)[-1]
    last = re.sub(r"^\w+\((.*)\)$", r"\1", last)
    if re.search(_PRIMS[0][1], last):
        return "collectives"
    if attention_product(op_name):
        return "attention"
    for cat, p in _PRIMS[1:2]:
        if re.search(p, last):
            return cat
    for scat, rx in _SCOPE_CATS:
        if rx.search(op_name):
            return scat
    for cat, p in _PRIMS[2:]:
        if re.search(p, last):
            return cat
    return "other"


# every rule table's categories, checked once the tables exist (a misspelled one fails on import)
declared("taxonomy.DOMINANCE", DOMINANCE)
declared("taxonomy._SCOPE_CATS, _NODES, _CUSTOM, _PRIMS",
         (c for c, _ in (*_SCOPE_CATS, *_NODES, *_CUSTOM, *_PRIMS)))
