#!/usr/bin/env python3
"""make_ascii_golden.py — writes tests/tok/ascii_golden.jsonl: ASCII strings with the ids
that HF `tokenizers` gives for the Qwen3 tokenizer (encode(text, add_special_tokens=False),
which also splits out added tokens such as <|im_start|> and <think>).

The C side (kt_tok_golden in tests/unit/test_tok_golden.c) encodes each text with
parse_special = 1 and must match every line. ASCII only; the full corpus (all of these
texts plus Unicode, invalid UTF-8, both added-token modes and decoding) is
tests/tok/golden.jsonl from make_golden.py, which imports the lists below.

Usage: .venv/bin/python tests/tok/make_ascii_golden.py [tokenizer.json] [out.jsonl]
Deterministic: the random part uses a fixed seed, so reruns give the same file.
"""
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "tools/data/qwen3-tokenizer/tokenizer.json"
OUT = ROOT / "tests/tok/ascii_golden.jsonl"

PROSE = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Call me Ishmael. Some years ago - never mind how long precisely - having little money...",
    "To be, or not to be, that is the question:",
    "Whether 'tis nobler in the mind to suffer",
    "The slings and arrows of outrageous fortune,\nOr to take arms against a sea of troubles",
    "In the beginning God created the heaven and the earth.",
    "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were "
    "perfectly normal, thank you very much.",
    "A large language model (LLM) is a language model trained with self-supervised learning.",
    "Tokenization is the process of splitting text into tokens; BPE merges frequent pairs.",
    "e.g. i.e. etc. vs. Dr. St. Jr. U.S.A. a.m. p.m.",
    "Please respond in JSON format: {\"name\": \"Alice\", \"age\": 30}.",
    "Q: What is 2+2?\nA: 4.",
    "Dear Sir or Madam,\n\nI am writing to inform you...\n\nSincerely,\nBob",
    "Once upon a time, there was a little girl named Goldilocks.",
    "She sells seashells by the seashore.",
    "lowercase sentence without punctuation",
    "MiXeD CaSe WoRdS aNd AcRoNyMs LiKe NASA, GPU, CPU, HTTP/2",
    "camelCaseIdentifier PascalCase snake_case kebab-case SCREAMING_SNAKE",
    "Email me at john.doe@example.com or visit https://example.org/path?q=1&r=2#frag",
    "The year 1984 and the year 2001: A Space Odyssey.",
    "Numbers like 3.14159, 2.71828 and 1.41421 are irrational.",
    "(parenthetical) [bracketed] {braced} <angled>",
    "\"double quoted\" and 'single quoted' and `backticked`",
    "Hyphen-ated, en--dash, em---dash, and ellipsis...",
    "Semicolons; colons: commas, periods. Question? Exclamation!",
    "#hashtag @mention $dollar %percent ^caret &ampersand *asterisk",
    "   leading spaces",
    "trailing spaces   ",
    "  both sides  ",
    "Markdown: # Title\n\n## Subtitle\n\n- item one\n- item two\n\n**bold** and _italic_",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
    "> quoted line\n> another quoted line",
    "1. First\n2. Second\n3. Third",
    "TODO: fix this ASAP!!!",
    "Wait... what?!?! No way!!!",
    "Ok.",
    "a",
    "I",
    " ",
    "",
]

CONTRACTIONS = [
    "I'm", "I'M", "i'm", "You're", "YOU'RE", "you'Re", "it's", "IT'S", "It'S",
    "we've", "WE'VE", "We'Ve", "they'll", "THEY'LL", "they'lL", "he'd", "HE'D",
    "don't", "DON'T", "Don'T", "can't", "won't", "shouldn't've", "y'all'd've",
    "'tis", "'Twas", "rock'n'roll", "O'Brien", "the dog's bone", "the dogs' bones",
    "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "'sup", "''s", "'''",
    "He said 'hello' and she said 'goodbye'.", "it 's", "x'sy", "'1", "' s",
    # a contraction followed by more letters is still cut after the contraction
    "'dog", "'mama", "'llama", "'velvet", "'really", "'tree", "'Sunday", "'DELTA", "'Made",
    "we'rent", "I'mpossible", "they'llama", "'Tis'Nt", "'S'S's",
]

C_CODE = [
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"Hello, world!\\n\");\n    return 0;\n}\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}",
    "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
    "typedef struct {\n    float *wq; // [n_layer, dim, n_head*head_dim]\n} weights;",
    "if (p == NULL) { return -1; } else if (*p != '\\0') { p++; }",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))",
    "x->next->prev = x->prev; /* unlink */",
    "char buf[256]; snprintf(buf, sizeof buf, \"%s:%d\", __FILE__, __LINE__);",
    "while (*s && isspace((unsigned char)*s)) s++;",
    "int64_t ne[4] = {4096, 32, 1, 1};",
    "switch (t) {\ncase 0: return \"f32\";\ncase 1: return \"f16\";\ndefault: break;\n}",
    "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;m&=n;o|=p;q^=r;",
    "ptr = (float *)malloc(n * sizeof(float));\nif (!ptr) goto fail;",
    "// TODO(kipp): handle the case where n_tokens == 0\n",
    "return a == b && c != d || !e;",
]

PY_CODE = [
    "def f(x):\n    return x ** 2\n",
    "import numpy as np\nimport torch.nn.functional as F\n",
    "class Foo(Bar):\n    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n",
    "print(f\"{name!r:>10} = {value:.3f}\")",
    "xs = [x for x in range(100) if x % 3 == 0]",
    "with open('data.txt', 'r', encoding='utf-8') as fh:\n    lines = fh.readlines()",
    "try:\n    pass\nexcept (ValueError, KeyError) as e:\n    raise RuntimeError('bad') from e",
    "d = {'a': 1, 'b': [1, 2, 3], 'c': {'nested': True}}",
    "lambda x, y=2: x @ y",
    "@dataclass(frozen=True)\nclass Point:\n    x: float = 0.0\n    y: float = 0.0",
    "if __name__ == \"__main__\":\n    main()\n",
    "    # indented comment\n        deeper = 1\n",
    "async def fetch(url):\n    async with session.get(url) as r:\n        return await r.json()",
    "assert len(ids) == 3, f'got {len(ids)}'",
    "x = y if cond else z  # ternary",
]

JS_CODE = [
    "const add = (a, b) => a + b;",
    "function hello() {\n  console.log('Hello, world!');\n}\n",
    "let x = obj?.prop ?? 'default';",
    "export default { name: 'app', data() { return { count: 0 }; } };",
    "document.querySelectorAll('.item').forEach(el => el.classList.toggle('active'));",
    "if (a === b && c !== d) { return; }",
    "const {a, b: [c, ...rest]} = await import('./mod.js');",
    "fetch(`/api/v1/users/${id}`).then(r => r.json()).catch(console.error);",
    "for (const [k, v] of Object.entries(map)) total += v;",
    "/* block comment */ // line comment\nvar i = 0x1F & 0b1010 | 0o17;",
    "<div class=\"container\"><p>Hello</p></div>",
    "<script>alert(\"xss\")</script>",
    "{\"key\": [1, 2.5, -3e10, true, false, null], \"nested\": {\"a\": \"b\"}}",
]

SHELL = [
    "ls -la /usr/local/bin | grep -v '^d' | wc -l",
    "for f in *.txt; do echo \"$f\"; done",
    "export PATH=\"$HOME/.local/bin:$PATH\"",
    "cd /work/main && make -j$(nproc) && ./build/kipp_test",
    "if [ -z \"$VAR\" ]; then echo 'empty' >&2; exit 1; fi",
    "curl -sSL https://example.com/install.sh | bash -s -- --prefix=/opt",
    "find . -name '*.c' -exec grep -l 'TODO' {} +",
    "awk '{print $1}' file.txt | sort | uniq -c | sort -rn | head -20",
    "#!/bin/sh\nset -eu\n\nmain() {\n  echo \"args: $@\"\n}\nmain \"$@\"\n",
    "gcc -std=c11 -Wall -Wextra -O2 -o kipp src/*.c -lm",
    "git commit -m 'fix: handle empty input' && git push origin HEAD",
    "x=$((1 + 2)); echo ${x:-0}; echo ${#x}",
]

NUMBERS = [
    "0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159", "-2.5e-10",
    "1,000,000", "1_000_000", "0x1F", "0b1010", "2025-01-31", "12:34:56", "v1.2.3",
    "+1 (555) 123-4567", "$19.99", "100%", "1/2 + 3/4 = 5/4", "4 8 15 16 23 42",
    "999999999999999999999", "00007", "1st 2nd 3rd 4th", "a1b2c3", "x86_64", "ipv4 192.168.0.1",
    "3 3 3", "33 333 3333", " 1", "  12", "1\n2\n3",
]

WHITESPACE = [
    "a b", "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a \tb", "a\t b", "a\nb", "a\n\nb",
    "a\n\n\nb", "a\r\nb", "a\r\n\r\nb", "a\rb", "a \n b", "a  \n  b", "a\n \n b", " \n ",
    "\n", "\n\n", "\n\n\n", "\t", "\t\t", "  ", "   ", "\r\n", " \r\n", "\r\n ", "\t\n\t",
    "line1\r\nline2\r\n", "x  \t  y", "\n  indented\n    more\n", "end with newline\n",
    "end with spaces  ", "end with tab\t", " \t \n \t ", "a\x0bb", "a\x0cb", "a\x0b\x0cb",
    "a \x0b b", "    def f():\n        pass\n", "\t\tif (x) {\n\t\t\ty();\n\t\t}",
    "word\n\n\n\nword", "a.\n\nb.", "a  .", "a  (b)", "  ,", "  1  2  ",
]

PUNCT = [
    "!!!", "???", "...", "?!?!", "---", "===>", "<=>", "!=", "->", "=>", "::", ";;", "&&", "||",
    "``` ```", "!@#$%^&*()", "[]{}()<>", "....!!!!????", "a...b", "a ...b", "a... b",
    "(((nested)))", "\"\"\"docstring\"\"\"", "'''", "//", "/* */", "<!-- comment -->",
    "~~strike~~", "__dunder__", "a--b", "a - b", "a -- b", "a!b", "a ! b", ".a", " .a", "..\n\n",
    ".\r\n", "! \n", "?\n\n\n", ",,,", "\\\\", "\\n\\t", "^_^", ":-)", "<3", "#!",
    "\x00", "\x01\x02\x03", "\x07bell", "\x1b[31mred\x1b[0m", "\x7f", "a\x1cb", "a \x1c\x1db",
]

SPECIAL = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
    "<think>\n\n</think>\n\n",
    "<think>\nLet me think step by step.\n</think>\n\nThe answer is 4.",
    "a<think>b</think>c",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_end|><|im_end|>",
    "<<|im_end|>>",
    "<|im_start|", "im_start|>", "<|im_start |>", "< think>", "<think >", "<THINK>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "<tool_response>\n{\"temp\": 21}\n</tool_response>",
    "<|fim_prefix|>def add(a, b):\n<|fim_suffix|>\n    return c<|fim_middle|>",
    "<|repo_name|>kipp\n<|file_sep|>src/main.c\nint main;",
    "<|fim_pad|><|fim_pad|>",
    "<|vision_start|><|image_pad|><|vision_end|>",
    "<|object_ref_start|>the cat<|object_ref_end|><|box_start|>(1,2),(3,4)<|box_end|>",
    "<|quad_start|><|quad_end|><|video_pad|><|vision_pad|>",
    "  <think>  ", "\n<|im_start|>\n", "x <|im_end|> y", "x<|im_end|>y",
    "<think><think></think></think>", "</think>", "<|endoftext|><|im_start|>",
    "<|im_start|>user\nWhat's 2+2? /no_think<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>",
    "[PAD151669]", "<|", "|>", "<|>",
]

WORDS = ("the of and to in is that for it as was with be by on not he I this are or his "
         "from at which but have an they you were her she there been one all we their has "
         "would when if so what out up more its about into than them can only other time "
         "new some could these two may first then do any like my now over such our man me "
         "even most made after also did many before must through back years where much your "
         "way well down should because each just those people Mr how too little state good "
         "very make world still own see men work long get here between both life being under "
         "never day same another know while last might us great old year off come since "
         "against go came right used take three").split()
PIECES = ["'s", "'RE", "'ll", "123", "4", "...", "!!", "?", "(", ")", "{", "}", ";", ":",
          "=", "==", "+", "-", "_", "/", "\\", "\"", "'", "`", "#", "$", "%", "<|im_end|>",
          "<think>", "</think>", "<|im_start|>"]
GAPS = [" ", " ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", ""]


def random_texts(n):
    rng = random.Random(20250101)
    out = []
    for i in range(n):
        k = rng.randint(1, 30)
        parts = []
        for _ in range(k):
            r = rng.random()
            w = rng.choice(WORDS) if r < 0.7 else rng.choice(PIECES)
            if rng.random() < 0.15:
                w = w.upper()
            elif rng.random() < 0.15:
                w = w.capitalize()
            parts.append(w)
            parts.append(rng.choice(GAPS))
        out.append("".join(parts))
    # printable ASCII soup, including every punctuation character
    for i in range(n // 2):
        out.append("".join(chr(rng.randint(0x20, 0x7E)) for _ in range(rng.randint(1, 60))))
    # all 128 ASCII bytes in a few arrangements
    out.append("".join(chr(c) for c in range(128)))
    out.append("".join(chr(c) for c in reversed(range(128))))
    out.append(" ".join(chr(c) for c in range(128)))
    return out


def main():
    tok_path = Path(sys.argv[1]) if len(sys.argv) > 1 else TOKENIZER
    out_path = Path(sys.argv[2]) if len(sys.argv) > 2 else OUT
    from tokenizers import Tokenizer  # PyPI `tokenizers`

    tok = Tokenizer.from_file(str(tok_path))
    texts = (PROSE + CONTRACTIONS + C_CODE + PY_CODE + JS_CODE + SHELL + NUMBERS +
             WHITESPACE + PUNCT + SPECIAL + random_texts(60))
    seen, lines = set(), []
    for t in texts:
        assert all(ord(c) < 128 for c in t), repr(t)
        if t in seen:
            continue
        seen.add(t)
        ids = tok.encode(t, add_special_tokens=False).ids
        lines.append(json.dumps({"text": t, "ids": ids}, ensure_ascii=True))
    out_path.write_text("\n".join(lines) + "\n", encoding="ascii")
    print(f"wrote {len(lines)} lines to {out_path}")


if __name__ == "__main__":
    main()
