/* think.h — the reasoning section of a thinking Qwen3 reply as an optional free prefix of a
 * constrained one: the reply's language is (<think> TEXT </think> GAP)? SENTENCE, decided
 * token by token in front of the grammar's matcher, with a bound on the reasoning tokens.
 * Not here: the grammar itself (grammar.h), splitting the text into reasoning and content
 * (tok/reasoning.h). Design: docs/structured-output.md ("Thinking"). */
#ifndef KIPP_ENGINE_THINK_H
#define KIPP_ENGINE_THINK_H

#include "engine/grammar.h"
#include "kipp.h"

#include <stdint.h>

#define KIPP_THINK_NO_BOUND UINT32_MAX

/* What the caller decides per request; all zero: no reasoning (the grammar applies from the
 * first token). */
typedef struct {
    int on;        /* the reply may reason first (a thinking chat template, thinking on) */
    int in_prompt; /* the prompt ends inside <think> (Thinking-2507): the reply starts in it */
    uint32_t max_reasoning_tokens; /* tokens between <think> and </think> after which only
                                      </think> may come (0: none at all; KIPP_THINK_NO_BOUND) */
} kipp_think_params;

typedef enum {
    KIPP_THINK_START = 0, /* nothing generated: <think> opens the reasoning, anything else is
                             the grammar's first token */
    KIPP_THINK_REASONING, /* free text up to </think> (no end of generation under a grammar) */
    KIPP_THINK_GAP,       /* just after </think>: up to two newline tokens the grammar does not
                             itself allow ("</think>\n\n" is how Qwen3 writes it) */
    KIPP_THINK_GRAMMAR,   /* the matcher decides every token */
} kipp_think_state;

/* One sequence's place in that language. A plain struct the caller owns; fields private. */
typedef struct {
    kipp_think_state state;
    int32_t open, close, gap[2]; /* <think>, </think>, "\n", "\n\n" ids (-1: the vocab lacks it) */
    int32_t eog[8];              /* end-of-generation ids (banned in the reasoning of a
                                    constrained reply: it would end with no sentence) */
    uint32_t n_eog;
    uint32_t max_reasoning, n_reasoning, n_gap;
} kipp_think;

/* The token ids the gate needs (-1: absent); eog[0..n_eog) the end-of-generation ids. */
typedef struct {
    int32_t open, close, gap[2];
    const int32_t *eog;
    uint32_t n_eog;
} kipp_think_vocab;

/* p NULL, p->on 0 or a vocab without </think>: the grammar from the first token. The ids
 * come from m's vocabulary (<think>, </think>, "\n", "\n\n", its end-of-generation ids). */
void kipp_think_init(kipp_think *t, const kipp_think_params *p, const kipp_model *m);
/* The same with the ids given (tests). */
void kipp_think_init_vocab(kipp_think *t, const kipp_think_params *p, const kipp_think_vocab *v);
/* Masks logits[0..n-1] for the next token. mt may be NULL (no grammar: only the bound and
 * <think> at the start with bound 0 are enforced). When the matcher yields
 * (kipp_matcher_set_yield) the logits are left as they were and the call can be repeated;
 * so can kipp_think_accept's, which then returns 0 with nothing changed. */
void kipp_think_apply(kipp_think *t, kipp_matcher *mt, float *logits, uint32_t n);
/* Advances over the token drawn from the masked logits (feeding the matcher once the
 * grammar has started): 1, or 0 if the token is not allowed (state unchanged). */
int kipp_think_accept(kipp_think *t, kipp_matcher *mt, int32_t tok);
/* 1 while the reply is in the reasoning (tokens of it so far in *n_tokens, may be NULL). */
int kipp_think_in_reasoning(const kipp_think *t, uint32_t *n_tokens);
/* 1 when the gate can change a token (the request must not be drafted for). */
int kipp_think_masks(const kipp_think *t);

#endif
