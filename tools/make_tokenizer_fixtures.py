#!/usr/bin/env python3
"""Generate the tokenizer parity fixtures: HF `tokenizers` encodings of a fixed text set.

Writes under tests/fixtures/tokenizers/:
  texts.json             the text set (also the benchmark corpus seed)
  tiny/tokenizer.json    a small byte-level BPE trained here (pair-form merges, added tokens with
                         lstrip / rstrip / single_word / normalized, add_prefix_space, a template)
  variants.json          tokenizers made by applying a JSON merge patch (RFC 7386) to a fixture's
                         tokenizer.json: components the real files lack (Llama-3 style ignore_merges
                         and BOS template, every Split behaviour, NFKC-normalized added tokens,
                         ByteLevel offset trimming)
  expected/NAME.json     for the real fixtures (qwen2, anthropic), tiny and every variant, per text:
                         ids and offsets without and with special tokens, and HF's decode of the ids
                         (with and without skip_special_tokens)
  expected/NAME-unicode.json  the same for 300 random strings of characters that NFC / NFKC
                         compose, decompose, reorder or map (qwen2: NFC, anthropic: NFKC)
  llama2/, mistral-v0.1/, mistral-v0.3/, gemma/tokenizer.json
                         SentencePiece-style BPE files laid out as those families' converted
                         tokenizer.json files are (transformers' LlamaConverter / GemmaConverter
                         layouts: Prepend + Replace normalizers or a Metaspace pre-tokenizer,
                         byte_fallback with the 256 <0xNN> pieces, unk_token, fuse_unk, Replace /
                         ByteFallback / Fuse / Strip / Metaspace decoders), on a vocabulary trained
                         here on the text set with a small alphabet, so that rarer characters take
                         the byte fallback; their expected/*.json use the text set plus SP_TEXTS

Offsets: HF's Python API counts characters; this script converts them to UTF-8 byte offsets, which
is what tandem's C++ Encoding holds. Deterministic; run from the repository root:
    .venv-tools/bin/python tools/make_tokenizer_fixtures.py
"""

import copy
import json
import os
import random
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import tokenizers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from tokenizers import AddedToken, Regex  # noqa: E402

ROOT = "tests/fixtures/tokenizers"
REAL_FIXTURES = ["qwen2", "anthropic"]

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

PROSE = (
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts a few tokens with a "
    "small model and lets the large one verify them in a single forward pass; when the draft is "
    "right, several tokens are accepted at once, and when it is wrong, nothing is lost but a "
    "little compute. It was the best of times, it was the worst of times, it was the age of "
    "wisdom, it was the age of foolishness.\n\nSecond paragraph: numbers like 1,234,567.89 and "
    "dates like 2024-05-17 appear, as do URLs (https://example.com/path?q=1&r=2) and e-mail "
    "addresses (someone@example.org)."
)

TEXTS = [
    # empty and tiny
    "", " ", "\t", "\n", "a", "A.",
    # ASCII prose
    "Hello, world! This is a simple sentence.",
    PROSE,
    # code
    "def square(x):\n    return x ** 2  # the square\n\n\nprint(square(12))\n",
    "int main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b\\n"}}',
    "for (i = 0; i < n; ++i) { x[i] += y[i] * 0.5f; }  // saxpy-ish",
    # whitespace runs
    "   leading spaces", "trailing spaces   ", "tabs\t\there\t\t", "\r\n windows\r\nline\r\nend\r\n",
    "\n\n\n\nmany newlines\n\n\n\n\n", " \n \t \r\n  mixed \u00a0whitespace", "a  b   c    d     e",
    " " * 300 + "x", "x" + " " * 40 + "\n" + " " * 7, "\t\t\t\t\t\tdeep indent",
    # digits
    "1234567890 12345678901234567890", "3.14159 2,718 1e-10 0x1F 007", "phone: +1 (555) 123-4567",
    "9" * 1000, "year 2024, page 12 of 345, 6789 items",
    # punctuation
    "!!!???...,,,;;;:::", "----====****____", "(((nested)))[[x]]{{y}}<<z>>", "a...b--c__d",
    "\u00abquotes\u00bb \u201ccurly\u201d \u2018single\u2019 \u2026 \u2014 \u2013",
    # contractions
    "I'm, you're, he's, she'll, we'd, they've, it's, don't, won't",
    "I'M YOU'RE HE'S SHE'LL WE'D THEY'VE IT'S DON'T", "'s 'S 'LL 'Ll 'd' '\u017f", "rock'n'roll o'clock",
    # accented Latin, composed and decomposed
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 co\u00f6perate fa\u00e7ade", "\u00c5ngstr\u00f6m \u00d8resund \u0141\u00f3d\u017a \u0160koda",
    "Cafe\u0301 nai\u0308ve", "e\u0301\u0316 a\u0316\u0301 o\u0308\u0304", "\u212b \u2126 \u212a",
    # other scripts
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5\u0387 \u03b5\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4 \u1100\u1161\u11a8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "Hello\u4e16\u754c\u043c\u0438\u0440123!abc\u0394\u03b4",
    # emoji: modifiers, ZWJ sequences, flags, keycaps, variation selectors, newer emoji
    "\U0001f600\U0001f603\U0001f604 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5 \u2764\ufe0f 1\ufe0f\u20e3 \U0001fae0 \U0001fae8",
    # combining marks alone, zalgo
    "\u0301", "\u0301start", "a\u0301\u0302\u0303\u0304", "Z\u0337\u0322a\u0335l\u0334g\u0336o\u0338",
    # unusual code points
    "a\u200db\u200cc \u200bzero\u200bwidth", "\ufeffBOM at start", "\ufffd replacement \ufffd\ufffd",
    "\ue000\uf8ff private use \U000f0000", "last \U0010ffff code point", "nel\x85here nbsp\u00a0here",
    "ideographic\u3000space", "line\u2028sep para\u2029sep", "\x00\x01\x1f control \x7f del",
    "mongolian\u180evowel", "\U00031350\U00031351 ext-H \U0002ebf0", "\u1171e",
    "\ufb01 \ufb02 \ufb00 \u2460\u2461\u2462 \u00b9\u00b2\u00b3 \u00bd \u216b", "\uff21\uff22\uff23\uff11\uff12\uff13 \u338f \u337f",
    # mojibake and byte-level lookalikes written as valid text
    "\u00c3\u00a9t\u00c3\u00a9 \u00e2\u20ac\u2122 \u00e2\u20ac\u0153quote\u00e2\u20ac\u009d", "\u00c4 \u0120 \u010a \u0109 \u0120Hello \u010a\u010a",
    # special / added tokens in the middle of text (each fixture knows some of these)
    "Hello<|endoftext|>world", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|endoftext|> <|im_end|> ", "<|im_start <|im_end", "x<EOT>y <META> <META_START><SOS>",
    "<s>begin</s> <mask> a<mask>b  <mask>  [SEP]  x[SEP]y", "word words a word here sword word.",
    "\ufb01x fix \ufb01xed <s><s></s>", "two  spaces  and\tmore  ",
    # long word past the BPE cache limit
    "a" * 300 + " " + "ab" * 200,
]

BASE_SPECIALS = ["<s>", "</s>"]

# Texts for the SentencePiece-style files: their control tokens, "▁" already in the input, spaces
# next to added tokens (Metaspace's prepend_scheme "first" prepends only at the input's start).
SP_TEXTS = [
    "[INST] What is 2+2? [/INST] 4</s>[INST]again[/INST]",
    "<s>[INST]no space[/INST]  two spaces",
    "[AVAILABLE_TOOLS][{\"name\": \"f\"}][/AVAILABLE_TOOLS][TOOL_CALLS] [TOOL_RESULTS] ok[/TOOL_RESULTS]",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>",
    "\u2581already\u2581has\u2581meta \u2581 \u2581\u2581", "ends with a space ", "  ", "\u2581",
    "tab\tand\nnewline\r\n", "<0x41> looks like a byte piece <0xZZ> <0x4>",
    "\U0001f600 grin, \u2603 snowman, \u00e9t\u00e9, \u4e16\u754c, \U00010348 gothic",
    "unknown \U0001d11e clef next to \U0001d11f and \u0fff", "word words a word",
]

# Byte pieces of a SentencePiece byte_fallback vocabulary, in id order.
BYTE_PIECES = [f"<0x{b:02X}>" for b in range(256)]

# Characters that normalization reorders, composes, decomposes or maps, for random strings that
# check NFC / NFKC offsets (expected/NAME-unicode.json, for the normalizing tokenizers).
NORMALIZATION_POOL = (
    "aeoAKs 1\n"
    "\u0300\u0301\u0308\u0316\u0323\u0327\u031b\u0345\u0334\u05b0\u0f71\u0f72\u0f73\u0344\u0340"
    "\u1100\u1161\u11a8\uac00\uac01\u00e9\u00c5\u212b\u2126\u1e69\u01fa"
    "\ufb01\u2460\u00bd\uff21\u3371\u00a0\u2000\u1e9b\u0385\u03d3\u0958\u0915\u093c"
    "\u09c7\u09be\u0b47\u0b3e\u1b05\u1b35\u0cbf\u0cd5\uf900\U0002f800\U0001f600\u200d"
)
NORMALIZING = ["qwen2", "anthropic"]


def normalization_texts():
    rng = random.Random(20240517)
    return ["".join(rng.choice(NORMALIZATION_POOL) for _ in range(rng.randint(1, 12)))
            for _ in range(300)]


def train_tiny():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False, special_tokens=BASE_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([t for t in TEXTS if t] * 3, trainer=trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False),
                            AddedToken("[SEP]", rstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("word", single_word=True, normalized=True),
                    AddedToken("  ", normalized=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    return json.loads(tok.to_str())


def train_sentencepiece_vocab(vocab_size):
    """A SentencePiece-style BPE vocabulary and its merges: pieces with "▁" word starts, trained on
    the text set with a small alphabet (characters outside it take the byte fallback)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, limit_alphabet=90)
    tok.train_from_iterator([t for t in TEXTS + SP_TEXTS if t] * 3, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    pieces = sorted(model["vocab"], key=model["vocab"].get)
    return pieces, model["merges"]


def sentencepiece_style(pieces, merges, leading, added, normalizer, pre_tokenizer, decoder,
                        bos):
    """A tokenizer.json laid out as transformers' SentencePiece converters write them: the leading
    special pieces, the 256 byte pieces, then the trained pieces."""
    vocab = {}
    for piece in leading + BYTE_PIECES + pieces:
        vocab.setdefault(piece, len(vocab))
    added_tokens = []
    for content, special, extra in added:
        vocab_id = vocab.get(content)
        added_tokens.append({"id": vocab_id if vocab_id is not None else len(vocab) + len(added_tokens),
                             "content": content, "single_word": extra.get("single_word", False),
                             "lstrip": False, "rstrip": False,
                             "normalized": extra.get("normalized", not special), "special": special})
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}}},
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


META = "\u2581"
LEGACY_NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": META},
    {"type": "Replace", "pattern": {"String": " "}, "content": META}]}
STRIP_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": META}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
CONTROL_TOKENS = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                  "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]


def sentencepiece_fixtures():
    """Llama-2-, Mistral v0.1-, Mistral v0.3- and Gemma-style tokenizer.json files."""
    pieces, merges = train_sentencepiece_vocab(900)
    small_pieces, small_merges = train_sentencepiece_vocab(600)
    llama_specials = [("<unk>", True, {}), ("<s>", True, {}), ("</s>", True, {})]
    return {
        # Llama-2 (legacy): "▁" prepended and spaces replaced by the normalizer, no pre-tokenizer,
        # a normalized non-special added token (its content is normalized too, as HF does).
        "llama2": sentencepiece_style(
            pieces, merges, ["<unk>", "<s>", "</s>"],
            llama_specials + [("word", False, {"single_word": True, "normalized": True})],
            LEGACY_NORMALIZER, None, STRIP_DECODER, "<s>"),
        # Mistral v0.1: the same legacy layout on its own vocabulary.
        "mistral-v0.1": sentencepiece_style(
            small_pieces, small_merges, ["<unk>", "<s>", "</s>"], llama_specials,
            LEGACY_NORMALIZER, None, STRIP_DECODER, "<s>"),
        # Mistral v0.3 (legacy=False): no normalizer, Metaspace prepending only at the input's
        # start, control tokens in the vocabulary after the three specials.
        "mistral-v0.3": sentencepiece_style(
            small_pieces, small_merges, ["<unk>", "<s>", "</s>"] + CONTROL_TOKENS,
            llama_specials + [(t, True, {}) for t in CONTROL_TOKENS], None,
            {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": False},
            STRIP_DECODER, "<s>"),
        # Gemma: spaces replaced by the normalizer, no prefix, a Split on " " (GemmaConverter),
        # turn markers as special added tokens, a decoder without Strip.
        "gemma": sentencepiece_style(
            pieces, merges, ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "\t", "\n"],
            [("<pad>", True, {}), ("<eos>", True, {}), ("<bos>", True, {}), ("<unk>", True, {}),
             ("<mask>", True, {}), ("<start_of_turn>", True, {}), ("<end_of_turn>", True, {})],
            {"type": "Replace", "pattern": {"String": " "}, "content": META},
            {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
             "invert": False},
            {"type": "Sequence", "decoders": STRIP_DECODER["decoders"][:3]}, "<bos>"),
    }


def split_variant(pattern, behavior, invert=False, literal=False):
    return {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {("String" if literal else "Regex"): pattern},
         "behavior": behavior, "invert": invert},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    ]}}


def variants(fixtures):
    qwen_added = fixtures["qwen2"]["added_tokens"]
    anthropic_added = fixtures["anthropic"]["added_tokens"]
    extra = [
        {"id": 65000, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False,
         "normalized": False, "special": True},
        {"id": 65001, "content": "[SEP]", "single_word": False, "lstrip": False, "rstrip": True,
         "normalized": False, "special": True},
        {"id": 65002, "content": "word", "single_word": True, "lstrip": False, "rstrip": False,
         "normalized": True, "special": False},
        {"id": 65003, "content": "\ufb01x", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": True, "special": False},
        {"id": 65004, "content": "<s>", "single_word": False, "lstrip": True, "rstrip": True,
         "normalized": True, "special": True},
    ]
    return {
        "qwen2-llama3": {
            "base": "qwen2",
            "about": "Llama-3 style on the Qwen2 vocab: no normalizer, the Llama-3 split regex "
                     "(\\p{N}{1,3}), ignore_merges, a BOS template after a ByteLevel post step",
            "patch": {
                "normalizer": None,
                "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
                     "invert": False},
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                     "use_regex": False}]},
                "model": {"ignore_merges": True},
                "post_processor": {"type": "Sequence", "processors": [
                    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                     "use_regex": True},
                    {"type": "TemplateProcessing",
                     "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                {"Sequence": {"id": "A", "type_id": 0}}],
                     "pair": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                              {"Sequence": {"id": "A", "type_id": 0}},
                              {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}},
                              {"Sequence": {"id": "B", "type_id": 1}}],
                     "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643],
                                                          "tokens": ["<|endoftext|>"]}}}]},
            },
        },
        "anthropic-added": {
            "base": "anthropic",
            "about": "added tokens with lstrip / rstrip / single_word, NFKC-normalized added tokens "
                     "(\ufb01x matches 'fix'), ByteLevel add_prefix_space and offset trimming",
            "patch": {
                "added_tokens": anthropic_added + extra,
                "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True,
                                  "trim_offsets": True, "use_regex": True},
                "post_processor": {"type": "ByteLevel", "add_prefix_space": True,
                                   "trim_offsets": True, "use_regex": True},
            },
        },
        "qwen2-nfkc-specials": {
            "base": "qwen2",
            "about": "Qwen2 with NFKC in a normalizer Sequence and its special tokens lstrip/rstrip",
            "patch": {
                "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]},
                "added_tokens": [dict(t, lstrip=True, rstrip=True) for t in qwen_added],
            },
        },
        "mistral-v0.3-metaspace-decoder": {
            "base": "mistral-v0.3", "about": "the Metaspace decoder (first) instead of the chain",
            "patch": {"decoder": {"type": "Metaspace", "replacement": META,
                                  "prepend_scheme": "first", "split": False}}},
        "llama2-metaspace-split": {
            "base": "llama2", "about": "Metaspace always with split, no normalizer, legacy "
                                       "add_prefix_space spelling in the decoder",
            "patch": {"normalizer": None,
                      "pre_tokenizer": {"type": "Metaspace", "replacement": META,
                                        "prepend_scheme": "always", "split": True},
                      "decoder": {"type": "Metaspace", "replacement": META,
                                  "add_prefix_space": True}}},
        "llama2-metaspace-never": {
            "base": "llama2", "about": "Metaspace never (no prefix), its decoder keeps spaces",
            "patch": {"normalizer": None,
                      "pre_tokenizer": {"type": "Metaspace", "replacement": META,
                                        "prepend_scheme": "never", "split": False},
                      "decoder": {"type": "Metaspace", "replacement": META,
                                  "prepend_scheme": "never", "split": False}}},
        "llama2-unk-fused": {
            "base": "llama2", "about": "no byte fallback: unknown characters fuse into one <unk>",
            "patch": {"model": {"byte_fallback": False}}},
        "llama2-unk-unfused": {
            "base": "llama2", "about": "no byte fallback, fuse_unk off: one <unk> per character",
            "patch": {"model": {"byte_fallback": False, "fuse_unk": False}}},
        "gemma-regex-replace": {
            "base": "gemma", "about": "Replace by regex (runs of spaces to one \u2581) in the "
                                      "normalizer and the decoder",
            "patch": {"normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": " +"}, "content": META}]},
                "decoder": {"type": "Sequence", "decoders": [
                    {"type": "Replace", "pattern": {"Regex": "\u2581+"}, "content": " "},
                    {"type": "ByteFallback"}, {"type": "Fuse"}]}}},
        "tiny-split-removed": {"base": "tiny", "about": "Split \\s+ Removed",
                               "patch": split_variant(r"\s+", "Removed")},
        "tiny-split-merged-previous": {"base": "tiny", "about": "Split literal '-' MergedWithPrevious",
                                       "patch": split_variant("-", "MergedWithPrevious", literal=True)},
        "tiny-split-merged-next": {"base": "tiny", "about": "Split \\p{P} MergedWithNext",
                                   "patch": split_variant(r"\p{P}", "MergedWithNext")},
        "tiny-split-contiguous-invert": {"base": "tiny", "about": "Split \\p{L} Contiguous inverted",
                                         "patch": split_variant(r"\p{L}", "Contiguous", invert=True)},
        "tiny-split-removed-invert": {"base": "tiny", "about": "Split [\\p{L}\\p{N}]+ Removed inverted "
                                      "(keeps only letters and digits)",
                                      "patch": split_variant(r"[\p{L}\p{N}]+", "Removed", invert=True)},
    }


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch (what nlohmann::json::merge_patch does)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def byte_offsets(text, char_offsets):
    starts = [0]
    for ch in text:
        starts.append(starts[-1] + len(ch.encode("utf-8")))
    return [[starts[a], starts[b]] for a, b in char_offsets]


def expected_cases(tok, texts):
    cases = []
    for text in texts:
        plain = tok.encode(text, add_special_tokens=False)
        special = tok.encode(text, add_special_tokens=True)
        cases.append({
            "text": text,
            "ids": plain.ids,
            "offsets": byte_offsets(text, plain.offsets),
            "ids_special": special.ids,
            "offsets_special": byte_offsets(text, special.offsets),
            "decoded": tok.decode(plain.ids, skip_special_tokens=False),
            "decoded_special_skipped": tok.decode(special.ids, skip_special_tokens=True),
        })
    return cases


def write_json(path, value, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(value, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    os.makedirs(f"{ROOT}/expected", exist_ok=True)
    os.makedirs(f"{ROOT}/tiny", exist_ok=True)
    write_json(f"{ROOT}/texts.json", TEXTS)
    tiny = train_tiny()
    write_json(f"{ROOT}/tiny/tokenizer.json", tiny)

    fixtures = {name: json.load(open(f"{ROOT}/{name}/tokenizer.json", encoding="utf-8"))
                for name in REAL_FIXTURES}
    fixtures["tiny"] = tiny
    for name, config in sentencepiece_fixtures().items():
        os.makedirs(f"{ROOT}/{name}", exist_ok=True)
        write_json(f"{ROOT}/{name}/tokenizer.json", config)
        with open(f"{ROOT}/{name}/SOURCE.md", "w", encoding="utf-8") as f:
            f.write(f"# {name}: generated, not downloaded\n\n"
                    f"Written by `tools/make_tokenizer_fixtures.py` with HF `tokenizers` "
                    f"{tokenizers.__version__}: a BPE vocabulary trained on the fixture text set "
                    f"(`texts.json` and the script's SP_TEXTS), laid out as {name}'s converted "
                    f"`tokenizer.json` is (see `sentencepiece_fixtures` in the script for the "
                    f"normalizer, pre-tokenizer, model flags, added tokens and decoder). No "
                    f"weights or files of the real model are used.\n")
        fixtures[name] = config
    all_variants = variants(fixtures)
    write_json(f"{ROOT}/variants.json", all_variants)

    configs = dict(fixtures)
    for name, variant in all_variants.items():
        configs[name] = merge_patch(fixtures[variant["base"]], variant["patch"])
    outputs = [(name, name, TEXTS if name in REAL_FIXTURES + ["tiny"] or
                 all_variants.get(name, {}).get("base") in REAL_FIXTURES + ["tiny"]
                 else TEXTS + SP_TEXTS) for name in configs]
    outputs += [(name, f"{name}-unicode", normalization_texts()) for name in NORMALIZING]
    for name, stem, texts in outputs:
        tok = Tokenizer.from_str(json.dumps(configs[name]))
        write_json(f"{ROOT}/expected/{stem}.json", {
            "generator": "tools/make_tokenizer_fixtures.py",
            "tokenizers": tokenizers.__version__,
            "fixture": name,
            "note": "offsets are UTF-8 byte offsets (HF's char offsets converted)",
            "cases": expected_cases(tok, texts),
        }, compact=True)
        print(f"wrote {ROOT}/expected/{stem}.json")


if __name__ == "__main__":
    sys.exit(main())
