#!/usr/bin/env python3
"""Generate src/tandem/text/unicode_data.cpp: the Unicode data the tokenizer needs to match HF
`tokenizers` exactly.

Two parts, each taken from where HF `tokenizers` takes it, not from a newer Unicode release:

1. NFC / NFKC data (combining classes, full canonical and compatibility decompositions, canonical
   compositions). HF normalizes with the Rust crate `unicode-normalization-alignments` 0.1.12,
   whose tables are Unicode 9.0.0. Pass that crate's `src/tables.rs` with --crate-tables (the
   crate is MIT/Apache-2.0; its repository is github.com/n1t0/unicode-normalization).

2. Regex class additions. HF's Split/ByteLevel regexes run on Oniguruma, whose Unicode tables are
   newer than the ones in PCRE2 10.42 (Unicode 14.0, the same version as Python 3.11's
   unicodedata). For each class, the code points Oniguruma matches but Unicode 14.0 does not are
   written as ranges; tandem's regex layer appends them to \\p{X}, \\d, \\w. The script fails if
   Oniguruma ever matches *fewer* code points than Unicode 14.0 (that could not be patched by
   appending). It also writes the full Oniguruma sets of a few classes to
   tests/fixtures/tokenizers/unicode_classes.json, which the C++ test compares PCRE2 against.

Deterministic. Run from the repository root with the tools env (tokenizers installed):
    .venv-tools/bin/python tools/make_unicode_tables.py --crate-tables PATH/TO/tables.rs
"""

import argparse
import json
import re
import sys
import unicodedata

from tokenizers import Regex, pre_tokenizers

CPP_OUT = "src/tandem/text/unicode_data.cpp"
CLASSES_OUT = "tests/fixtures/tokenizers/unicode_classes.json"

# General categories (and subcategories) whose \p{X} gets Oniguruma's extra code points.
CATEGORIES = ["L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mc", "Me", "N", "Nd", "Nl", "No",
              "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So",
              "Z", "Zs", "Zl", "Zp", "Cc", "Cf"]
# Classes whose full Oniguruma sets go to the test fixture.
FIXTURE_CLASSES = ["\\p{L}", "\\p{N}", "\\p{M}", "\\p{P}", "\\p{S}", "\\s", "\\w", "\\d"]

CHAR = r"'\\u\{([0-9A-Fa-f]+)\}'"


def parse_crate_tables(path):
    text = open(path, encoding="utf-8").read()
    version = re.search(r"UNICODE_VERSION: \(u64, u64, u64\) = \((\d+), (\d+), (\d+)\)", text)
    assert version and version.groups() == ("9", "0", "0"), "expected the Unicode 9.0.0 tables"

    def block(name):
        start = text.index(f"const {name}")
        return text[start:text.index("];", start)]

    ccc = {}
    for kv in re.findall(r"0x([0-9A-Fa-f]+),", block("CANONICAL_COMBINING_CLASS_KV")):
        kv = int(kv, 16)
        ccc[kv >> 8] = kv & 0xFF
    compositions = {}
    for key, value in re.findall(r"\(0x([0-9A-Fa-f]+), " + CHAR + r"\)",
                                 block("COMPOSITION_TABLE_KV")):
        key = int(key, 16)
        compositions[(key >> 16, key & 0xFFFF)] = int(value, 16)
    astral = text[text.index("fn composition_table_astral"):]
    astral = astral[:astral.index("_ => None")]
    for a, b, c in re.findall(r"\(" + CHAR + r", " + CHAR + r"\) => Some\(" + CHAR + r"\)", astral):
        compositions[(int(a, 16), int(b, 16))] = int(c, 16)

    def decompositions(name):
        out = {}
        for key, chars in re.findall(r"\(0x([0-9A-Fa-f]+), &\[([^\]]*)\]\)", block(name)):
            out[int(key, 16)] = [int(c, 16) for c in re.findall(CHAR, chars)]
        return out

    canonical = decompositions("CANONICAL_DECOMPOSED_KV")
    compatibility = decompositions("COMPATIBILITY_DECOMPOSED_KV")
    return ccc, canonical, compatibility, compositions


def check_against_python(ccc, canonical, compatibility):
    """Unicode's stability policy: data of characters that existed in 9.0 never changes."""
    for cp, value in ccc.items():
        assert unicodedata.combining(chr(cp)) == value, hex(cp)
    for cp, chars in canonical.items():
        assert unicodedata.normalize("NFD", chr(cp)) == "".join(map(chr, chars)), hex(cp)
    for cp, chars in compatibility.items():
        assert unicodedata.normalize("NFKD", chr(cp)) == "".join(map(chr, chars)), hex(cp)


ALL_CHARS = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)


def oniguruma_set(pattern):
    """Code points that HF's regex engine matches with `pattern` (one code point per match)."""
    keep_matches = pre_tokenizers.Split(Regex(pattern), "removed", invert=True)
    return {ord(ch) for piece, _ in keep_matches.pre_tokenize_str(ALL_CHARS) for ch in piece}


def to_ranges(code_points):
    ranges = []
    for cp in sorted(code_points):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return ranges


def regex_class_additions():
    assert unicodedata.unidata_version == "14.0.0", "run with Python 3.11 (Unicode 14.0 data)"
    additions = {}
    for cat in CATEGORIES:
        onig = oniguruma_set(r"\p{%s}" % cat)
        mine = {c for c in range(0x110000) if unicodedata.category(chr(c)).startswith(cat)}
        missing = mine - onig
        assert not missing, f"\\p{{{cat}}}: Oniguruma lacks {sorted(missing)[:8]}"
        additions[cat] = onig - mine
    word = oniguruma_set(r"\w")
    base = {c for c in range(0x110000)
            if unicodedata.category(chr(c))[0] in "LM" or unicodedata.category(chr(c)) in
            ("Nd", "Pc")}
    assert not base - word, "\\w: Oniguruma lacks some of L|M|Nd|Pc"
    additions["w"] = word - base
    digit = oniguruma_set(r"\d")
    nd = {c for c in range(0x110000) if unicodedata.category(chr(c)) == "Nd"}
    assert not nd - digit
    additions["d"] = digit - nd
    space = oniguruma_set(r"\s")
    return additions, space


def emit_cpp(ccc, canonical, compatibility, compositions, additions, space):
    out = []
    w = out.append
    w("// Generated by tools/make_unicode_tables.py -- do not edit.")
    w("// NFC/NFKC data: Unicode 9.0.0, from the tables of the Rust crate")
    w("// unicode-normalization-alignments 0.1.12 (MIT/Apache-2.0, (c) The Rust Project Developers),")
    w("// the data HF tokenizers normalizes with. Regex class additions: code points Oniguruma (HF's")
    w("// regex engine, tokenizers 0.23.3) matches beyond Unicode 14.0 (PCRE2 10.42's data).")
    w('#include "tandem/text/unicode_data.h"')
    w("")
    w("namespace tandem::unicode_data {")
    w("")

    def rows(items):  # as many items per line as fit in 100 columns
        line = "   "
        for item in items:
            if len(line) + 1 + len(item) > 100:
                w(line)
                line = "   "
            line += " " + item
        if line.strip():
            w(line)

    w("const CombiningClass kCombiningClasses[] = {")
    rows([f"{{0x{cp:X}, {v}}}," for cp, v in sorted(ccc.items())])
    w("};")
    w("const size_t kCombiningClassCount = std::size(kCombiningClasses);")
    w("")
    for name, table in (("Canonical", canonical), ("Compatibility", compatibility)):
        flat, entries = [], []
        for cp, chars in sorted(table.items()):
            entries.append(f"{{0x{cp:X}, {len(flat)}, {len(chars)}}},")
            flat.extend(chars)
        w(f"const char32_t k{name}DecompositionChars[] = {{")
        rows([f"0x{c:X}," for c in flat])
        w("};")
        w(f"const Decomposition k{name}Decompositions[] = {{")
        rows(entries)
        w("};")
        w(f"const size_t k{name}DecompositionCount = std::size(k{name}Decompositions);")
        w("")
    w("const Composition kCompositions[] = {")
    rows([f"{{0x{(a << 21) | b:X}, 0x{c:X}}}," for (a, b), c in
          sorted(compositions.items(), key=lambda kv: (kv[0][0] << 21) | kv[0][1])])
    w("};")
    w("const size_t kCompositionCount = std::size(kCompositions);")
    w("")
    names = sorted(additions)
    for name in names:
        ranges = to_ranges(additions[name])
        w(f"static const Range k{name}Additions[] = {{")
        rows([f"{{0x{a:X}, 0x{b:X}}}," for a, b in ranges] or ["{0, 0},"])
        w("};")
    w("const ClassAdditions kClassAdditions[] = {")
    for name in names:
        count = len(to_ranges(additions[name]))
        w(f'    {{"{name}", k{name}Additions, {count}}},')
    w("};")
    w("const size_t kClassAdditionCount = std::size(kClassAdditions);")
    w("")
    w("const Range kOnigurumaSpace[] = {")
    rows([f"{{0x{a:X}, 0x{b:X}}}," for a, b in to_ranges(space)])
    w("};")
    w("const size_t kOnigurumaSpaceCount = std::size(kOnigurumaSpace);")
    w("")
    w("}  // namespace tandem::unicode_data")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--crate-tables", required=True,
                        help="src/tables.rs of unicode-normalization-alignments 0.1.12")
    parser.add_argument("--out", default=CPP_OUT)
    parser.add_argument("--classes-out", default=CLASSES_OUT)
    args = parser.parse_args()

    ccc, canonical, compatibility, compositions = parse_crate_tables(args.crate_tables)
    check_against_python(ccc, canonical, compatibility)
    additions, space = regex_class_additions()
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(emit_cpp(ccc, canonical, compatibility, compositions, additions, space))
    classes = {name: to_ranges(oniguruma_set(name)) for name in FIXTURE_CLASSES}
    with open(args.classes_out, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/make_unicode_tables.py",
                   "what": "code points HF tokenizers' regex engine (Oniguruma) matches per class",
                   "classes": classes}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out} ({len(ccc)} combining classes, {len(canonical)} canonical and "
          f"{len(compatibility)} compatibility decompositions, {len(compositions)} compositions)")
    print(f"wrote {args.classes_out}")


if __name__ == "__main__":
    sys.exit(main())
