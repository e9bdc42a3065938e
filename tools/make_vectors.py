"""Generates golden test vectors for a checkpoint from Hugging Face transformers.

What it does: loads models/NAME with transformers' class for it (Qwen3ForCausalLM,
Qwen2ForCausalLM, Qwen3MoeForCausalLM: AutoModelForCausalLM) twice, in
float32 and in float64 (eager attention and, for MoE, eager experts; CPU), tokenizes a fixed set of four
ASCII prompts with the checkpoint's own HF tokenizer (no special tokens added),
and writes tests/test-vectors/NAME/:
  manifest.json   tokens, per-position argmax / top1-top2 gap / top-k of the
                  float32 logits, the tolerance bound and how it was derived,
                  sha256 of the checkpoint files and of our f32/bf16 GGUF
                  conversions, and the library versions used;
  logits_<i>.f32  little-endian float32 rows (n_vocab each) of the float32
                  logits of prompt i at the positions listed in the manifest
                  (for Kipp's trained models, kipp-*, also logits_<i>.f32.xz: the
                  committed form, which the Makefile unpacks).
The bound is B = max(S*G, F), where G is the largest |float32 - float64| logit
difference of the oracle itself over all prompts, positions and vocab entries.
It refuses to write vectors whose argmax is ambiguous (top1-top2 gap <= 2B at
any position).
For a mixture-of-experts checkpoint (Qwen3-MoE) a forward hook on every layer's router
(mlp.gate) records its logits and the experts it chose, and applies Kipp's tie rule: of
experts with exactly equal router probabilities at the k-th place the lower index is chosen
(torch.topk on the CPU picks either one, depending on where the other values lie). The hook
recomputes transformers' selection (softmax in float32, top k, optional renormalisation,
the same arithmetic) with a stable sort, which equals torch.topk's choice and weights bit for
bit wherever there is no exact tie at the k-th place (checked on every token and layer). The
manifest then also holds "routing": the smallest gap between the k-th and (k+1)-th largest
router probability and logit over every token and layer (float64 run, softmax in float64),
how many gaps are below 1e-3 in logits, how many are exact ties and what torch.topk would
have picked there, and how often each expert was chosen; and per prompt "experts" (the
chosen experts per layer and position, largest weight first) and "routing_min_logit_gap".
It refuses to write vectors where the float32 and float64 runs choose different experts.

What it does not do: run Kipp, compare anything, or work without torch and
transformers (install them with `make vectors`, which installs
tools/requirements-vectors.txt into .venv). As a side effect it converts the
checkpoint to models/NAME/kipp-NAME-{f32,bf16}.gguf (to hash them), and it
generates models/NAME first if NAME is a tiny checkpoint that is missing.

Usage: python -m tools.make_vectors --checkpoint NAME [--models-dir DIR] [--out DIR]
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/make_vectors.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent

PROMPTS = [
    "Question: What is the capital of France? Answer: The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "On March 14, 2025, the team shipped version 3.1.4 (build #2718) -- finally!",
    "Roses are red,\nviolets are blue.\n\nKipp reads GGUF files,\nand so can you.\n",
]
TOP_K = 10
SAFETY_FACTOR = 20.0
FLOOR = 1e-5


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def checkpoint_files(ckpt: Path) -> list[Path]:
    """The files that define the checkpoint (not our conversions or manifests)."""
    names = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
    if (ckpt / "model.safetensors.index.json").is_file():
        names.append("model.safetensors.index.json")
    files = [ckpt / n for n in names if (ckpt / n).is_file()]
    files += sorted(ckpt.glob("*.safetensors"))
    return sorted(files, key=lambda p: p.name)


def load_model(ckpt: Path, torch, transformers, dtype):
    kwargs = {"attn_implementation": "eager"}
    major = int(transformers.__version__.split(".")[0])
    kwargs["dtype" if major >= 5 else "torch_dtype"] = dtype
    if is_moe(ckpt):  # transformers 5 defaults to grouped_mm, which refuses float64 on the CPU
        kwargs["experts_implementation"] = "eager"
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt, **kwargs)  # the class config.json names
    model.eval()
    return model


def is_moe(ckpt: Path) -> bool:
    return json.loads((ckpt / "config.json").read_text(encoding="utf-8")).get("model_type") == "qwen3_moe"


class RouterHooks:
    """Forward hooks on every layer's router (Qwen3MoeTopKRouter: returns router_logits,
    router_scores, router_indices) that record each call and return the selection made with
    Kipp's tie rule (exact ties at the k-th place -> the lower expert index)."""

    def __init__(self, model, torch):
        self.torch, self.calls, self.topk_picks = torch, [], {"lower": 0, "higher": 0}
        self.handles = [layer.mlp.gate.register_forward_hook(self.hook) for layer in model.model.layers]

    def hook(self, mod, args, out):
        torch = self.torch
        logits, scores, indices = out
        k = mod.top_k
        # transformers' Qwen3MoeTopKRouter.forward, with torch.topk replaced by a stable sort
        probs = torch.nn.functional.softmax(logits, dtype=torch.float, dim=-1)
        order = torch.sort(probs, dim=-1, descending=True, stable=True).indices[:, :k]
        values = probs.gather(-1, order)
        if mod.norm_topk_prob:
            values /= values.sum(dim=-1, keepdim=True)
        values = values.to(logits.dtype)
        ranked = torch.cat([probs.sort(dim=-1, descending=True).values, torch.full_like(probs[:, :1], -1.0)], dim=-1)
        tie = ranked[:, k - 1] == ranked[:, k]  # (the -1 column: k may be every expert)
        same = (order == indices).all(dim=-1)
        if not bool(torch.equal(values[same], scores[same])):
            raise SystemExit("make_vectors: internal error: the router's recomputed weights differ from transformers'")
        for row in torch.nonzero(~same & ~tie).flatten().tolist():
            if set(order[row].tolist()) != set(indices[row].tolist()):
                raise SystemExit("make_vectors: internal error: torch.topk chose other experts without a tie")
        for row in torch.nonzero(tie).flatten().tolist():  # what torch.topk picked at each exact tie
            tied = (probs[row] == ranked[row, k - 1]).nonzero().flatten().tolist()
            picked = sorted(e for e in indices[row].tolist() if e in tied)
            rule = sorted(e for e in order[row].tolist() if e in tied)
            self.topk_picks["lower" if picked == rule else "higher"] += 1
        self.calls.append((logits.detach().to(torch.float64).clone(), order.clone()))
        return logits, values, order

    def take(self):
        calls, self.calls = self.calls, []
        return calls


def routing_stats(calls64: list, calls32: list, k: int, n_expert: int) -> tuple[dict, list]:
    """The manifest's routing block and per-prompt fields from the router calls of each prompt
    (float64 and float32 runs; one call per layer per prompt, in layer order)."""
    prompt_fields, gaps_l, gaps_p, use, differ = [], [], [], np.zeros(n_expert, dtype=np.int64), 0
    for c64, c32 in zip(calls64, calls32):
        experts, pmin = [], np.inf
        for (l64, o64), (_, o32) in zip(c64, c32):
            lg = l64.numpy()
            p = np.exp(lg - lg.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            pad = np.full((lg.shape[0], 1), -np.inf)  # k may be every expert: the gap is then infinite
            srt, ps = -np.sort(-np.hstack([lg, pad]), axis=-1), -np.sort(-np.hstack([p, pad]), axis=-1)
            gl, gp = srt[:, k - 1] - srt[:, k], ps[:, k - 1] - ps[:, k]
            gaps_l.append(gl)
            gaps_p.append(gp)
            pmin = min(pmin, float(gl.min()))
            ids = o64.numpy()
            experts.append(ids.tolist())
            np.add.at(use, ids.reshape(-1), 1)
            differ += sum(set(a) != set(b) for a, b in zip(ids.tolist(), o32.numpy().tolist()))
        prompt_fields.append({"experts": experts, "routing_min_logit_gap": pmin})
    gl, gp = np.concatenate(gaps_l), np.concatenate(gaps_p)
    ties = gl == 0
    block = {
        "tie_rule": "exact ties at the k-th place go to the lower expert index (torch.topk's pick replaced)",
        "experts_implementation": "eager",
        "n_expert": n_expert,
        "top_k": k,
        "n_token_layer_pairs": int(gl.size),
        "min_prob_gap": float(gp.min()),
        "min_logit_gap": float(gl.min()),
        "n_logit_gap_below_1e-3": int((gl < 1e-3).sum()),
        "exact_ties": int(ties.sum()),
        "min_logit_gap_excluding_exact_ties": float(gl[~ties].min()) if (~ties).any() else None,
        "f32_f64_differences": int(differ),
        "expert_use": use.tolist(),
    }
    return block, prompt_fields


def dump_manifest(m: dict) -> str:
    """JSON with one prompt field per line (number arrays stay on one line)."""
    def one(v):
        return json.dumps(v, separators=(", ", ": "))
    lines = ["{"]
    top = [k for k in m if k != "prompts"]
    for k in top:
        if isinstance(m[k], dict):
            inner = ",\n".join(f"    {json.dumps(a)}: {one(b)}" for a, b in m[k].items())
            lines.append(f"  {json.dumps(k)}: {{\n{inner}\n  }},")
        else:
            lines.append(f"  {json.dumps(k)}: {one(m[k])},")
    lines.append('  "prompts": [')
    for i, p in enumerate(m["prompts"]):
        fields = ",\n".join(f"      {json.dumps(a)}: {one(b)}" for a, b in p.items())
        lines.append("    {\n" + fields + "\n    }" + ("," if i + 1 < len(m["prompts"]) else ""))
    lines.append("  ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == m
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="checkpoint name: models/NAME")
    ap.add_argument("--models-dir", type=Path, default=REPO_ROOT / "models",
                    help="where checkpoint NAME lives (default models/)")
    ap.add_argument("--out", type=Path, help="output directory (default tests/test-vectors/NAME)")
    args = ap.parse_args(argv)
    name = args.checkpoint

    try:
        import torch
        import transformers
    except ImportError as exc:
        print(f"make_vectors: error: {exc.name} is not installed. It is only needed for test-vector "
              "generation; run `make vectors` (it installs tools/requirements-vectors.txt into .venv), "
              "or: .venv/bin/pip install -r tools/requirements-vectors.txt", file=sys.stderr)
        return 1

    from tools import convert_to_gguf, make_tiny_checkpoint

    ckpt = args.models_dir / name
    if not (ckpt / "config.json").is_file():
        if name in make_tiny_checkpoint.CHECKPOINTS:
            print(f"make_vectors: {ckpt} is missing; generating it with make_tiny_checkpoint.py")
            make_tiny_checkpoint.write_checkpoint(name, ckpt)
        else:
            print(f"make_vectors: error: missing checkpoint directory {ckpt}", file=sys.stderr)
            return 1
    out_dir = args.out or REPO_ROOT / "tests" / "test-vectors" / name
    out_dir.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt)
    model32 = load_model(ckpt, torch, transformers, torch.float32)
    model64 = load_model(ckpt, torch, transformers, torch.float64)
    n_vocab = model32.config.vocab_size
    moe = is_moe(ckpt)
    hooks32, hooks64 = (RouterHooks(model32, torch), RouterHooks(model64, torch)) if moe else (None, None)

    runs = []
    router_calls = []
    max_diff = 0.0
    with torch.no_grad():
        for text in PROMPTS:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            if not 8 <= len(ids) <= 40:
                raise SystemExit(f"make_vectors: prompt {text!r} has {len(ids)} tokens (want 8..40)")
            x = torch.tensor([ids], dtype=torch.long)
            l32 = model32(x).logits[0].to(torch.float32).numpy()
            l64 = model64(x).logits[0].to(torch.float64).numpy()
            max_diff = max(max_diff, float(np.max(np.abs(l32.astype(np.float64) - l64))))
            runs.append((text, ids, l32))
            if moe:
                router_calls.append((hooks64.take(), hooks32.take()))

    routing, routing_prompts = None, [{} for _ in runs]
    if moe:
        cfg = model64.config
        routing, routing_prompts = routing_stats([c[0] for c in router_calls], [c[1] for c in router_calls],
                                                 cfg.num_experts_per_tok, cfg.num_experts)
        routing["torch_topk_at_exact_ties"] = {"f64_run": hooks64.topk_picks, "f32_run": hooks32.topk_picks}
        if routing["f32_f64_differences"]:
            print(f"make_vectors: error: the float32 and float64 runs choose different experts for "
                  f"{routing['f32_f64_differences']} (token, layer) pairs: choose another seed", file=sys.stderr)
            return 1

    bound = max(SAFETY_FACTOR * max_diff, FLOOR)

    prompts = []
    ambiguous = []
    for i, (text, ids, l32) in enumerate(runs):
        order = np.argsort(-l32, axis=1, kind="stable")[:, :TOP_K]
        top = np.take_along_axis(l32, order, axis=1)
        argmax = np.argmax(l32, axis=1)
        assert np.array_equal(argmax, order[:, 0])
        gaps = (top[:, 0] - top[:, 1]).astype(np.float32)
        for pos, g in enumerate(gaps):
            if g <= 2 * bound:
                ambiguous.append(f"prompt {i} position {pos}: top2_gap {float(g):.3g} <= 2*bound {2 * bound:.3g}")
        positions = sorted({0, len(ids) - 1})
        fname = f"logits_{i}.f32"
        rows = np.ascontiguousarray(l32[positions], dtype="<f4")
        assert rows.shape == (len(positions), n_vocab)
        (out_dir / fname).write_bytes(rows.tobytes())
        prompts.append({
            "text": text,
            "tokens": [int(t) for t in ids],
            "argmax": [int(a) for a in argmax],
            "top2_gap": [float(g) for g in gaps],
            "topk_ids": [[int(t) for t in row] for row in order],
            "topk_logits": [[float(v) for v in row] for row in top],
            "full_logits_positions": positions,
            "full_logits_file": fname,
            **routing_prompts[i],
        })
    if ambiguous:
        print("make_vectors: error: ambiguous argmax, choose other seeds or prompts:\n  " + "\n  ".join(ambiguous),
              file=sys.stderr)
        return 1

    gguf_sha = {}
    for outtype in ("f32", "bf16"):
        path = convert_to_gguf.convert(ckpt, outtype, progress=False)
        gguf_sha[outtype] = sha256_file(path)

    manifest = {
        "checkpoint": name,
        "checkpoint_files_sha256": {p.name: sha256_file(p) for p in checkpoint_files(ckpt)},
        "gguf_sha256": gguf_sha,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
        "n_vocab": int(n_vocab),
        "top_k": TOP_K,
        "bound": bound,
        "bound_derivation": {"max_abs_f32_vs_f64": max_diff, "safety_factor": SAFETY_FACTOR, "floor": FLOOR,
                             "formula": "bound = max(S*G, F)"},
        "prompts": prompts,
    }
    if routing is not None:  # before the prompts, after the bound
        manifest = {**{k: v for k, v in manifest.items() if k != "prompts"}, "routing": routing,
                    "prompts": prompts}
    (out_dir / "manifest.json").write_text(dump_manifest(manifest), encoding="utf-8")

    print(f"{name}: G = max|f32 - f64| = {max_diff:.3e}, bound B = max({SAFETY_FACTOR:g}*G, {FLOOR:g}) = {bound:.3e}")
    for i, p in enumerate(prompts):
        print(f"  prompt {i}: {len(p['tokens']):2d} tokens, min top2_gap {min(p['top2_gap']):.4f} "
              f"(= {min(p['top2_gap']) / bound:.0f} B), "
              f"last argmax {p['argmax'][-1]}")
    if routing is not None:
        print(f"  routing: {routing['n_token_layer_pairs']} (token, layer) pairs, min gap k-th to (k+1)-th "
              f"prob {routing['min_prob_gap']:.3g}, logit {routing['min_logit_gap']:.3g} "
              f"({routing['n_logit_gap_below_1e-3']} below 1e-3, {routing['exact_ties']} exact ties; "
              f"without them {routing['min_logit_gap_excluding_exact_ties'] or 0:.3g}); torch.topk at the exact ties: "
              f"{routing['torch_topk_at_exact_ties']}")
    if name.startswith("kipp-"):  # Kipp's trained models: committed as .f32.xz (Makefile unpacks)
        import subprocess
        for p in prompts:
            subprocess.run(["xz", "-9", "-k", "-f", str(out_dir / p["full_logits_file"])], check=True)
    print(f"wrote {out_dir}/manifest.json and {len(prompts)} logits files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
