#!/usr/bin/env python3
"""Build the demo data set under data/demo/ from Jane Austen's six novels.

Source: the Debian package r-cran-janeaustenr 1.0.0-1 (CRAN package janeaustenr 1.0.0, MIT,
Julia Silge; the novels themselves are public domain, texts from Project Gutenberg with the
Gutenberg header and licence already removed upstream). See data/demo/SOURCE.md.

Steps (deterministic: same .deb in, same bytes out):
  1. get the .deb (`apt-get download r-cran-janeaustenr=1.0.0-1` into a temporary folder, or
     --deb PATH), check its SHA-256, read data/Rdata.rdb + .rdx out of it in Python (ar + tar,
     then R's serialization format: each novel is a character vector, one element per line);
  2. clean: keep the text from the first chapter heading to "THE END"/"FINIS", drop chapter and
     volume headings, editorial notes in [brackets], footnotes and scene-break asterisks, remove
     the _underscore_ italics, unwrap each paragraph onto one line;
  3. split each chapter into documents of about 200-800 words (whole paragraphs; a paragraph
     over 800 words is cut at sentence ends); every 50th document is held out;
  4. write corpus.jsonl / heldout.jsonl ({"text"}), chat.jsonl / chat_heldout.jsonl (the
     conversations format: a user turn asks to continue the opening sentence(s) of a passage,
     the assistant turn is the rest of the passage);
  5. train a byte-level BPE (vocab 4096 with the Llama-3 special tokens at the top ids, as in
     Llama 3) on corpus.jsonl with HF `tokenizers`, write tokenizer/;
  6. print statistics, then check the tokenizer in transformers (load, round trip, chat render).

Run from the repository root:
    .venv-tools/bin/python tools/make_demo_data.py [--deb PATH] [--out data/demo] [--no-check]
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import random
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

PACKAGE = "r-cran-janeaustenr"
VERSION = "1.0.0-1"
DEB_SHA256 = "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"
RDATA = "./usr/lib/R/site-library/janeaustenr/data/Rdata"

# Publication order; (R object name, title).
BOOKS = [
    ("sensesensibility", "Sense and Sensibility"),
    ("prideprejudice", "Pride and Prejudice"),
    ("mansfieldpark", "Mansfield Park"),
    ("emma", "Emma"),
    ("northangerabbey", "Northanger Abbey"),
    ("persuasion", "Persuasion"),
]

HELDOUT_EVERY = 50        # document i is held out when i % 50 == HELDOUT_OFFSET (~2%)
HELDOUT_OFFSET = 25
DOC_MIN_WORDS = 200
DOC_TARGET_WORDS = 350    # close a document once it reaches this many words
DOC_MAX_WORDS = 800
CHAT_COUNT = 2048         # training conversations
CHAT_EVAL_COUNT = 64      # held-out prompts
SEED = 20240517

VOCAB_SIZE = 4096
# Llama 3's layout: the specials take the top ids, in Llama 3.0's order (offsets 0..12 above
# the regular vocabulary, exactly as 128000..128012 in Meta-Llama-3).
SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>",
    "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
    "<|start_header_id|>", "<|end_header_id|>",
    "<|reserved_special_token_4|>", "<|eot_id|>",
    "<|reserved_special_token_5|>", "<|reserved_special_token_6|>",
    "<|reserved_special_token_7|>",
]
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# chat_template of meta-llama/Meta-Llama-3-8B-Instruct (the one tandem's llama3 template renders).
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

PROMPTS = [
    "Continue the story: {prefix}",
    "Continue this passage from {title} by Jane Austen:\n\n{prefix}",
    "Here is the opening of a passage from {title}. Continue it in the same style.\n\n{prefix}",
    "What comes next?\n\n{prefix}",
]


# ----------------------------------------------------------------------------------------------
# 1. The package and R's serialization format
# ----------------------------------------------------------------------------------------------

def fetch_deb(path):
    if path:
        with open(path, "rb") as f:
            data = f.read()
    else:
        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o777)  # apt's sandbox user (_apt) writes the download here
            subprocess.run(["apt-get", "download", f"{PACKAGE}={VERSION}"], cwd=tmp, check=True,
                           stdout=subprocess.DEVNULL)
            [name] = os.listdir(tmp)
            with open(os.path.join(tmp, name), "rb") as f:
                data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != DEB_SHA256:
        sys.exit(f"{PACKAGE} {VERSION}: sha256 {digest} != expected {DEB_SHA256}")
    return data


def deb_members(deb):
    """Files of the .deb's data.tar.* as {path: bytes} (ar archive, then tar)."""
    assert deb[:8] == b"!<arch>\n", "not an ar archive"
    pos, out = 8, {}
    while pos < len(deb):
        header = deb[pos:pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58])
        body = deb[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                for member in tar.getmembers():
                    if member.isfile():
                        out[member.name] = tar.extractfile(member).read()
    return out


class RUnserializer:
    """The subset of R's XDR serialization (versions 2 and 3) that lazy-load data needs."""

    def __init__(self, data):
        self.data, self.pos, self.refs = data, 0, []
        if self.raw(2) != b"X\n":
            raise ValueError("not an XDR R serialization")
        version = self.int()
        self.int(), self.int()  # writer's R version, minimal R version
        if version == 3:
            self.raw(self.int())  # native encoding

    def int(self):
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def raw(self, n):
        value = self.data[self.pos:self.pos + n]
        self.pos += n
        return value

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in (254, 242, 253, 241, 247, 251, 252):  # NULL, environments, markers
            return None
        if kind == 255:  # reference to an earlier symbol
            index = flags >> 8
            return self.refs[(index or self.int()) - 1]
        if kind == 1:  # SYMSXP
            symbol = ("symbol", self.item())
            self.refs.append(symbol)
            return symbol
        if kind == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None  # NA_character_
            levels = flags >> 12
            return self.raw(n).decode("latin-1" if levels & (1 << 2) else "utf-8")
        if kind == 2:  # pairlist (attributes)
            if has_attr:
                self.item()
            tag = self.item() if has_tag else None
            car, cdr = self.item(), self.item()
            return [(tag[1] if tag else None, car)] + (cdr or [])
        if kind in (16, 19, 20):  # character vector, list, expression
            value = [self.item() for _ in range(self.int())]
        elif kind in (10, 13):  # logical, integer
            n = self.int()
            value = list(struct.unpack_from(f">{n}i", self.data, self.pos))
            self.pos += 4 * n
        elif kind == 14:  # double
            n = self.int()
            value = list(struct.unpack_from(f">{n}d", self.data, self.pos))
            self.pos += 8 * n
        else:
            raise ValueError(f"R SEXP type {kind} not handled (offset {self.pos})")
        if has_attr:
            attributes = dict(self.item())
            if kind == 19 and "names" in attributes:
                return dict(zip(attributes["names"], value))
        return value


def read_novels(deb):
    files = deb_members(deb)
    index = RUnserializer(gzip.decompress(files[RDATA + ".rdx"])).item()
    rdb = files[RDATA + ".rdb"]
    novels = {}
    for name, (offset, length) in index["variables"].items():
        blob = rdb[offset:offset + length]
        (size,) = struct.unpack(">i", blob[:4])
        raw = zlib.decompress(blob[4:])
        assert len(raw) == size
        novels[name] = [line or "" for line in RUnserializer(raw).item()]
    return novels


# ----------------------------------------------------------------------------------------------
# 2./3. Cleaning and documents
# ----------------------------------------------------------------------------------------------

HEADING = re.compile(r"^(CHAPTER|Chapter|VOLUME|Volume)\s+[0-9IVXLC]+\.?$")
THE_END = re.compile(r"^(THE END|FINIS|Finis)$")
ABBREVIATIONS = ("Mr.", "Mrs.", "Dr.", "St.", "Esq.", "Messrs.", "Col.", "Capt.", "No.", "Vol.")


def paragraphs_of(lines):
    out, current = [], []
    for line in lines + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            out.append(current)
            current = []
    return out


def clean_paragraph(lines):
    text = " ".join(lines)
    text = text.replace("_", "").replace("*", "")
    return re.sub(r"\s+", " ", text).strip()


def chapters_of(lines):
    """[[paragraph, ...], ...]: chapters of clean one-line paragraphs."""
    chapters, current, started = [], None, False
    for para in paragraphs_of(lines):
        first = para[0]
        if len(para) == 1 and HEADING.match(first):
            started = True
            if first.upper().startswith("CHAPTER"):
                current = []
                chapters.append(current)
            continue
        if not started:
            continue  # title page, the Northanger Abbey advertisement
        if len(para) == 1 and THE_END.match(first):
            break
        if first == "A NOTE ON THE TEXT" or first.startswith("*Vide"):
            break  # Northanger Abbey's editorial note and footnote, at the very end
        text = clean_paragraph(para)
        if text.startswith("[") and text.endswith("]"):
            continue  # editorial notes: "[End volume one of this edition. ...]"
        if not re.search(r"[A-Za-z0-9]", text):
            continue  # scene breaks: "* * * * *"
        current.append(text)
    return [c for c in chapters if c]


def words(text):
    return len(text.split())


SENTENCE_END = re.compile(r"(?<=[.!?])[\"')]*\s+(?=[\"'(]*[A-Z])")


def sentences_of(paragraph):
    """Split a paragraph after . ! ? (and closing quotes) followed by a capital, not after
    a title such as "Mr."."""
    out, start = [], 0
    for match in SENTENCE_END.finditer(paragraph):
        end = match.start()
        # keep closing quotes with the sentence
        while end < len(paragraph) and paragraph[end] in "\"')":
            end += 1
        candidate = paragraph[start:end]
        if candidate.split()[-1].endswith(ABBREVIATIONS) or len(candidate.split()[-1]) == 2 and \
                candidate.split()[-1][0].isupper():  # "Mr." or an initial "A."
            continue
        out.append(candidate.strip())
        start = match.end()
    tail = paragraph[start:].strip()
    if tail:
        out.append(tail)
    return out


def split_long(paragraph):
    """A paragraph over DOC_MAX_WORDS as pieces of at most DOC_MAX_WORDS at sentence ends."""
    if words(paragraph) <= DOC_MAX_WORDS:
        return [paragraph]
    pieces, current = [], []
    for sentence in sentences_of(paragraph):
        if current and words(" ".join(current + [sentence])) > DOC_TARGET_WORDS:
            pieces.append(" ".join(current))
            current = []
        current.append(sentence)
    if current:
        pieces.append(" ".join(current))
    return pieces


def documents_of(chapter):
    """Greedy groups of whole paragraphs: close at DOC_TARGET_WORDS, never pass DOC_MAX_WORDS;
    a chapter's short remainder joins the previous group when that fits."""
    paras = [p for para in chapter for p in split_long(para)]
    docs, current = [], []
    for para in paras:
        if current and words("\n\n".join(current + [para])) > DOC_MAX_WORDS:
            docs.append(current)
            current = []
        current.append(para)
        if words("\n\n".join(current)) >= DOC_TARGET_WORDS:
            docs.append(current)
            current = []
    if current:
        if docs and words("\n\n".join(current)) < DOC_MIN_WORDS and \
                words("\n\n".join(docs[-1] + current)) <= DOC_MAX_WORDS:
            docs[-1] += current
        else:
            docs.append(current)
    return docs


# ----------------------------------------------------------------------------------------------
# 4. Chats
# ----------------------------------------------------------------------------------------------

def passages_of(doc, rng):
    """Non-overlapping (prefix, continuation) pairs from one document (list of paragraphs).
    Each passage starts at a paragraph start; the prefix is its first sentence(s) (at least 12
    words, at most 3 sentences); the continuation runs on to the next sentence end after
    a drawn length of 50-100 words, across paragraph breaks."""
    units = []  # (sentence, starts_paragraph)
    for para in doc:
        for i, sentence in enumerate(sentences_of(para)):
            units.append((sentence, i == 0))
    out, i = [], 0
    while i < len(units):
        if not units[i][1]:
            i += 1
            continue
        j, prefix = i, []
        while j < len(units) and (j == i or not units[j][1]) and len(prefix) < 3 and \
                words(" ".join(prefix)) < 12:
            prefix.append(units[j][0])
            j += 1
        target = rng.randint(50, 100)
        cont, k = "", j
        while k < len(units) and words(cont) < target:
            sentence, new_para = units[k]
            cont = sentence if not cont else cont + ("\n\n" if new_para else " ") + sentence
            k += 1
        if words(" ".join(prefix)) > 70 or words(cont) < 30 or words(cont) > 200:
            i = k if k > i else i + 1
            continue
        out.append((" ".join(prefix), cont))
        i = k
    return out


def conversation(cid, title, prefix, continuation, variant):
    return {"id": cid, "conversations": [
        {"role": "user", "content": PROMPTS[variant].format(title=title, prefix=prefix)},
        {"role": "assistant", "content": continuation},
    ]}


# ----------------------------------------------------------------------------------------------
# 5. Tokenizer
# ----------------------------------------------------------------------------------------------

def train_tokenizer(texts):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - len(SPECIALS), min_frequency=2,
                                  show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.get_vocab_size() == VOCAB_SIZE - len(SPECIALS), tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    assert tok.get_vocab_size() == VOCAB_SIZE
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
            special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def tokenizer_config(tok):
    return {
        "added_tokens_decoder": {
            str(tok.token_to_id(s)): {"content": s, "lstrip": False, "normalized": False,
                                      "rstrip": False, "single_word": False, "special": True}
            for s in SPECIALS},
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>",
        "chat_template": LLAMA3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 2048,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------

def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def check(out_dir, tok, heldout_texts, chats_eval):
    from transformers import PreTrainedTokenizerFast

    tok_dir = os.path.join(out_dir, "tokenizer")
    hf = PreTrainedTokenizerFast(tokenizer_file=os.path.join(tok_dir, "tokenizer.json"))
    for text in heldout_texts + ["", "Mr. Darcy's £10,000 a year!\n\n\"Indeed,\" said she."]:
        ids = hf(text)["input_ids"]
        assert ids[:1] == [tok.token_to_id("<|begin_of_text|>")], ids[:3]
        assert hf.decode(ids, skip_special_tokens=True) == text
        assert hf.decode(hf(text, add_special_tokens=False)["input_ids"]) == text
        assert ids == tok.encode(text).ids
    # The saved directory (tokenizer.json + tokenizer_config.json) through AutoTokenizer's path.
    full = PreTrainedTokenizerFast.from_pretrained(tok_dir)
    assert full.bos_token == "<|begin_of_text|>" and full.eos_token == "<|end_of_text|>"
    messages = chats_eval[0]["conversations"]
    rendered = full.apply_chat_template(messages, tokenize=False)
    expected = "<|begin_of_text|>" + "".join(
        f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>"
        for m in messages)
    assert rendered == expected, rendered[:300]
    prompt = full.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    ids = full(rendered, add_special_tokens=False)["input_ids"]
    for s in ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]:
        assert tok.token_to_id(s) in ids, s
    assert full.decode(ids) == rendered
    print(f"check: transformers {__import__('transformers').__version__} loads the tokenizer, "
          f"round-trips {len(heldout_texts) + 2} texts, renders Llama-3 chats "
          f"({len(ids)} tokens for {chats_eval[0]['id']})")
    print("example chat render:\n" + rendered[:400].replace("\n", "\\n") + " ...")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deb", help=f"a downloaded {PACKAGE}_{VERSION}_all.deb")
    parser.add_argument("--out", default="data/demo")
    parser.add_argument("--no-check", action="store_true", help="skip the transformers checks")
    args = parser.parse_args()

    novels = read_novels(fetch_deb(args.deb))
    assert sorted(novels) == sorted(name for name, _ in BOOKS), sorted(novels)

    docs = []  # (title, [paragraph, ...])
    for name, title in BOOKS:
        for chapter in chapters_of(novels[name]):
            docs += [(title, d) for d in documents_of(chapter)]
    heldout_ids = {i for i in range(len(docs)) if i % HELDOUT_EVERY == HELDOUT_OFFSET}
    train = [d for i, d in enumerate(docs) if i not in heldout_ids]
    heldout = [d for i, d in enumerate(docs) if i in heldout_ids]

    rng = random.Random(SEED)
    train_passages = [(title, p) for title, doc in train for p in passages_of(doc, rng)]
    chosen = sorted(rng.sample(range(len(train_passages)), min(CHAT_COUNT, len(train_passages))))
    chats = []
    for n, i in enumerate(chosen):
        title, (prefix, continuation) = train_passages[i]
        chats.append(conversation(f"austen-{n:05d}", title, prefix, continuation,
                                  rng.randrange(len(PROMPTS))))
    per_doc = [[(title, p) for p in passages_of(doc, rng)] for title, doc in heldout]
    eval_passages = []  # round robin over the held-out documents
    for rank in range(max(len(p) for p in per_doc)):
        eval_passages += [p[rank] for p in per_doc if rank < len(p)]
    assert len(eval_passages) >= CHAT_EVAL_COUNT, len(eval_passages)
    chats_eval = [conversation(f"austen-heldout-{n:03d}", title, *pair, n % len(PROMPTS))
                  for n, (title, pair) in enumerate(eval_passages[:CHAT_EVAL_COUNT])]

    os.makedirs(os.path.join(args.out, "tokenizer"), exist_ok=True)
    corpus_texts = ["\n\n".join(d) for _, d in train]
    heldout_texts = ["\n\n".join(d) for _, d in heldout]
    write_jsonl(os.path.join(args.out, "corpus.jsonl"), [{"text": t} for t in corpus_texts])
    write_jsonl(os.path.join(args.out, "heldout.jsonl"), [{"text": t} for t in heldout_texts])
    write_jsonl(os.path.join(args.out, "chat.jsonl"), chats)
    write_jsonl(os.path.join(args.out, "chat_heldout.jsonl"), chats_eval)

    tok = train_tokenizer(corpus_texts)
    tok.save(os.path.join(args.out, "tokenizer", "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer", "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(tok), f, indent=2, ensure_ascii=False)
        f.write("\n")

    # Statistics
    def token_counts(texts):
        return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]

    print(f"source: {PACKAGE} {VERSION} (sha256 {DEB_SHA256[:16]}...), {len(BOOKS)} novels")
    total_bytes = sum(len(t.encode()) for t in corpus_texts)
    for label, texts in (("corpus", corpus_texts), ("heldout", heldout_texts)):
        n_words = [words(t) for t in texts]
        n_tokens = token_counts(texts)
        n_bytes = sum(len(t.encode()) for t in texts)
        print(f"{label:8s}: {len(texts):5d} documents, {sum(n_words):7d} words "
              f"(per doc min/mean/max {min(n_words)}/{sum(n_words) / len(texts):.0f}/"
              f"{max(n_words)}), {sum(n_tokens):7d} tokens, tokens/doc mean "
              f"{sum(n_tokens) / len(texts):.0f} p95 {percentile(n_tokens, 95)} max "
              f"{max(n_tokens)}, {n_bytes / sum(n_tokens):.2f} bytes/token, "
              f"{sum(n_tokens) / sum(n_words):.2f} tokens/word")
    for label, rows in (("chat", chats), ("chat_heldout", chats_eval)):
        user = token_counts([r["conversations"][0]["content"] for r in rows])
        assistant = token_counts([r["conversations"][1]["content"] for r in rows])
        print(f"{label:8s}: {len(rows):5d} conversations, user tokens mean "
              f"{sum(user) / len(rows):.0f} p95 {percentile(user, 95)}, assistant tokens mean "
              f"{sum(assistant) / len(rows):.0f} p95 {percentile(assistant, 95)} max "
              f"{max(assistant)}")
    print(f"tokenizer: vocab {tok.get_vocab_size()}, specials "
          + ", ".join(f"{s}={tok.token_to_id(s)}" for s in SPECIALS))
    print(f"corpus bytes {total_bytes}")
    if not args.no_check:
        check(args.out, tok, heldout_texts, chats_eval)


if __name__ == "__main__":
    main()
