#!/usr/bin/env bash
# mutation.sh — proves the model gates can fail: each case copies the source tree, plants
# one deliberate bug in the cpu-ref forward pass, the KV addressing function (kipp_host_kv_row
# in src/backend/host_kv.h), the pool's copy-on-write, the optimized cpu backend (whose gate is
# --cpu-vs-ref against cpu-ref) or the scheduler and prefix cache (--sched), rebuilds
# kipp_test in the copy, and
# requires the named gate to FAIL on the tiny checkpoint. A mutation the gates do not
# catch, or one that does not apply or does not build, is a test failure. Production
# sources are never modified.
#
# kipp_test is built once, unmutated, in a pristine copy ($tmp/base: the sources with their
# timestamps kept, seeded with this tree's build/obj when there is one, so only what is
# out of date there is compiled). Each case copies that tree with its timestamps
# (sources, objects and .d files), so make recompiles only the mutated file and what
# includes it, then relinks kipp_test.
set -u
cd "$(dirname "$0")/../.."
M=models/tiny-untied/kipp-tiny-untied-bf16.gguf
V=tests/test-vectors/tiny-untied
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
CPU=src/backend/cpu_ref/layers.c  # the layer code cpu-ref runs
FWD=src/backend/cpu/forward.c            # the cpu backend's batched pass
PROG=src/backend/program.c               # the layer program's driver (every backend)
KV=src/backend/host_kv.h                 # the host backends' KV addressing
KVC=src/kv/kv.c
SCH=src/engine/sched.c                   # the server's scheduler
PFX=src/engine/prefix_cache.c

# name | gate flag | file | sed expression (with '#' delimiters) applied to that file
#   [| GGUF type of the tiny-untied file to gate, default bf16 [| the gate's trailing flags]]
cases=(
  "rope sign|--model|$CPU|s#h\[i\] = a \* s->rope_cos\[i\] - b#h[i] = a * s->rope_cos[i] + b#"
  "attention scale 1/D|--model|$CPU|s#1.0f / sqrtf((float)D)#1.0f / (float)D#"
  "GQA head mapping|--model|$CPU|s#(size_t)(h / group) \* D#(size_t)(h % hp->n_head_kv) * D#"
  "k-norm skipped (the driver)|--model|$PROG|s#return k->rmsnorm(st, l, KIPP_W(k_norm), KIPP_BUF_K, KIPP_BUF_K, D);#return 0;#"
  "KV slot off by one|--phase2-model|$KV|s#uint32_t slot = pos % kv->block_size;#uint32_t slot = (pos ? pos - 1 : 0) % kv->block_size;#"
  "KV layer aliasing|--phase2-model|$KV|s#((size_t)layer \* kv->block_size + slot)#((size_t)0 * layer * kv->block_size + slot)#"
  "KV block table ignored|--paged-cpu|$KV|s#uint32_t block = s->blocks\[lblock\];#uint32_t block = lblock;#"
  "KV copy-on-write skipped|--pooled-cpu|$KVC|s#    return pool->refs\[b\] > 1 ? b : UINT32_MAX;#    return UINT32_MAX;#"
  "cpu: prefill query heads of another group|--cpu-vs-ref|$FWD|s#f->q + (size_t)(r->first + t0 + i) \* f->QD + (size_t)h \* G \* D#f->q + (size_t)(r->first + t0 + i) * f->QD + (size_t)h * D#"
  "cpu: attention reads V one row late|--cpu-vs-ref|$FWD|s#kv_at(src, r->seq, l, t, KIPP_KV_V, KIPP_KV_READ, f->kv_dim) + off;#kv_at(src, r->seq, l, t ? t - 1 : 0, KIPP_KV_V, KIPP_KV_READ, f->kv_dim) + off;#"
  "cpu: low activation plane dropped|--cpu-vs-ref|$FWD|s#y\[r\] = yh\[r\] + yl\[r\];#y[r] = yh[r];#|q8_0"
  "sched: prefix-cache hit keeps the whole entry|--sched|$PFX|s#if (n_hit < en->n_tokens && seq_truncate#if (0 \&\& seq_truncate#"
  "sched: a prefix-cache hit is prefilled again from position 0|--sched|$SCH|s#            r->n_fed = n_hit;#            r->n_fed = 0;#"
  # speculative decoding's rejection rule (src/engine/sampler.c): the chi-square gate must
  # see a rule that keeps every draft (with p > 0), and one that resamples from p instead
  # of p - q (the case strings are split at '|': no '|' in an expression)
  "spec: every draft the target could emit is accepted|--spec-stat|src/engine/sampler.c|s#(qx <= px #(qx <= 1e9 #"
  "spec: rejection resamples from p, not p - q|--spec-stat|src/engine/sampler.c|s#double r = pi > qi ? pi - qi : 0.0;#double r = pi;#"
  "spec: greedy verification keeps every draft|--draft-spec|src/engine/sampler.c|s#\*accepted = c\[0\].id == draft;#*accepted = 1;#"
  # the cpu backend's own table lookup (kv_at) addresses every sequence as if in the
  # identity layout: the paged and the pooled gate on cpu must see it
  # embeddings (--embed-golden on tiny-embed): the final norm, and the pooled token's row
  "embeddings: final norm skipped (cpu-ref)|--embed-golden|$CPU|s#rmsnorm(logits, x, norm_weights(s->m->output_norm, s->wbuf), hp->n_embd, hp->rms_eps);#memcpy(logits, x, hp->n_embd * sizeof(float));#"
  "cpu: embedding row of the token before the wanted one|--embed-golden|$FWD|s#rmsnorm(logits + (size_t)i \* f->H, f->x + (size_t)f->wanted\[i\] \* f->H,#rmsnorm(logits + (size_t)i * f->H, f->x + (size_t)(f->wanted[i] ? f->wanted[i] - 1 : 0) * f->H,#||--backend cpu"
  "cpu: KV lookup ignores the block table|--paged-cpu|$FWD|s#return kipp_host_kv_row(src->kv, seq, layer, pos, part, access);#return (char *)src->kv->data + (size_t)(pos / src->kv->block_size) * src->kv->block_bytes + (part == KIPP_KV_K ? 0 : src->kv->part_bytes[0]) + ((size_t)layer * src->kv->block_size + pos % src->kv->block_size) * src->kv->row_bytes[part];#||--backend cpu"
  "cpu: KV lookup ignores the block table (pooled)|--pooled-cpu|$FWD|s#return kipp_host_kv_row(src->kv, seq, layer, pos, part, access);#return (char *)src->kv->data + (size_t)(pos / src->kv->block_size) * src->kv->block_bytes + (part == KIPP_KV_K ? 0 : src->kv->part_bytes[0]) + ((size_t)layer * src->kv->block_size + pos % src->kv->block_size) * src->kv->row_bytes[part];#||--backend cpu"
)
base=$tmp/base
mkdir -p "$base/build"
cp -a Makefile include src tests "$base/"
[ -d build/obj ] && cp -a build/obj "$base/build/"
if ! make -s -C "$base" BUILD=build build/kipp_test >"$tmp/base-build.log" 2>&1; then
    echo "FAIL: the unmutated tree does not build"; tail -5 "$tmp/base-build.log"
    echo "0 passed, 1 failed"; exit 1
fi
for c in "${cases[@]}"; do
    IFS='|' read -r name gate F expr mtype flags <<<"$c"
    gm=$M
    [ -n "${mtype:-}" ] && gm=models/tiny-untied/kipp-tiny-untied-$mtype.gguf
    d=$tmp/$(echo "$name" | tr ' /' '__')
    cp -a "$base" "$d"
    sed -i "$expr" "$d/$F"
    if cmp -s "$F" "$d/$F"; then fail=$((fail + 1)); echo "FAIL: mutation '$name' did not apply"; continue; fi
    if ! make -s -C "$d" BUILD=build build/kipp_test >"$d/build.log" 2>&1; then
        fail=$((fail + 1)); echo "FAIL: mutation '$name' does not build"; tail -5 "$d/build.log"; continue
    fi
    args=("$gm" "$V")
    [ "$gate" = --sched ] && args=("$gm") # one-argument mode
    [ "$gate" = --spec-stat ] && args=()   # no model
    [ "$gate" = --draft-spec ] && args=("$gm" "$gm") # the model drafts for itself (and lookup)
    [ "$gate" = --embed-golden ] && args=(models/tiny-embed/kipp-tiny-embed-bf16.gguf tests/test-vectors/tiny-embed)
    # shellcheck disable=SC2086 # flags: words
    if "$d/build/kipp_test" "$gate" "${args[@]}" ${flags:-} >"$d/gate.log" 2>&1; then
        fail=$((fail + 1)); echo "FAIL: gate $gate did not catch '$name'"
    else
        pass=$((pass + 1)); echo "caught: '$name' by $gate ($(grep -c '^FAIL' "$d/gate.log") failed checks)"
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
