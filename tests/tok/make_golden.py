#!/usr/bin/env python3
"""make_golden.py — writes tests/tok/golden.jsonl: a corpus of texts (and invalid byte
strings) with the ids HF `tokenizers` gives for the Qwen3 tokenizer, plus decode cases.

Line kinds (one JSON object per line):
  {"text": T, "ids": [...], "ids_nospecial": [...], "nfc": N?}
      ids = encode(T, add_special_tokens=False); ids_nospecial = the same with
      split_special_tokens (tokenizer.encode_special_tokens = True), where only special
      added tokens stay text. "nfc" (only when it differs from T) is HF's NFC of T.
  {"bytes_b64": B, "ids": [...], "ids_nospecial": [...], "nfc": N?}
      B is base64 of bytes that are not valid UTF-8; the expected ids are HF's encode of
      B.decode('utf-8', 'replace'), what a Python caller would hand to HF; "nfc" as above,
      of the repaired text.
  {"dec_ids": [...], "dec_text": D, "dec_text_skip": S}
      D = decode(ids), S = decode(ids, skip_special_tokens=True): byte fragments, ids that
      cut characters in two, added and filler ids, ids past the vocabulary.

The C side is kt_tok_golden (tests/unit/test_tok.c). The corpus covers ASCII (everything
from make_ascii_golden.py), source code in several languages, many scripts (CJK, Arabic,
Hebrew, Devanagari, Thai, Khmer ...), emoji with ZWJ and skin tones, combining marks and
non-NFC input, Unicode whitespace, non-ASCII digits, added-token strings inside text, very
long words, case-folding edge cases around contractions, invalid UTF-8, code points whose
Unicode data differs between utf8proc and HF (see make_unicode_tables.py) and random
Unicode from a fixed seed. Deterministic: reruns write the same file.

Usage: .venv/bin/python tests/tok/make_golden.py [tokenizer.json] [out.jsonl]
"""
import base64
import json
import random
import sys
import unicodedata
from pathlib import Path

import make_ascii_golden as ascii_set  # tests/tok/make_ascii_golden.py, beside this script

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOKENIZER = ROOT / "tools/data/qwen3-tokenizer/tokenizer.json"
OUT = HERE / "golden.jsonl"

ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
         "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
         "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
         "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
         "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
         "<tool_response>", "</tool_response>", "<think>", "</think>"]

PROSE = {
    "zh": ["我们的目标是让每个人都能使用人工智能。", "北京是中华人民共和国的首都，有三千多年的历史。",
           "今天天气很好，我们去公园散步吧！", "机器学习（Machine Learning）是人工智能的一个分支。",
           "他说：“你好，世界。”然后离开了。", "繁體中文與簡體中文的差異在於字形。"],
    "ja": ["こんにちは、世界！今日はいい天気ですね。", "東京タワーは高さ333メートルです。",
           "カタカナとひらがなと漢字を混ぜて書きます。", "ｶﾀｶﾅ（半角）と全角のＡＢＣ１２３。"],
    "ko": ["안녕하세요, 세계! 오늘 날씨가 좋네요.", "한국어는 한글로 씁니다. 세종대왕이 만들었습니다.",
           "서울특별시 종로구 세종대로 175"],
    "ar": ["مرحبا بالعالم! كيف حالك اليوم؟", "اللغة العربية هي لغة رسمية في أكثر من عشرين دولة.",
           "القُرْآن الكَرِيم", "العدد ١٢٣٤٥ بالأرقام الهندية", "ﷺ ﷲ ﻻ ﻷ"],
    "he": ["שלום עולם! מה שלומך?", "עִבְרִית עם ניקוד: בְּרֵאשִׁית בָּרָא"],
    "hi": ["नमस्ते दुनिया! आप कैसे हैं?", "हिन्दी भारत की राजभाषा है। संख्या: १२३४५",
           "क़ ख़ ग़ ज़ ड़ ढ़ फ़ य़", "श्रीमान् द्विवेदी"],
    "bn": ["আমার সোনার বাংলা, আমি তোমায় ভালোবাসি।", "কো কৌ ৎ ড় ঢ় য়"],
    "ta": ["வணக்கம் உலகம்! தமிழ் ஒரு செம்மொழி.", "கொ கோ கௌ"],
    "te": ["తెలుగు భాష ఒక ద్రావిడ భాష.", "కై"],
    "th": ["สวัสดีครับ ยินดีที่ได้รู้จัก", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ ๑๒๓"],
    "km": ["សួស្តីពិភពលោក", "ភាសាខ្មែរ"],
    "lo": ["ສະບາຍດີ"], "my": ["မင်္ဂလာပါ"], "ka": ["გამარჯობა მსოფლიო"],
    "hy": ["Բարեւ աշխարհ"], "am": ["ሰላም ልዑል! ፩፪፫"], "bo": ["བཀྲ་ཤིས་བདེ་ལེགས།"],
    "si": ["ආයුබෝවන්"], "mn": ["ᠮᠣᠩᠭᠣᠯ ᠬᠡᠯᠡ"],
    "el": ["Γειά σου Κόσμε! Ἐν ἀρχῇ ἦν ὁ λόγος.", "ΣΊΣΥΦΟΣ σίσυφος ς"],
    "ru": ["Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок, да выпей чаю.",
           "Ёлка, йогурт, ЙОД"],
    "uk": ["Гей, хлопці, ґудзик і їжак."],
    "vi": ["Tiếng Việt có dấu: Cửa Việt, Hà Nội, Đà Nẵng, ngữ âm.",
           "Trăm năm trong cõi người ta, chữ tài chữ mệnh khéo là ghét nhau."],
    "de": ["Größenwahn und Straße: Fußgängerübergänge sind schön.", "ẞ GROẞ"],
    "fr": ["L'été dernier, j'ai mangé une crème brûlée à Noël.", "Ça va? Où est l'hôtel?"],
    "es": ["¿Qué tal? ¡Muy bien! El niño comió piña.", "Mañana será otro día."],
    "pl": ["Zażółć gęślą jaźń."], "cs": ["Příliš žluťoučký kůň úpěl ďábelské ódy."],
    "tr": ["İstanbul'da ılık bir gün. IĞDIR ığdır İi Iı", "Şişli'deki çiçekçi"],
    "is": ["Þórður og Æsa fóru í ferð."], "ro": ["Țară și șosea"],
    "yo": ["Ẹ ku àárọ̀, ṣé dáadáa ni?"], "ipa": ["ˈfəʊnətɪk ðə ˌɪntəˈnæʃənl̩ ʔ"],
}

EMOJI = [
    "😀😃😄😁", "👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "❤️‍🔥", "🧑🏿‍🤝‍🧑🏻",
    "🇺🇸🇯🇵🇩🇪🇫🇷", "1️⃣ 2️⃣ #️⃣ *️⃣", "☺︎ ☺️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "I ❤️ NY", "ok👌done", "🫠🫡🫶🏾🪿",
    "emoji in text: 🎉 party 🎂 cake 🍰", "🤷‍♀️🤷‍♂️", "👁️‍🗨️", "🐕‍🦺 🐈‍⬛ 🐻‍❄️",
    "text🙂\n🙂\t🙂 🙂", "🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂", "\U0001FAE8\U0001FA77", "©®™ ‼⁉",
]

CODE = [
    "fn main() {\n    let s = String::from(\"héllo\");\n    println!(\"{}\", s.len());\n}\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"你好, 世界\")\n}\n",
    "public class Main {\n    public static void main(String[] args) {\n        System.out.println(\"Γειά\");\n    }\n}",
    "SELECT u.name, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id\nWHERE u.city = 'Zürich' GROUP BY u.name HAVING n > 3;",
    "<html lang=\"ja\">\n<head><meta charset=\"utf-8\"><title>テスト</title></head>\n<body>&nbsp;&copy;</body>\n</html>",
    "def π(n: int) -> float:\n    \"\"\"Approximate π.\"\"\"\n    return sum((-1) ** k / (2 * k + 1) for k in range(n)) * 4\n",
    "const Δt = 0.016; // seconds\nlet café = \"naïve\";\nconsole.log(`${café} ${Δt}`);",
    "main :: IO ()\nmain = mapM_ print [x * x | x <- [1..10], even x]\n",
    "#!/usr/bin/env perl\nmy %h = (a => 1, b => 2);\nprint \"$_=$h{$_}\\n\" for sort keys %h;\n",
    "\\begin{equation}\n  \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}",
    "x ≤ y ∧ y ≥ z ⇒ ∀ε>0 ∃δ>0: |f(x)−f(y)| < ε ∑ ∏ √ ∞ ≠ ≈",
    "{\"name\": \"Ünïcödé\", \"emoji\": \"🎉\", \"escaped\": \"\\u00e9\\n\", \"arr\": [1, 2.5e-3]}",
    "# -*- coding: utf-8 -*-\n# Комментарий на русском\nprint('日本語')  # コメント\n",
    "    if (ch == '\\u00A0' || ch == '\\u3000') {\n        return true;\n    }",
    "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT '');\r\nINSERT INTO t VALUES (1, 'a');\r\n",
    "impl<'a> Iterator for Words<'a> { type Item = &'a str; }",
    "let x: Vec<u8> = b\"bytes\\xff\".to_vec(); // it's 'static",
    "mov eax, [ebp+8]\n\tadd eax, 0x1F\n\tret",
    "x = 1_000_000\ny = 0xDEAD_BEEF\nz = 3.14e-10j",
]

SPACES = ["\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005",
          "\u2006", "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f",
          "\u205f", "\u3000", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f",
          "\u180e", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"]

DIGITS = ["٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯", "๐๑๒๓๔๕๖๗๘๙",
          "０１２３４５６７８９", "𝟎𝟏𝟐𝟑𝟒𝟓", "ⅠⅡⅢⅣⅫ ⅰⅱⅲ", "¹²³⁴⁵⁶ ₁₂₃", "½ ¼ ¾ ⅓ ⅞",
          "①②③⑳ ㉑ ㊿", "〇一二三", "፩፪፫", "𐄇𐄈", "\U00010D40\U00010D41\U00010D42",
          "\U0001E5F1\U0001E5F2", "\U00016D70\U00016D71", "\U0001CCF0\U0001CCF9"]

CONTRACTION_EDGES = [
    "'S", "'s", "'ſ", "'ſa", "'ſS", "'ſt", "'K", "'\u212a", "'\u212aa", "'İ", "'İs", "'ı",
    "'ß", "'ẞ", "'ﬆ", "'ﬅ", "'Ｓ", "'ｓ", "'Ŝ", "'Ś", "'ŝ", "'ς", "'Σ", "'T", "'Ť", "'ŧ",
    "'RE", "'Re", "'rE", "'ℛe", "'VE", "'ve", "'vE", "'M", "'Ⅿ", "'ⅿ", "'LL", "'Ll", "'lL",
    "'ǈ", "'ǉ", "'D", "'Ď", "'ǅ", "it’s", "it‘s", "it`s", "it´s", "it's", "IT'ſ",
    "don'ſt", "y'all'd've'ſ", "'s'ſ'S", "'\u017f\u0301", "'s\u0301", "'S\u0307", "'e\u0301",
    "’s ’t ’re", "'ｓ'ｔ", "\u02bcs", "'\u1e9b", "'\u1e9e", "'Ⓢ", "'ⓢ", "'𝐬", "'ꞩ",
]

ODD_CODE_POINTS = [
    "\ufffd", "\ufffe", "\uffff", "\U0010fffd", "\U0010ffff", "\ue000\uf8ff", "\U000f0000",
    "\u0378\u0379", "\U0003134b", "\U0002ebf0\U0002ee5d", "\u1c89\u1c8a", "\ua7cb\ua7dc",
    "\U000105c0\U000105f3", "\U00013460\U000143fa", "\U00016100x\U0001611d",
    "\U0001e5d0\U0001e5ed", "\U00018cff", "\U00011380\U000113b5", "\x00\x01\x7f\x80\x9f",
    "\u061c\u200e\u200f\u202a\u202e\u2066\u2069", "\U000e0001\U000e0020\U000e007f",
    "\ufe00\ufe0f\U000e0100", "\u034f", "\u115f\u1160\u3164\uffa0",
]


def nonnfc_cases():
    out = []
    base = ["é", "ñ", "Å", "Ω", "ǖ", "ệ", "ḍ̇", "가", "각", "힣", "ﬁ", "Ⅸ", "ｶﾞ", "㍿", "ĳ",
            "ọ̀", "ở", "ṩ", "ǭ", "Ǻ", "ΐ", "ῷ", "ё", "й", "क़", "ড়", "ো", "ௌ", "ൊ", "ཱི"]
    for s in base:
        out += [unicodedata.normalize(f, s) for f in ("NFD", "NFKD", "NFKC")]
    for lang, sents in PROSE.items():
        for s in sents[:2]:
            d = unicodedata.normalize("NFD", s)
            if d != s:
                out.append(d)
    out += [
        "e\u0301", "e\u0301\u0323", "e\u0323\u0301", "a\u0308\u0301\u0323\u0327",
        "a\u0301\u0301\u0301", "\u0301start", "x\u0301\u0300\u0302\u0303",
        "\u212b \u2126 \u212a \u0340 \u0341 \u0343 \u0344 \u0374 \u037e \u0387",
        "\u0958\u0959\u095a \u2adc \ufb1d \U0001d15e \U0002f800 \uf900\uf901 \u2000",
        "\u1100\u1161\u11a8 \u1100\u1161 \uac00\u11a8 \u1112\u1175\u11c2 \u110b\u1173",
        "\u09c7\u09be \u0b47\u0b3e \u0bc6\u0bbe \u0cc6\u0cc2\u0cd5 \u0d46\u0d3e \u0dd9\u0dcf",
        "\u1025\u102e \u1b05\u1b35 \U00011131\U00011127 \U00011347\U0001133e",
        "\U000114b9\U000114ba \U000115b8\U000115af \U00011935\U00011930",
        "a\u0315\u0300\u05ae\u0300b", "\u0f71\u0f72\u0f74 \u0f73 \u0f75 \u0f81",
        "\u05d0\u05b8\u05bc", "\u05e9\u05c1\u05bc\u05b8", "\u0627\u0653\u0654\u0655",
        "<\u0338 >\u0338 =\u0338", "\u1e0b\u0323", "\u1e9b\u0323", "q\u0307\u0323",
        "\u00c5\u030a", "A\u030a\u0301", "\u0391\u0313\u0301\u0345", "\u03b9\u0308\u0301",
        "\u0915\u093c\u094d", "\u0928\u093c", "\u3099\u309a \u304b\u3099 \u30cf\u309a",
        "\u1ab0\u1abe\u1abf\u1ac0", "a\u1abf\u0301", "a\u1dfa\u0301", "\u0915\u08d3\u0301",
        "a\u07fd\u0301\u0316", "\u0c15\u0c3c\u0c4d", "x\u1715\u0301", "b\ua82c\u0323",
        "\U00011935\U00011930\u0301", "\U00011938\u0301", "\U00010f46\U00010f50\u0301",
        "\u0d3b\u0d3c\u0301", "\U0001e130\U0001e136\u0300", "a\U00016ff0\u0301",
        "\U00011070\u0301e", "\U0001e4ec\u0301\u0323",
    ]
    return out


def long_words(rng):
    out = ["a" * 5000, "ab" * 2500, "The" * 1000, "x" * 10001, "0" * 3000,
           "1234567890" * 300, "é" * 2000, "e\u0301" * 1500, "中" * 3000,
           "".join(rng.choice("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无方")
                   for _ in range(4000)),
           "🙂" * 1000, "👍🏽" * 500, "a" + "\u0301\u0316" * 1000, "a" + "\u0316\u0301" * 1000,
           "a" + "".join(rng.choice("\u0300\u0301\u0316\u0323\u0334\u0345\u05b0\u0e38")
                         for _ in range(3000)),
           " " * 4000 + "x", "\n" * 3000, "\t " * 2000 + "\n", "\u3000" * 2000 + "a",
           "-" * 4000, "!" * 2000 + "\r\n" * 500, "ـ" * 3000,
           base64.b64encode(bytes(rng.randrange(256) for _ in range(4000))).decode(),
           "https://example.com/" + "/".join("seg%d" % i for i in range(600)),
           "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(6000)),
           "ก" * 3000, "한" * 2000, "ا" * 3000, "श्र" * 1000, "'s" * 2000]
    return out


def special_cases(rng):
    out = []
    for tok in ADDED:
        out += [tok, "x" + tok + "y", " " + tok + " ", tok + tok, tok[:-1], tok[1:],
                "é" + tok + "\u0301", tok + "\u0338", "<" + tok + ">"]
    words = ["hello", " world", "\n", "é", "中文", "🙂", "\u0301", "'s", "  ", "123", "\r\n"]
    for _ in range(120):
        parts = [rng.choice(ADDED + words + words) for _ in range(rng.randint(2, 12))]
        out.append("".join(parts))
    out += ["<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n<think>\n嗯。\n</think>\n\n你好！<|im_end|>",
            "<tool_call>\n{\"name\": \"天气\", \"arguments\": {\"城市\": \"北京\"}}\n</tool_call>",
            "<|im_start|\u0301>", "<\u0338|im_end|>", "<think\u0301>", "</think>\u0338x"]
    return out


def whitespace_cases(rng):
    out = []
    for sp in SPACES:
        out += [sp, "a" + sp + "b", "a" + sp * 3 + "b", sp + "word", "word" + sp,
                "a " + sp + " b", "1" + sp + "2", "." + sp + ".", sp + "\n" + sp + "x"]
    pool = [" ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u2029", "\x0b",
            "\x0c", "\u0085", "\u2003", "\u200b", "x", "1", ".", "é"]
    for _ in range(150):
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 25))))
    return out


def digit_cases(rng):
    out = list(DIGITS)
    for d in DIGITS:
        out += [d * 5, "x" + d + "y", " " + d, d.replace("", " ")]
    for _ in range(40):
        out.append("".join(rng.choice(DIGITS[rng.randrange(len(DIGITS))]) for _ in range(rng.randint(20, 200))))
    out += ["3" * 1000, "12,345,678.90", "٣٫١٤", "１２３ａｂｃ", "v٢.٠", "2²=4", "x₁+x₂"]
    return out


def prose_cases(rng):
    out = []
    for lang, sents in PROSE.items():
        out += sents
        out.append(" ".join(sents))
        out.append("\n".join(sents) + "\n")
    all_sents = [s for v in PROSE.values() for s in v]
    for _ in range(150):
        out.append(rng.choice([" ", "\n", "", "\t", " — "]).join(
            rng.choice(all_sents) for _ in range(rng.randint(2, 5))))
    return out


def random_unicode(rng, n):
    pools = [
        (0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x2FF), (0x300, 0x36F), (0x370, 0x3FF),
        (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0x980, 0x9FF),
        (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x2000, 0x206F),
        (0x20D0, 0x20FF), (0x2100, 0x214F), (0x2150, 0x218F), (0x2460, 0x24FF),
        (0x3000, 0x303F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
        (0xF900, 0xFAFF), (0xFB00, 0xFB4F), (0xFE00, 0xFE0F), (0xFF00, 0xFFEF),
        (0x10000, 0x1FFFF), (0x1F300, 0x1FAFF), (0x20000, 0x2FFFF), (0xE0000, 0xE007F),
        (0x0, 0x10FFFF), (0x0, 0x10FFFF), (0x11000, 0x11FFF), (0x16000, 0x16FFF),
        (0x1E000, 0x1EFFF), (0x10D00, 0x10FFF), (0x13400, 0x1447F),
    ]
    special = [0x0A, 0x0D, 0x09, 0x20, 0x27, 0x17F, 0x212A, 0x130, 0x301, 0x323, 0x3099,
               0x09BE, 0x11930, 0x11935, 0x1161, 0x11A8, 0xFFFD, 0x85, 0x3000]
    out = []
    for _ in range(n):
        k = rng.randint(1, 60)
        cps = []
        for _ in range(k):
            if rng.random() < 0.15:
                cps.append(rng.choice(special))
            else:
                lo, hi = rng.choice(pools)
                cp = rng.randint(lo, hi)
                if 0xD800 <= cp <= 0xDFFF:
                    cp = 0xFFFD
                cps.append(cp)
        out.append("".join(map(chr, cps)))
    return out


def invalid_bytes(rng):
    fixed = [
        b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xe0\x9f\xbf",
        b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x80\x80\xaf", b"\xf0\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80",
        b"\xfe", b"\xff", b"\xfe\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"a\xc3",
        b"\xe2\x82a", b"\xf0\x9f\x98a", b"\xf0\x9fa\x98", b"\xc3\xc3\xa9", b"\xe2\xe2\x82\xac",
        b"\xf0\x9f\x98\x80\x80", b"\x80\x80\x80\x80", b"hello\xffworld", b"caf\xe9",
        b"\xe4\xbd\xa0\xe5\xa5", b"\xe4\xbd\xa0\xe5\xa5\xbd\xff", b"<think>\xff</think>",
        b"<|im_start|>\xc3<|im_end|>", b"<|im_\xffstart|>", b"\xef\xbb\xbfBOM\xef\xbb",
        b"e\xcc", b"e\xcc\x81\xcc", b"'\xc5", b"'\xc5\xbf", b"'\xc5s", b" \xa0", b"\xc2 ",
        b"1\xd9\xa22", b"\xe3\x80", b"\xe3\x80\x80\xe3", b"\r\n\xff\r\n", b"\xed\x9f\xbf\xed\xa0",
        b"\xf4\x8f\xbf\xbf\xf4\x90", b"\xe0\xa0\x80\xe0\xa0", b"\xc2\x80\xc2", b"\x00\xff\x00",
    ]
    out = list(fixed)
    valid = "héllo wörld 中文 🙂 e\u0301 '\u017f <think>".encode()
    for _ in range(150):
        k = rng.randint(1, 40)
        b = bytearray()
        for _ in range(k):
            r = rng.random()
            if r < 0.4:
                b.append(rng.randrange(256))
            elif r < 0.7:
                i = rng.randrange(len(valid))
                b += valid[i:i + rng.randint(1, 6)]
            else:
                b += rng.choice(fixed)
        out.append(bytes(b))
    return [b for b in out if not is_valid(b)]


def is_valid(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def decode_cases(rng, tok, encoded, n_vocab_hf):
    out = []
    for ids in encoded:
        if len(ids) < 2:
            continue
        i = rng.randrange(len(ids))
        j = min(len(ids), i + rng.randint(1, 12))
        out.append(ids[i:j])
        if len(out) >= 250:
            break
    added = list(range(151643, 151669))
    for _ in range(150):
        seq = []
        for _ in range(rng.randint(1, 16)):
            r = rng.random()
            if r < 0.5:
                seq.append(rng.randrange(151643))
            elif r < 0.65:
                seq.append(rng.choice(added))
            elif r < 0.75:
                seq.append(rng.randrange(151669, 151936))  # GGUF filler, unknown to HF
            elif r < 0.8:
                seq.append(rng.randrange(151936, 300000))  # past the vocabulary
            else:  # single-byte tokens: fragments of multi-byte characters
                seq.append(rng.randrange(256))
        out.append(seq)
    return [{"dec_ids": s, "dec_text": tok.decode(s, skip_special_tokens=False),
             "dec_text_skip": tok.decode(s, skip_special_tokens=True)} for s in out]


PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def ids_with_pattern(tok, pattern, text):
    """Ids HF would give if its split regex were `pattern` (texts without added tokens)."""
    from tokenizers import Regex, normalizers, pre_tokenizers
    pt = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t = normalizers.NFC().normalize_str(text)
    return [x.id for p, _ in pt.pre_tokenize_str(t) for x in tok.model.tokenize(p)]


def discriminating(tok, pattern, candidates, limit):
    """Candidates whose ids change when the regex is `pattern` instead of the real one:
    texts that fail if the C matcher makes that mistake (most texts would not notice)."""
    out = []
    for t in candidates:
        if tok.encode(t, add_special_tokens=False).ids != ids_with_pattern(tok, pattern, t):
            out.append(t)
            if len(out) >= limit:
                break
    return out


TEMPLATES = ["{}'s", "{}'ll", "{}'t", "{}!\n", " {}!", "{}\r\n", "1{}'re", "x{}'ve",
             "{}.\n\n", "{}{}'d", "({})", "{}'m", " {}{}?", "{}...", "a{}'s"]


def patch_cases(tok):
    """For every range of src/tok/unicode.c's class patch (letters and digits that only
    HF's Unicode knows), texts that split differently if those code points were 'other'."""
    import re
    text = (ROOT / "src/tok/unicode.c").read_text(encoding="utf-8")
    rows = re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+), KIPP_CC_(LETTER|NUMBER)\}", text)
    ranges = [(int(a, 16), int(b, 16)) for a, b, _ in rows]
    x = "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges)
    alt = (PATTERN.replace(r"[^\r\n\p{L}\p{N}]", rf"[^\r\n[\p{{L}}&&[^{x}]][\p{{N}}&&[^{x}]]]")
           .replace(r"[^\s\p{L}\p{N}]", rf"[^\s[\p{{L}}&&[^{x}]][\p{{N}}&&[^{x}]]]")
           .replace(r"\p{L}+", rf"[\p{{L}}&&[^{x}]]+")
           .replace(r"|\p{N}|", rf"|[\p{{N}}&&[^{x}]]|"))
    out = []
    for a, b in ranges:
        chars = sorted({chr(a), chr((a + b) // 2), chr(b)})
        found = discriminating(tok, alt, [t.format(c, c) for c in chars for t in TEMPLATES], 2)
        if not found:
            raise SystemExit(f"no discriminating text for U+{a:04X}..U+{b:04X}")
        out += found
    return out


def main():
    tok_path = Path(sys.argv[1]) if len(sys.argv) > 1 else TOKENIZER
    out_path = Path(sys.argv[2]) if len(sys.argv) > 2 else OUT
    from tokenizers import Tokenizer, normalizers  # PyPI `tokenizers`

    tok = Tokenizer.from_file(str(tok_path))
    tok_ns = Tokenizer.from_file(str(tok_path))
    tok_ns.encode_special_tokens = True
    nfc = normalizers.NFC()
    rng = random.Random(20250611)

    texts = (ascii_set.PROSE + ascii_set.CONTRACTIONS + ascii_set.C_CODE + ascii_set.PY_CODE +
             ascii_set.JS_CODE + ascii_set.SHELL + ascii_set.NUMBERS + ascii_set.WHITESPACE +
             ascii_set.PUNCT + ascii_set.SPECIAL + ascii_set.random_texts(60) +
             prose_cases(rng) + EMOJI + CODE + CONTRACTION_EDGES + ODD_CODE_POINTS +
             nonnfc_cases() + special_cases(rng) + whitespace_cases(rng) + digit_cases(rng) +
             long_words(rng) + random_unicode(rng, 700) + patch_cases(tok))
    items = [("text", t) for t in texts] + [("bytes", b) for b in invalid_bytes(rng)]
    seen, lines, encoded = set(), [], []
    for kind, x in items:
        key = (kind, x)
        if key in seen:
            continue
        seen.add(key)
        text = x if kind == "text" else x.decode("utf-8", "replace")
        ids = tok.encode(text, add_special_tokens=False).ids
        obj = {"text": x} if kind == "text" else {"bytes_b64": base64.b64encode(x).decode()}
        obj["ids"] = ids
        obj["ids_nospecial"] = tok_ns.encode(text, add_special_tokens=False).ids
        n = nfc.normalize_str(text)
        if n != text:
            obj["nfc"] = n
        lines.append(json.dumps(obj, ensure_ascii=False))
        encoded.append(ids)
    n_enc = len(lines)
    for obj in decode_cases(rng, tok, encoded[::7], tok.get_vocab_size()):
        lines.append(json.dumps(obj, ensure_ascii=False))
    data = "\n".join(lines) + "\n"
    out_path.write_text(data, encoding="utf-8")
    print(f"wrote {n_enc} encode lines and {len(lines) - n_enc} decode lines "
          f"({len(data.encode()) / 1e6:.2f} MB) to {out_path}")


if __name__ == "__main__":
    main()
