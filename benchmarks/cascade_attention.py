"""The cost model's shared-prefix (cascade) decode attention against the published figures.

Two sources, both looked up (nothing here is made up; where a figure is read off a plot it says so):

* FlashInfer, "Cascade Inference: Memory Bandwidth Efficient Shared Prefix Batch Decoding" (blog,
  flashinfer.ai, Feb 2024; source in github.com/flashinfer-ai/flashinfer-ai.github.io,
  ``_posts/2024-01-08-cascade-inference.md``). Kernel-only: one attention layer of LLaMA2-7B's
  shape (32 query = 32 KV heads, head dim 128, fp16, page size 16) on an H100 SXM 80GB, batch
  decode over a shared prefix plus a unique suffix per request, against vLLM 0.2.6's
  PagedAttention and FlashInfer's own non-cascade batch decode. The text gives one figure
  exactly (prefix 32768, batch >= 128, suffix <= 256: up to 31x over vLLM, 26x over FlashInfer
  without cascade); the others are read by eye off Figure 4 (``assets/imgs/
  cascade-inference-performance-h100.png``, log2 axis; about +-10%). The cost model's "default"
  kernel is a bandwidth-roofline paged kernel, so it is compared with FlashInfer's non-cascade
  kernel: published speedup = (w/ cascade over vLLM) / (w/o cascade over vLLM).
* Hydragen (Juravsky et al. 2024, arXiv 2402.05099), abstract and introduction: end-to-end
  CodeLlama-13b decoding throughput "up to 32x" over competitive baselines (vLLM), growing with
  batch size and shared prefix length; "with a high batch size, increasing the prefix length from
  1K to 16K tokens decreases Hydragen throughput by less than 15%, while the throughput of
  baselines drops by over 90%". The grid is the one in the authors' repository
  (github.com/ScalingIntelligence/hydragen, ``docs/sweeps_from_paper.md``): 8 GPUs, batch 32 to
  1024, shared prefix 1024 to 16256 tokens, 128 generated tokens. The paper's per-point figures
  are plots we could not read as numbers; which GPU the 32x was measured on is not stated in the
  text we found, so an A100-SXM 80GB (datasheet figures) is assumed here. These are model-level
  claims, so the model's whole decode step (weights, dense FLOPs, overhead, TP) is compared.

Run: ``.venv/bin/python benchmarks/cascade_attention.py``.
"""

from __future__ import annotations

from kvharness.engine.cascade import merge_tokens
from kvharness.engine.cost import HARDWARE, CostModel, Deployment, Hardware, ModelSpec

LLAMA2_7B = ModelSpec("llama-2-7b", 6.74e9, 6.74e9, 32, 4096, 32, 32, 128)
CODELLAMA_13B = ModelSpec("codellama-13b", 13.0e9, 13.0e9, 40, 5120, 40, 40, 128)
# A100-SXM4-80GB datasheet: 312 TFLOP/s dense bf16, 2.039 TB/s HBM2e, NVLink 600 GB/s both ways.
A100 = Hardware("A100", 312e12, 312e12, 2.039e12, 81_920 * 2**20, 300e9)

# (batch, shared prefix, unique suffix, w/ cascade over vLLM, w/o cascade over vLLM, source)
FLASHINFER_H100 = [
    (256, 32768, 128, 31.0, 31.0 / 26.0, "text"),
    (16, 32768, 128, 5.2, 1.1, "fig. 4"),
    (64, 32768, 1024, 8.5, 1.1, "fig. 4"),
    (8, 32768, 2048, 2.2, 0.95, "fig. 4"),
    (256, 8192, 128, 15.0, 1.2, "fig. 4"),
    (64, 8192, 1024, 3.3, 1.25, "fig. 4"),
    (256, 2048, 128, 5.5, 1.35, "fig. 4"),
    (8, 1024, 128, 0.97, 1.3, "fig. 4"),
]

HYDRAGEN_BATCHES = [32, 64, 128, 256, 512, 1024]
HYDRAGEN_PREFIXES = [1024, 2048, 4096, 8192, 16256]
HYDRAGEN_TOKENS = 128


def kernel_speedup(cm: CostModel, batch: int, prefix: int, suffix: int) -> tuple[float, float]:
    """(cascade speedup of the attention part, the bytes-only ratio) for one decode step."""
    ctx = batch * (prefix + suffix)
    kv = min(ctx, prefix + batch * suffix + merge_tokens(cm.deployment) * batch)
    paged = cm.decode_attention_time(batch, ctx)
    cascade = cm.decode_attention_time(batch, ctx, kv)
    return paged / cascade, ctx / kv


def decode_throughput(cm: CostModel, batch: int, prefix: int, cascade: bool) -> float:
    """Generated tokens/s of ``batch`` sequences decoding ``HYDRAGEN_TOKENS`` tokens each after
    one shared ``prefix`` (whole decode steps: weights, dense FLOPs, attention, overhead)."""
    ctx0 = batch * (prefix + 1)
    kv0 = prefix + batch + merge_tokens(cm.deployment) * batch if cascade else None
    t = cm.decode_run_time(batch, ctx0, HYDRAGEN_TOKENS, kv0)
    return batch * HYDRAGEN_TOKENS / t


def main() -> int:
    h100 = CostModel(Deployment(HARDWARE["H100"], LLAMA2_7B, weight_dtype="bf16"))
    eff = h100.deployment.efficiency
    print(
        "== FlashInfer cascade kernel, H100 SXM, LLaMA2-7B attention shape, page 16: cascade "
        "over non-cascade batch decode =="
    )
    print(
        f"model: attention = max(pair FLOPs / ({eff.compute:g} x peak), KV bytes / "
        f"({eff.memory:g} x HBM)); cascade reads prefix + batch x (suffix + "
        f"{merge_tokens(h100.deployment)} merge tokens)"
    )
    print(
        f"{'batch':>5s} {'prefix':>6s} {'suffix':>6s} | {'pub w/':>6s} {'pub w/o':>7s} "
        f"{'published':>9s} | {'model':>6s} {'bytes':>6s} | {'model/pub':>9s}  source"
    )
    for batch, prefix, suffix, with_c, without_c, src in FLASHINFER_H100:
        published = with_c / without_c
        model, ratio = kernel_speedup(h100, batch, prefix, suffix)
        print(
            f"{batch:5d} {prefix:6d} {suffix:6d} | {with_c:6.2f} {without_c:7.2f} "
            f"{published:9.2f} | {model:6.2f} {ratio:6.1f} | {model / published:9.2f}  {src}"
        )
    # What the published maximum implies about the cascade kernel's speed.
    batch, prefix, suffix = 256, 32768, 128
    ctx = batch * (prefix + suffix)
    t_cascade = h100.decode_attention_time(batch, ctx) / 26.0
    m = h100.deployment.model
    flops = 4.0 * m.layers * m.heads * m.head_dim * ctx
    print(
        f"at batch 256, prefix 32768, suffix 128 the published 26x puts the cascade kernel at "
        f"{flops / t_cascade / 1e12:.0f} TFLOP/s, {flops / t_cascade / HARDWARE['H100'].bf16_flops:.0%}"
        f" of dense peak (the model assumes {eff.compute:.0%})"
    )

    print()
    print(
        "== Hydragen, CodeLlama-13b, 8 GPUs (TP8), A100-SXM 80GB assumed, fp16, 128 generated "
        "tokens: end-to-end decode throughput =="
    )
    a100 = CostModel(Deployment(A100, CODELLAMA_13B, tp=8, weight_dtype="bf16", kv_dtype="bf16"))
    best = (0.0, 0, 0)
    for batch in HYDRAGEN_BATCHES:
        for prefix in HYDRAGEN_PREFIXES:
            s = decode_throughput(a100, batch, prefix, True) / decode_throughput(
                a100, batch, prefix, False
            )
            best = max(best, (s, batch, prefix))
    print(
        f"{'claim':58s} | {'published':>12s} | {'model':>14s}\n"
        f"{'max speedup over the paged baseline on the grid':58s} | {'up to 32x':>12s} | "
        f"{best[0]:5.1f}x (b={best[1]}, p={best[2]})"
    )
    big = HYDRAGEN_BATCHES[-1]
    for label, cascade, pub in (("cascade", True, "< 15%"), ("paged", False, "> 90%")):
        lo = decode_throughput(a100, big, 1024, cascade)
        hi = decode_throughput(a100, big, 16256, cascade)
        print(
            f"{f'{label}: throughput drop, prefix 1K -> 16K, batch {big}':58s} | {pub:>12s} | "
            f"{1 - hi / lo:13.0%}"
        )
    print()
    print(
        "Where the model differs, and why:\n"
        "* Kernel level the model overstates the cascade speedup 2.5-6x. Its cascade kernel is "
        "bandwidth-bound (model = bytes ratio above): it reads the prefix once and the suffixes "
        "at the paged kernel's efficiency. The published kernel is not (our reading; the blog "
        "does not say): at batch 16 its prefix pass has likely one query tile per head (32 "
        "thread blocks for 132 SMs) and cannot pull full bandwidth; at batch 128-256 it stops gaining with batch (Figure 4: the two curves "
        "nearly meet), i.e. it is bound by per-pair work, at the ~7% of dense peak worked out "
        "above, where the model charges attention FLOPs at the 55% fitted for the whole step.\n"
        "* Batch 8, prefix 1024: published cascade is slower than no cascade (0.75x); the model "
        "predicts a gain: it omits the extra kernel launches of the prefix pass and the merge "
        "(a few microseconds a layer each), which dominate when little KV is saved.\n"
        "* End to end (Hydragen) the weights and dense FLOPs dilute the kernel gain and the "
        "model lands near the published figures (26.5x vs up to 32x; paged baseline drops 92% "
        "vs > 90%), but its cascade still loses 23% from 1K to 16K where Hydragen loses < 15%: "
        "at batch 1024 the model's step is compute-bound and its attention FLOPs on the 16K "
        "prefix (at 55% of peak) weigh more than Hydragen's measurements imply."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
