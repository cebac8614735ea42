"""Hugging Face checkpoints (``config.json`` + ``model.safetensors``) <-> ModelConfig and canonical weights.

``load_hf(path)`` reads a local GPT-2 (``model_type: gpt2``) or BERT (``model_type: bert``) checkpoint
into twinbench's :class:`ModelConfig` and canonical layout; ``save_hf(cfg, weights, path)`` writes the
canonical weights back as a checkpoint that ``transformers`` loads offline (``from_pretrained(path)``).

Only ``json`` and ``safetensors.numpy`` are used here: no torch, JAX or transformers import, so the parent
process can read a checkpoint's shape without loading a framework.

GPT-2: Hugging Face's ``Conv1D`` weights are already ``[in, out]`` (canonical); the names differ only by the
``transformer.`` prefix and ``h.`` -> ``blocks.``. The causal-mask buffers of old checkpoints
(``attn.bias``, ``attn.masked_bias``) are ignored; ``lm_head.weight`` must be tied to ``wte`` (the twin
ties them). ``gelu_new`` is the tanh GELU of the twin; ``layer_norm_epsilon`` must be 1e-5 (the twin's).

BERT: the canonical names are Hugging Face's without the ``bert.`` prefix; ``nn.Linear`` weights are
transposed (``[out, in]`` -> ``[in, out]``). ``hidden_act`` must be ``gelu`` (erf), ``layer_norm_eps`` 1e-12,
two segment types, absolute positions. TF-converted ``gamma``/``beta`` names, the ``position_ids`` buffer
and pre-training heads (``cls.*``) are handled; an encoder-only checkpoint gets a fresh pooler/classifier.
Exports are ``BertForSequenceClassification`` checkpoints.

Checkpoints may be sharded (``model.safetensors.index.json``) and fp16/bf16 (read as float32). Exported
configs set dropout to 0: the twins have none, so the exported model behaves as it was measured.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from twinbench.config import ModelConfig, SpecError
from twinbench.models.weights import Canonical

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
FLAG = "--init-from"

GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # all the tanh approximation of GELU
GPT2_EPS = 1e-5


# ---------------------------------------------------------------------------------------------- reading
def read_config(path: str | Path, flag_name: str = FLAG) -> dict[str, Any]:
    """The checkpoint's ``config.json`` as a dict; a one-line :class:`SpecError` if it is not there."""
    p = Path(path)
    if not p.is_dir():
        raise SpecError(f"{flag_name} {path}: no such directory (give a Hugging Face checkpoint directory)")
    cfg_path = p / CONFIG
    if not cfg_path.is_file():
        raise SpecError(f"{flag_name} {path}: no {CONFIG} there")
    try:
        cfg = json.loads(cfg_path.read_text())
    except ValueError as e:
        raise SpecError(f"{flag_name} {path}: {CONFIG} is not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise SpecError(f"{flag_name} {path}: {CONFIG} is not a JSON object")
    return cfg


def model_type(hf: dict[str, Any]) -> str:
    mt = hf.get("model_type")
    if not mt:
        archs = " ".join(hf.get("architectures") or [])
        mt = "gpt2" if "GPT2" in archs else "bert" if "Bert" in archs else ""
    return str(mt)


def config_from_hf(path: str | Path, flag_name: str = FLAG) -> ModelConfig:
    """The twin's ModelConfig for the checkpoint at ``path`` (reads ``config.json`` only)."""
    hf = read_config(path, flag_name)
    mt = model_type(hf)
    if mt not in _FAMILIES:
        raise SpecError(f"{flag_name} {path}: model_type {mt or '(none)'!r} is not supported; "
                        f"allowed: {', '.join(_FAMILIES)}")
    return _FAMILIES[mt]["config"](hf, f"{flag_name} {path}")


def read_tensors(path: str | Path, flag_name: str = FLAG) -> dict[str, np.ndarray]:
    """Every tensor of ``model.safetensors`` (or of the shards its index names), as float32 NumPy."""
    from safetensors.numpy import load_file

    p = Path(path)
    if (p / SAFETENSORS).is_file():
        files = [p / SAFETENSORS]
    elif (p / SAFETENSORS_INDEX).is_file():
        index = json.loads((p / SAFETENSORS_INDEX).read_text())
        files = [p / f for f in sorted(set(index.get("weight_map", {}).values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing or not files:
            raise SpecError(f"{flag_name} {path}: shard files missing: {', '.join(missing) or '(index is empty)'}")
    else:
        bins = [f.name for f in p.glob("*.bin")] + [f.name for f in p.glob("*.h5")]
        hint = f" (found {', '.join(bins)}: re-save it with save_pretrained(safe_serialization=True))" if bins else ""
        raise SpecError(f"{flag_name} {path}: no {SAFETENSORS} there{hint}")
    out: dict[str, np.ndarray] = {}
    for f in files:
        try:
            tensors = load_file(str(f))
        except TypeError:  # bfloat16, which NumPy lacks: widen it to float32 ourselves
            tensors = _read_widening_bf16(f, f"{flag_name} {path}")
        except Exception as e:  # a truncated or foreign file: one line, not a traceback
            raise SpecError(f"{flag_name} {path}: cannot read {f.name}: {type(e).__name__}: {e}") from None
        for k, v in tensors.items():
            out[k] = np.asarray(v, dtype=np.float32) if v.dtype != np.float32 else v
    return out


_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
              "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _read_widening_bf16(f: Path, where: str) -> dict[str, np.ndarray]:
    """Read a safetensors file by its documented layout (u64 header size, JSON header, raw little-endian
    data), turning BF16 tensors into float32 exactly (bf16 is the top half of a float32)."""
    try:
        raw = f.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        data = memoryview(raw)[8 + n:]
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            if info["dtype"] == "BF16":
                bits = np.frombuffer(data[start:end], dtype="<u2").astype(np.uint32) << 16
                a = bits.view(np.float32)
            else:
                a = np.frombuffer(data[start:end], dtype=np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<"))
            out[name] = a.reshape(info["shape"])
        return out
    except Exception as e:  # a dtype we do not know (e.g. FP8) or a damaged file
        raise SpecError(f"{where}: cannot read {f.name}: {type(e).__name__}: {e}") from None


def load_hf(path: str | Path, flag_name: str = FLAG) -> tuple[ModelConfig, Canonical]:
    """A local Hugging Face GPT-2 or BERT checkpoint as (ModelConfig, canonical weights)."""
    cfg = config_from_hf(path, flag_name)
    hf = read_config(path, flag_name)
    tensors = read_tensors(path, flag_name)
    weights = _FAMILIES[model_type(hf)]["to_canonical"](tensors, cfg, f"{flag_name} {path}")
    check_shapes(weights, expected_shapes(cfg), f"{flag_name} {path}")
    return cfg, weights


# ---------------------------------------------------------------------------------------------- writing
def save_hf(cfg: ModelConfig, weights: Canonical, path: str | Path) -> Path:
    """Write ``weights`` (canonical layout of ``cfg``) as a Hugging Face checkpoint directory."""
    from safetensors.numpy import save_file

    family = _family_of(cfg)
    check_shapes(weights, expected_shapes(cfg), "weights")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    hf_cfg, tensors = family["to_hf"](cfg, weights)
    (out / CONFIG).write_text(json.dumps(hf_cfg, indent=2, sort_keys=True) + "\n")
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}, str(out / SAFETENSORS),
              metadata={"format": "pt"})  # transformers refuses safetensors files without this tag
    return out


# ------------------------------------------------------------------------------------------ shapes
def checkpoint_fields(cfg: ModelConfig) -> dict[str, Any]:
    """The ModelConfig fields a checkpoint determines (the others, e.g. ``mask_impl``, stay the run's)."""
    return {name: getattr(cfg, name) for name in _family_of(cfg)["fields"]}


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every canonical weight of ``cfg`` (the twin models' parameter set)."""
    return _family_of(cfg)["shapes"](cfg)


def check_shapes(weights: Canonical, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    missing, extra = sorted(set(shapes) - set(weights)), sorted(set(weights) - set(shapes))
    if missing or extra:
        raise SpecError(f"{where}: weights do not fit the model: missing {missing[:4]}, unexpected {extra[:4]}")
    for name, shape in shapes.items():
        if tuple(weights[name].shape) != shape:
            raise SpecError(f"{where}: {name} has shape {list(weights[name].shape)}, the model needs {list(shape)}")


# ---------------------------------------------------------------------------------------------- GPT-2
def _gpt2_config(hf: dict[str, Any], where: str) -> ModelConfig:
    try:
        d, n_inner = int(hf["n_embd"]), hf.get("n_inner")
        cfg = ModelConfig(family="gpt", layers=int(hf["n_layer"]), d_model=d, heads=int(hf["n_head"]),
                          d_ff=0 if n_inner in (None, 4 * d) else int(n_inner), vocab=int(hf["vocab_size"]),
                          context=int(hf.get("n_positions", hf.get("n_ctx", 0))))
    except (KeyError, TypeError, ValueError) as e:
        raise SpecError(f"{where}: {CONFIG} lacks a valid GPT-2 field {e}") from None
    act = hf.get("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        raise SpecError(f"{where}: activation_function {act!r} is not supported; allowed: {', '.join(GPT2_ACTIVATIONS)}")
    eps = float(hf.get("layer_norm_epsilon", GPT2_EPS))
    if abs(eps - GPT2_EPS) > 1e-12:
        raise SpecError(f"{where}: layer_norm_epsilon {eps:g} is not supported; the twin GPT uses {GPT2_EPS:g}")
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                      ("reorder_and_upcast_attn", False), ("add_cross_attention", False)):
        if bool(hf.get(key, want)) != want:
            raise SpecError(f"{where}: {key}={hf[key]} is not supported by the twin GPT (needs {want})")
    if cfg.context <= 0 or cfg.d_model % cfg.heads:
        raise SpecError(f"{where}: inconsistent GPT-2 config (n_positions {cfg.context}, n_embd {d}, "
                        f"n_head {cfg.heads})")
    return cfg


_GPT2_IGNORED = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers, not weights


def _gpt2_to_canonical(tensors: dict[str, np.ndarray], cfg: ModelConfig, where: str) -> Canonical:
    out: Canonical = {}
    lm_head = None
    for name, a in tensors.items():
        if name == "lm_head.weight":
            lm_head = a
            continue
        short = name.removeprefix("transformer.")
        if _GPT2_IGNORED.match(short):
            continue
        out[re.sub(r"^h\.", "blocks.", short)] = a
    if lm_head is not None and "wte.weight" in out and not np.array_equal(lm_head, out["wte.weight"]):
        raise SpecError(f"{where}: lm_head.weight is not tied to wte.weight; the twin GPT ties them")
    if "wte.weight" not in out and lm_head is not None:
        out["wte.weight"] = lm_head
    return out


def _gpt2_to_hf(cfg: ModelConfig, weights: Canonical) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    hf_cfg = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": cfg.layers,
        "n_embd": cfg.d_model, "n_head": cfg.heads, "n_inner": cfg.d_ff or None, "n_positions": cfg.context,
        "n_ctx": cfg.context, "vocab_size": cfg.vocab, "activation_function": "gelu_new",
        "layer_norm_epsilon": GPT2_EPS, "tie_word_embeddings": True, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        # the twin has no dropout: an exported model trains and evaluates the way it was measured
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "summary_first_dropout": 0.0,
        "bos_token_id": None, "eos_token_id": None, "torch_dtype": "float32",
        "initializer_range": 0.02, "use_cache": True, "exported_by": "twinbench",
    }
    tensors = {"transformer." + re.sub(r"^blocks\.", "h.", k): v for k, v in weights.items()}
    return hf_cfg, tensors  # lm_head.weight is tied: transformers re-ties it on load


def _gpt_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    d, ff = cfg.d_model, cfg.ff
    shapes: dict[str, tuple[int, ...]] = {"wte.weight": (cfg.vocab, d), "wpe.weight": (cfg.context, d),
                                          "ln_f.weight": (d,), "ln_f.bias": (d,)}
    per_block = {"ln_1.weight": (d,), "ln_1.bias": (d,), "ln_2.weight": (d,), "ln_2.bias": (d,),
                 "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
                 "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,),
                 "mlp.c_fc.weight": (d, ff), "mlp.c_fc.bias": (ff,),
                 "mlp.c_proj.weight": (ff, d), "mlp.c_proj.bias": (d,)}
    for i in range(cfg.layers):
        shapes.update({f"blocks.{i}.{k}": v for k, v in per_block.items()})
    return shapes



# ----------------------------------------------------------------------------------------------- BERT
BERT_EPS = 1e-12
BERT_TYPE_VOCAB = 2  # the twin's segment ids (first / second text of a pair)
BERT_ACTIVATIONS = ("gelu",)  # the exact (erf) GELU of the twin


def _bert_config(hf: dict[str, Any], where: str) -> ModelConfig:
    try:
        d, ff = int(hf["hidden_size"]), int(hf["intermediate_size"])
        labels = hf.get("num_labels") or len(hf.get("id2label") or {}) or 2
        cfg = ModelConfig(family="bert", layers=int(hf["num_hidden_layers"]), d_model=d,
                          heads=int(hf["num_attention_heads"]), d_ff=0 if ff == 4 * d else ff,
                          vocab=int(hf["vocab_size"]), context=int(hf["max_position_embeddings"]),
                          num_labels=int(labels))
    except (KeyError, TypeError, ValueError) as e:
        raise SpecError(f"{where}: {CONFIG} lacks a valid BERT field {e}") from None
    act = hf.get("hidden_act", "gelu")
    if act not in BERT_ACTIVATIONS:
        raise SpecError(f"{where}: hidden_act {act!r} is not supported; allowed: {', '.join(BERT_ACTIVATIONS)}")
    eps = float(hf.get("layer_norm_eps", BERT_EPS))
    if abs(eps - BERT_EPS) > 1e-15:
        raise SpecError(f"{where}: layer_norm_eps {eps:g} is not supported; the twin BERT uses {BERT_EPS:g}")
    for key, want in (("type_vocab_size", BERT_TYPE_VOCAB), ("position_embedding_type", "absolute"),
                      ("is_decoder", False), ("add_cross_attention", False)):
        if hf.get(key, want) != want:
            raise SpecError(f"{where}: {key}={hf[key]!r} is not supported by the twin BERT (needs {want!r})")
    if cfg.context <= 0 or cfg.d_model % cfg.heads:
        raise SpecError(f"{where}: inconsistent BERT config (max_position_embeddings {cfg.context}, "
                        f"hidden_size {d}, num_attention_heads {cfg.heads})")
    return cfg


_BERT_IGNORED = re.compile(r"^(embeddings\.position_ids|cls\..*)$")  # a buffer; pre-training heads
_BERT_OLD_NAMES = {"gamma": "weight", "beta": "bias"}  # LayerNorm names of TF-converted checkpoints


def _bert_is_linear(name: str, a: np.ndarray) -> bool:
    return a.ndim == 2 and "embeddings." not in name


def _bert_to_canonical(tensors: dict[str, np.ndarray], cfg: ModelConfig, where: str) -> Canonical:
    """HF ``nn.Linear`` weights are ``[out, in]``: transposed to canonical ``[in, out]``.

    A checkpoint without the sequence-classification head (``BertModel``, ``BertForMaskedLM``) gets the
    missing ``pooler``/``classifier`` freshly initialised (Normal(0, 0.02), zero bias, seed 0), as
    transformers does when fine-tuning starts from a pre-trained encoder; both twins get the same arrays.
    """
    out: Canonical = {}
    for name, a in tensors.items():
        short = name.removeprefix("bert.")
        if _BERT_IGNORED.match(short):
            continue
        head, _, leaf = short.rpartition(".")
        short = f"{head}.{_BERT_OLD_NAMES.get(leaf, leaf)}"
        out[short] = np.ascontiguousarray(a.T) if _bert_is_linear(short, a) else a
    rng = np.random.default_rng(0)
    for name, (n_in, n_out) in (("pooler.dense", (cfg.d_model, cfg.d_model)),
                                ("classifier", (cfg.d_model, cfg.num_labels))):
        if f"{name}.weight" not in out and f"{name}.bias" not in out:
            out[f"{name}.weight"] = (rng.standard_normal((n_in, n_out)) * 0.02).astype(np.float32)
            out[f"{name}.bias"] = np.zeros(n_out, np.float32)
    return out


def _bert_to_hf(cfg: ModelConfig, weights: Canonical) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    hf_cfg = {
        "architectures": ["BertForSequenceClassification"], "model_type": "bert",
        "num_hidden_layers": cfg.layers, "hidden_size": cfg.d_model, "num_attention_heads": cfg.heads,
        "intermediate_size": cfg.ff, "vocab_size": cfg.vocab, "max_position_embeddings": cfg.context,
        "type_vocab_size": BERT_TYPE_VOCAB, "hidden_act": "gelu", "layer_norm_eps": BERT_EPS,
        "position_embedding_type": "absolute", "pad_token_id": 0, "num_labels": cfg.num_labels,
        "id2label": {str(i): f"LABEL_{i}" for i in range(cfg.num_labels)},
        "label2id": {f"LABEL_{i}": i for i in range(cfg.num_labels)},
        # the twin has no dropout: an exported model trains and evaluates the way it was measured
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "torch_dtype": "float32",
        "initializer_range": 0.02, "exported_by": "twinbench",
    }
    tensors = {}
    for k, v in weights.items():
        hf_name = k if k.startswith("classifier.") else "bert." + k
        tensors[hf_name] = v.T if _bert_is_linear(k, v) else v
    return hf_cfg, tensors


def _bert_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    d, ff = cfg.d_model, cfg.ff
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (cfg.vocab, d), "embeddings.position_embeddings.weight": (cfg.context, d),
        "embeddings.token_type_embeddings.weight": (BERT_TYPE_VOCAB, d),
        "embeddings.LayerNorm.weight": (d,), "embeddings.LayerNorm.bias": (d,),
        "pooler.dense.weight": (d, d), "pooler.dense.bias": (d,),
        "classifier.weight": (d, cfg.num_labels), "classifier.bias": (cfg.num_labels,)}
    per_layer = {"attention.self.query": (d, d), "attention.self.key": (d, d), "attention.self.value": (d, d),
                 "attention.output.dense": (d, d), "intermediate.dense": (d, ff), "output.dense": (ff, d)}
    for i in range(cfg.layers):
        p = f"encoder.layer.{i}"
        for name, (n_in, n_out) in per_layer.items():
            shapes[f"{p}.{name}.weight"] = (n_in, n_out)
            shapes[f"{p}.{name}.bias"] = (n_out,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}.{ln}.weight"] = (d,)
            shapes[f"{p}.{ln}.bias"] = (d,)
    return shapes


# ------------------------------------------------------------------------------------------- families
_TASK_OF = {"gpt": "lm", "bert": "classify"}
_GPT_FIELDS = ("family", "layers", "d_model", "heads", "d_ff", "vocab", "context")
_FAMILIES: dict[str, dict[str, Any]] = {
    "gpt2": {"family": "gpt", "fields": _GPT_FIELDS, "config": _gpt2_config,
             "to_canonical": _gpt2_to_canonical, "to_hf": _gpt2_to_hf, "shapes": _gpt_shapes},
    "bert": {"family": "bert", "fields": (*_GPT_FIELDS, "num_labels"), "config": _bert_config,
             "to_canonical": _bert_to_canonical, "to_hf": _bert_to_hf, "shapes": _bert_shapes},
}


def _family_of(cfg: ModelConfig) -> dict[str, Any]:
    for fam in _FAMILIES.values():
        if fam["family"] == cfg.family:
            return fam
    raise SpecError(f"--family {cfg.family}: no Hugging Face format for it; allowed: "
                    f"{', '.join(f['family'] for f in _FAMILIES.values())}")
