#!/usr/bin/env python3
"""make_unicode_tables.py — regenerates the patch tables in src/tok/unicode.c, the places
where the installed utf8proc and HF `tokenizers` disagree about Unicode data.

HF tokenizers runs the Qwen2 split regex with the Oniguruma bundled in the `onig` crate
(Unicode 16.0 at the time of writing) and NFC with `unicode-normalization-alignments`
(Unicode 9.0 data). Kipp takes categories and normalization data from utf8proc (2.8.0 is
Unicode 15.0). This script finds every difference by probing HF itself, code point by code
point, and writes them between the GENERATED markers in src/tok/unicode.c:

  class_patch   code points whose regex class (\\p{L} / \\p{N}) differs from utf8proc's
                category; they must all be unassigned (Cn) in utf8proc, so the C side only
                consults the table for Cn code points (the script refuses anything else).
  nfc_opaque    code points HF's normalizer does not know (combining class 0, no
                decomposition, never composes) while utf8proc has data for them: a new
                combining class, a decomposition, or membership in a new composition.
  ccc0_second   code points with combining class 0 that can be the second half of a
                canonical composition (NFC_QC=Maybe starters, e.g. U+09BE), which the NFC
                quick check must not treat as safe boundaries. Hangul V/T jamo are handled
                in C by range.

It also records utf8proc's Unicode version; a unit test fails when the library in use
reports another one (the tables then need regenerating with this script).

Usage: .venv/bin/python tests/tok/make_unicode_tables.py [--check]
  --check: only compare with what src/tok/unicode.c holds; exit 1 if it differs.
Takes about 40 s (several million probes through the tokenizers Python API).
"""
import ctypes
import re
import sys
import unicodedata
from pathlib import Path

from tokenizers import Regex, normalizers, pre_tokenizers

ROOT = Path(__file__).resolve().parents[2]
C_FILE = ROOT / "src/tok/unicode.c"
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
MAX_CP = 0x110000


def scalar_values():
    for cp in range(MAX_CP):
        if not 0xD800 <= cp <= 0xDFFF:
            yield cp


# ---- utf8proc through ctypes --------------------------------------------------------------

class _Prop(ctypes.Structure):  # the leading fields of utf8proc_property_t (stable since 2.0)
    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16),
                ("bidi_class", ctypes.c_int16), ("decomp_type", ctypes.c_int16),
                ("decomp_seqindex", ctypes.c_uint16)]


U = ctypes.CDLL("libutf8proc.so.2")
U.utf8proc_unicode_version.restype = ctypes.c_char_p
U.utf8proc_category.restype = ctypes.c_int
U.utf8proc_get_property.restype = ctypes.POINTER(_Prop)
U.utf8proc_decompose_char.restype = ctypes.c_ssize_t
U.utf8proc_decompose_char.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                                      ctypes.c_ssize_t, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
UTF8PROC_DECOMPOSE = 1 << 3


def u_ccc(cp):
    return U.utf8proc_get_property(cp).contents.combining_class


def u_nfd(cp):
    buf = (ctypes.c_int32 * 32)()
    n = U.utf8proc_decompose_char(cp, buf, 32, UTF8PROC_DECOMPOSE, None)
    return [buf[i] for i in range(n)]


def u_class(cp):
    """The regex class Kipp derives from utf8proc: L, N, S (White_Space) or O."""
    c = U.utf8proc_category(cp)
    if 1 <= c <= 5:
        return "L"
    if 9 <= c <= 11:
        return "N"
    if c in (23, 24, 25) or 9 <= cp <= 13 or cp == 0x85:
        return "S"
    return "O"


# ---- HF probes ----------------------------------------------------------------------------

SPLIT = pre_tokenizers.Split(Regex(PATTERN), "isolated")
NFC = normalizers.NFC()
NFD = normalizers.NFD()


def pieces(s):
    return [p for p, _ in SPLIT.pre_tokenize_str(s)]


def hf_class(c):
    """Regex class of one character as Oniguruma sees it, from how two probes split."""
    if c in "\r\n":
        return "S"
    p = pieces("a" + c + "a")
    if p == ["a" + c + "a"]:
        return "L"
    if p == ["a", c, "a"]:
        return "N"
    q = pieces("1" + c + c + "1")
    if q == ["1", c + c, "1"]:
        return "O"
    if q == ["1", c, c, "1"]:
        return "S"
    raise SystemExit(f"U+{ord(c):04X}: unexpected split {p} / {q}")


def ranges(cps):
    out = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def main():
    check = "--check" in sys.argv[1:]
    version = U.utf8proc_unicode_version().decode()

    # 1. regex classes
    patch = {}
    for cp in scalar_values():
        h, m = hf_class(chr(cp)), u_class(cp)
        if h != m:
            if U.utf8proc_category(cp) != 0:
                raise SystemExit(f"U+{cp:04X}: HF class {h}, utf8proc class {m} for an "
                                 "assigned code point; the C side only patches Cn")
            patch[cp] = h
    class_rows = []
    for kind in ("L", "N"):
        for lo, hi in ranges([cp for cp, k in patch.items() if k == kind]):
            class_rows.append((lo, hi, kind))
    if set(patch.values()) - {"L", "N"}:
        raise SystemExit("a Cn code point is whitespace in Oniguruma: extend the C side")
    class_rows.sort()

    # 2. NFC: code points HF's normalizer treats as unknown while utf8proc has data.
    opaque = set()
    for cp in scalar_values():
        c = chr(cp)
        k = u_ccc(cp)
        if k:  # does HF reorder it like a mark of class k? A known mark of class 1 (U+0334)
            # or 230 (U+0301) after it must move in front; U+3400 composes with nothing.
            probe = ("\u3400" + c + "\u0334") if k > 1 else ("\u3400\u0301" + c)
            if NFC.normalize_str(probe) == probe:
                opaque.add(cp)
        d = u_nfd(cp)
        if d != [cp] and NFD.normalize_str(c) == c:  # a decomposition HF lacks
            opaque.add(cp)
            opaque.update(d)  # its parts may compose in utf8proc but not in HF
    opaque_rows = ranges(opaque)

    # 3. starters that can be the second half of a composition (NFC_QC=Maybe with ccc 0)
    seconds = set()
    for cp in scalar_values():
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<"):
            parts = [int(x, 16) for x in d.split()]
            if len(parts) == 2 and u_ccc(parts[1]) == 0:
                seconds.add(parts[1])
    for cp in scalar_values():  # utf8proc may know newer ones than Python's unicodedata
        d = u_nfd(cp)
        if len(d) >= 2 and u_ccc(d[-1]) == 0 and not 0x1161 <= d[-1] <= 0x11C2:
            seconds.add(d[-1])

    def fmt_rows(rows, with_kind):
        lines, line = [], "   "
        for r in rows:
            item = (f" {{0x{r[0]:05X}, 0x{r[1]:05X}, KIPP_CC_{'LETTER' if r[2] == 'L' else 'NUMBER'}}},"
                    if with_kind else f" {{0x{r[0]:05X}, 0x{r[1]:05X}}},")
            if len(line) + len(item) > 92:
                lines.append(line)
                line = "   "
            line += item
        lines.append(line)
        return "\n".join(lines)

    sec_items = [f" 0x{cp:05X}," for cp in sorted(seconds)]
    sec_lines, line = [], "   "
    for item in sec_items:
        if len(line) + len(item) > 92:
            sec_lines.append(line)
            line = "   "
        line += item
    sec_lines.append(line)

    block = (
        f"/* Generated by tests/tok/make_unicode_tables.py against utf8proc {version}; do not edit. */\n"
        f"#define PATCH_UTF8PROC_VERSION \"{version}\"\n\n"
        f"/* Unassigned (Cn) in utf8proc, \\p{{L}} or \\p{{N}} in HF's Oniguruma. */\n"
        f"static const class_range class_patch[] = {{\n{fmt_rows(class_rows, True)}\n}};\n\n"
        f"/* Unknown to HF's NFC (Unicode 9.0 data) but with normalization data in utf8proc. */\n"
        f"static const cp_range nfc_opaque[] = {{\n{fmt_rows(opaque_rows, False)}\n}};\n\n"
        f"/* Combining class 0, yet the second half of a canonical composition. */\n"
        f"static const uint32_t ccc0_second[] = {{\n" + "\n".join(sec_lines) + "\n};\n")

    text = C_FILE.read_text(encoding="utf-8")
    m = re.search(r"(/\* BEGIN GENERATED \*/\n)(.*?)(/\* END GENERATED \*/)", text, re.S)
    if not m:
        raise SystemExit(f"{C_FILE}: no BEGIN/END GENERATED markers")
    if check:
        same = m.group(2) == block
        print("tables are up to date" if same else "tables differ: regenerate")
        return 0 if same else 1
    C_FILE.write_text(text[:m.start(2)] + block + text[m.end(2):], encoding="utf-8")
    print(f"utf8proc {version}: {len(class_rows)} class ranges ({len(patch)} code points), "
          f"{len(opaque_rows)} NFC-opaque ranges ({len(opaque)} code points), "
          f"{len(seconds)} ccc-0 seconds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
