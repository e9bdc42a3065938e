#!/usr/bin/env python3
"""Trains Kipp's small Qwen3 models (kipp-tiny, kipp-tiny-draft) on 2 CPU cores.

What it does: builds the corpus of tools/corpus.py (openly licensed text from Debian packages,
held-out files excluded), tokenizes it with the real Qwen3 tokenizer, and trains a
transformers Qwen3ForCausalLM of the shape in MODELS from a fixed seed: real Qwen3 blocks
(q/k RMSNorm, GQA, head_dim from the config, RoPE theta 1e6, tied embeddings) and the real
vocabulary of 151,936 tokens.

The softmax is restricted to the KEPT most frequent tokens of the training stream plus one
"other" row shared by every remaining token. In the saved checkpoint every non-kept token's
embedding row is that shared row, and the training loss gives the "other" row the logit
h.e + log(n_other): the full-vocabulary softmax of the saved model is exactly the one that was
trained (each non-kept token gets 1/n_other of the "other" mass), so perplexities over the full
vocabulary are honest, and the repeated rows compress to almost nothing. Chat examples are
rendered with the tokenizer's own Qwen3 chat template (enable_thinking=False), so the models
answer through `kipp --chat`.

kipp-tiny-draft is trained on the same stream with, when --teacher names a kipp-tiny
checkpoint, a distillation term (KL from the teacher's distribution) so that it agrees with
the target often (speculative decoding).

Time: the step counts in MODELS were chosen so that each model trains in about the
budget it states on 2 cores of the AMD EPYC / Intel Xeon machines this project runs on
(kipp-tiny ~45 min, kipp-tiny-draft ~15 min with a teacher); --max-minutes stops early and
still saves. A checkpoint (model, optimizer, step) is written every --save-every steps to
OUT/train-state.pt; --resume continues from it. Not part of `make test`.

Writes OUT/ (default models/NAME/): config.json, generation_config.json, model.safetensors
(weights rounded to bf16), tokenizer files, and train-report.json (parameters, tokens seen,
held-out perplexity against the unigram baseline, greedy sample continuations, the command,
the git commit and library versions).

Usage:
    python -m tools.train_tiny --model kipp-tiny [--out DIR] [--threads 2] [--max-minutes M]
    python -m tools.train_tiny --model kipp-tiny-draft --teacher models/kipp-tiny
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/train_tiny.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_DIR = REPO_ROOT / "tools" / "data" / "qwen3-tokenizer"
VOCAB_SIZE = 151936
ENDOFTEXT = 151643
IM_END = 151645

# Shapes: every matrix row length is a multiple of 256 so the K-quants (Q4_K, Q6_K) apply to
# every matrix, as on the real Qwen3 models; as there, heads x head_dim differs from hidden
# (kipp-tiny: 4 x 64 = 256 against 512, GQA 4:1). kept = softmax rows (most frequent tokens).
# The sizes are bounded by the shipped files: both, xz-compressed, fit in ~16 MB.
MODELS = {
    "kipp-tiny": dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=4,
                      num_key_value_heads=1, head_dim=64, intermediate_size=512,
                      kept=4096, seq=256, batch=16, lr=2e-3, steps=1300, warmup=100,
                      seed=1301, minutes=45),
    "kipp-tiny-draft": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=64, intermediate_size=512,
                            kept=4096, seq=256, batch=16, lr=3e-3, steps=360, warmup=60,
                            seed=1302, minutes=15),
}

# the context the saved config declares (n_ctx_train): the models train on 256-token windows;
# 1,024 keeps the long-context gate (which decodes to n_ctx_train on cpu-ref) affordable
MAX_POSITIONS = 1024

# share of the training sequences drawn from each source (tools/corpus.py)
MIX = {"docs": 0.50, "dref": 0.08, "code": 0.17, "intl": 0.05, "chat": 0.20}

SAMPLE_PROMPTS = [
    ("text", "The Python interpreter"),
    ("text", "A list comprehension"),
    ("text", "def main():\n"),
    ("chat", "What is a generator in Python?"),
    ("chat", "What does the function `os.path.join` do?"),
]


def log(msg: str) -> None:
    print(msg, flush=True)


def tokenize_sources(tok, docs, chat_render):
    """source -> (train token stream, held-out token stream); documents end with
    <|endoftext|> (chat examples with the template's <|im_end|>\\n)."""
    out = {}
    for src in MIX:
        tr, ho = [], []
        sel = [d for d in docs if d.source == src]
        texts = [chat_render(d) if src == "chat" else d.text for d in sel]
        encs = tok.encode_batch(texts, add_special_tokens=False)
        for d, e in zip(sel, encs):
            ids = e.ids + ([] if src == "chat" else [ENDOFTEXT])
            (ho if d.heldout else tr).extend(ids)
        out[src] = (np.array(tr, dtype=np.int64), np.array(ho, dtype=np.int64))
        log(f"  {src}: {len(tr):,} train tokens, {len(ho):,} held-out tokens")
    return out


def build_model(spec, n_rows):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=n_rows, hidden_size=spec["hidden_size"],
                      num_hidden_layers=spec["num_hidden_layers"],
                      num_attention_heads=spec["num_attention_heads"],
                      num_key_value_heads=spec["num_key_value_heads"], head_dim=spec["head_dim"],
                      intermediate_size=spec["intermediate_size"], rope_theta=1e6,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=4096,
                      attention_bias=False, bos_token_id=ENDOFTEXT, eos_token_id=IM_END)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(spec["seed"])
    return Qwen3ForCausalLM(cfg)


def compact_logits(model, ids, log_other):
    """Logits over the kept rows + the 'other' row (last), the latter shifted by
    log(n_other) so the softmax is the full-vocabulary one."""
    h = model.model(input_ids=ids).last_hidden_state
    logits = model.lm_head(h)
    logits[..., -1] += log_other
    return logits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--out", help="output folder (default models/NAME)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, help="override the model's step count")
    ap.add_argument("--max-minutes", type=float, help="stop (and save) after this long")
    ap.add_argument("--teacher", help="kipp-tiny checkpoint to distil from (draft model)")
    ap.add_argument("--kd-weight", type=float, default=0.7)
    ap.add_argument("--save-every", type=int, default=200)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args(argv)

    import torch
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    from tools import corpus

    spec = dict(MODELS[args.model])
    if args.steps:
        spec["steps"] = args.steps
    out = Path(args.out or REPO_ROOT / "models" / args.model)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    random.seed(spec["seed"])
    np.random.seed(spec["seed"])
    t_start = time.time()
    commit = git_commit()  # the code that trains is the code at the start

    log(f"corpus (held-out split: sha256(name)[0] < {corpus.HELDOUT_BYTE}):")
    docs = corpus.load()
    tok = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    hf_tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))

    def chat_render(d):
        msgs = [{"role": "user", "content": d.text}, {"role": "assistant", "content": d.answer}]
        return hf_tok.apply_chat_template(msgs, tokenize=False, enable_thinking=False)

    streams = tokenize_sources(tok, docs, chat_render)

    # kept vocabulary: the most frequent tokens of the training mixture (by MIX weight)
    counts = np.zeros(VOCAB_SIZE, dtype=np.float64)
    for src, (tr, _) in streams.items():
        c = np.bincount(tr, minlength=VOCAB_SIZE).astype(np.float64)
        counts += MIX[src] * c / max(c.sum(), 1)
    if args.teacher:
        kept = np.array(json.loads((Path(args.teacher) / "train-report.json").read_text())
                        ["kept_token_ids"], dtype=np.int64)
    else:
        kept = np.sort(np.argsort(-counts, kind="stable")[:spec["kept"]])
    n_kept = len(kept)
    n_other = VOCAB_SIZE - n_kept
    log_other = math.log(n_other)
    to_compact = np.full(VOCAB_SIZE, n_kept, dtype=np.int64)
    to_compact[kept] = np.arange(n_kept)
    coverage = counts[kept].sum() / counts.sum()
    log(f"kept vocabulary: {n_kept} tokens cover {coverage:.2%} of the weighted training stream")

    cstreams = {s: (to_compact[tr], to_compact[ho]) for s, (tr, ho) in streams.items()}
    srcs = list(MIX)
    probs = np.array([MIX[s] for s in srcs])
    T, B = spec["seq"], spec["batch"]
    rng = np.random.Generator(np.random.PCG64(spec["seed"]))

    def batch():
        x = np.empty((B, T + 1), dtype=np.int64)
        for i in range(B):
            s = cstreams[srcs[rng.choice(len(srcs), p=probs)]][0]
            o = rng.integers(0, len(s) - T - 1)
            x[i] = s[o:o + T + 1]
        return torch.from_numpy(x)

    model = build_model(spec, n_kept + 1)
    n_params = sum(p.numel() for p in model.parameters())
    n_full = n_params + (VOCAB_SIZE - n_kept - 1) * spec["hidden_size"]
    log(f"{args.model}: {n_params:,} trained parameters ({n_full:,} in the full-vocabulary file)")
    teacher = None
    if args.teacher:
        teacher = load_compact(Path(args.teacher), kept)
        teacher.eval()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=spec["lr"], betas=(0.9, 0.95), eps=1e-8)
    step = 0
    state_path = out / "train-state.pt"
    if args.resume and state_path.exists():
        st = torch.load(state_path, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
        rng.bit_generator.state = st["rng"]
        log(f"resumed at step {step}")

    def lr_at(s):
        if s < spec["warmup"]:
            return spec["lr"] * (s + 1) / spec["warmup"]
        p = (s - spec["warmup"]) / max(1, spec["steps"] - spec["warmup"])
        return spec["lr"] * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))

    model.train()
    t0 = time.time()
    ema = None
    while step < spec["steps"]:
        if args.max_minutes and (time.time() - t_start) / 60 > args.max_minutes:
            log(f"stopping at step {step}: --max-minutes {args.max_minutes} reached")
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x = batch()
        logits = compact_logits(model, x[:, :-1], log_other)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, n_kept + 1).float(),
                                               x[:, 1:].reshape(-1))
        loss = ce
        if teacher is not None:
            with torch.no_grad():
                tl = compact_logits(teacher, x[:, :-1], log_other)
            kd = torch.nn.functional.kl_div(torch.log_softmax(logits, -1),
                                            torch.log_softmax(tl, -1), log_target=True,
                                            reduction="batchmean") / T
            loss = (1 - args.kd_weight) * ce + args.kd_weight * kd
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = ce.item() if ema is None else 0.98 * ema + 0.02 * ce.item()
        if step % 20 == 0 or step == 1:
            el = time.time() - t0
            log(f"step {step}/{spec['steps']} loss {ema:.3f} (ppl {math.exp(ema):.1f}) "
                f"lr {lr_at(step):.2e} {el / 60:.1f} min, {step * B * T / el:.0f} tok/s")
        if step % args.save_every == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "rng": rng.bit_generator.state}, state_path)
    train_minutes = (time.time() - t_start) / 60

    # round to bf16 (the shipped precision) before evaluating, so the report is the file's
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.eval()
    report = evaluate(model, cstreams, streams, counts, kept, log_other, T)
    save_full(model, spec, kept, out)
    samples = greedy_samples(out, hf_tok)
    report.update({
        "model": args.model, "shape": {k: spec[k] for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "intermediate_size")},
        "trained_parameters": n_params, "file_parameters": n_full,
        "kept_tokens": n_kept, "kept_coverage": round(float(coverage), 5),
        "steps": step, "tokens_seen": step * B * T, "seq_len": T, "batch": B,
        "lr": spec["lr"], "seed": spec["seed"], "mix": MIX,
        "teacher": str(args.teacher) if args.teacher else None,
        "train_minutes": round(train_minutes, 1), "threads": args.threads,
        "command": "python -m tools.train_tiny " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit, "cpu": cpu_name(),
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "python": platform.python_version()},
        "debian_packages": corpus.package_versions(),
        "samples": samples,
        "kept_token_ids": [int(t) for t in kept],
    })
    (out / "train-report.json").write_text(json.dumps(report, indent=1) + "\n")
    log(json.dumps({k: v for k, v in report.items() if k not in ("kept_token_ids",)}, indent=1))
    return 0


def evaluate(model, cstreams, streams, counts, kept, log_other, T):
    """Held-out perplexity per source (full vocabulary, non-overlapping windows of T) and the
    unigram baseline (training-mixture frequencies over the full vocabulary, add-one)."""
    import torch
    uni = (counts * 1e7 + 1.0)
    uni = np.log(uni / uni.sum())
    res = {}
    for src, (_, ho) in cstreams.items():
        full = streams[src][1]
        if len(ho) < T + 1:
            continue
        n = min(len(ho) - 1, 64 * T)
        nll, cnt = 0.0, 0
        with torch.no_grad():
            for o in range(0, n - T + 1, T):
                x = torch.from_numpy(ho[o:o + T + 1]).unsqueeze(0)
                lp = torch.log_softmax(compact_logits(model, x[:, :-1], log_other).float(), -1)
                tgt = x[0, 1:]
                l = lp[0, torch.arange(T), tgt]
                l = torch.where(tgt == lp.shape[-1] - 1, l - log_other, l)  # per-token share
                nll -= l.sum().item()
                cnt += T
        uni_nll = -uni[full[1:cnt + 1]].sum()
        res[src] = {"tokens": cnt, "ppl": round(math.exp(nll / cnt), 3),
                    "unigram_ppl": round(math.exp(uni_nll / cnt), 3)}
        log(f"held-out {src}: ppl {res[src]['ppl']} (unigram {res[src]['unigram_ppl']}) "
            f"over {cnt} tokens")
    return {"heldout": res}


def save_full(model, spec, kept, out: Path) -> None:
    """Writes the full-vocabulary HF checkpoint (bf16 safetensors) with the tokenizer."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    emb = model.model.embed_tokens.weight.detach()
    full = emb[-1].repeat(VOCAB_SIZE, 1)
    full[torch.from_numpy(kept)] = emb[:-1]
    cfg = Qwen3Config(**{**model.config.to_dict(), "vocab_size": VOCAB_SIZE,
                         "max_position_embeddings": MAX_POSITIONS, "architectures": ["Qwen3ForCausalLM"]})
    big = Qwen3ForCausalLM(cfg)
    sd = {k: v for k, v in model.state_dict().items() if "embed_tokens" not in k and "lm_head" not in k}
    sd["model.embed_tokens.weight"] = full
    missing, unexpected = big.load_state_dict(sd, strict=False)
    assert not unexpected and all("lm_head" in m for m in missing), (missing, unexpected)
    big.tie_weights()
    big = big.to(torch.bfloat16)
    big.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER_DIR / f, out / f)
    gen = {"bos_token_id": ENDOFTEXT, "do_sample": True, "eos_token_id": [IM_END, ENDOFTEXT],
           "pad_token_id": ENDOFTEXT, "temperature": 0.7, "top_k": 20, "top_p": 0.9}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


def load_compact(path: Path, kept):
    """A saved full-vocabulary checkpoint as a compact model (kept rows + 'other' row)."""
    import torch
    from transformers import Qwen3ForCausalLM
    full = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32)
    cfgd = full.config.to_dict()
    spec = {k: cfgd[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                 "num_key_value_heads", "head_dim", "intermediate_size")}
    spec["seed"] = 0
    m = build_model(spec, len(kept) + 1)
    other = int(np.setdiff1d(np.arange(VOCAB_SIZE), kept)[0])
    sd = {k: v for k, v in full.state_dict().items() if "embed_tokens" not in k and "lm_head" not in k}
    e = full.model.embed_tokens.weight.detach()
    sd["model.embed_tokens.weight"] = torch.cat([e[torch.from_numpy(kept)], e[other:other + 1]])
    m.load_state_dict(sd, strict=False)
    m.tie_weights()
    return m


def greedy_samples(out: Path, hf_tok) -> list[dict]:
    """Greedy continuations of SAMPLE_PROMPTS from the saved (full-vocabulary) checkpoint."""
    import torch
    from transformers import Qwen3ForCausalLM
    m = Qwen3ForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    res = []
    for kind, p in SAMPLE_PROMPTS:
        text = p if kind == "text" else hf_tok.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True,
            enable_thinking=False)
        ids = hf_tok(text, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            g = m.generate(ids, max_new_tokens=48, do_sample=False, eos_token_id=[IM_END, ENDOFTEXT],
                           pad_token_id=ENDOFTEXT)
        res.append({"kind": kind, "prompt": p,
                    "continuation": hf_tok.decode(g[0, ids.shape[1]:], skip_special_tokens=False)})
        log(f"[{kind}] {p!r} -> {res[-1]['continuation']!r}")
    return res


def git_commit() -> str:
    r = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip()


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    sys.exit(main())
