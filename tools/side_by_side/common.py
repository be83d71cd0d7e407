"""What the TRL / HF Trainer side of bench/bench_vs_trl.sh shares: the records tandem trained on,
tokenized as tandem tokenizes them, grouped into tandem's optimizer steps, checked against the
run's metrics.jsonl, and a Trainer callback that times each optimizer step.

tandem's steps are reproduced from its definitions, not read from the binary: the sampler's epoch
permutation (tools/make_sampler_fixtures.py, the Python reference its tests use), then
`data.packing` as train/training_data.cpp and data/packing.cpp apply it:
  - packed, padded: the longest run of records in sampler order whose documents fit one
    micro-batch (first fit, resp. one document per row), whole records only;
  - best_fit: documents longer than a row cut into row-sized records; a pool topped up to
    `packing_lookahead` micro-batches' worth of tokens; the oldest record, then the others longest
    first, each taken when it still fits (each piece into the open row with the least room that
    holds it).
Every step so reproduced is compared with the run's own metrics (documents and real tokens per
step; pairs for DPO): any difference stops the benchmark, so the two sides never time different
batches unnoticed.
"""
import argparse
import json
import os
import resource
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from make_sampler_fixtures import epoch_permutation  # noqa: E402  (tandem's sampler, in Python)


def set_threads(threads):
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)


def parse_arguments(description, add_own=None):
    """The options every side takes (and a side's own, added by add_own(parser)), parsed; sets
    torch's threads to --threads."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tandem-run", required=True, help="the tandem run directory to mirror")
    if add_own:
        add_own(parser)
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out of the timing")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tandem", help="the tandem binary: check every document's ids against its own")
    parser.add_argument("--out", required=True, help="JSON result file")
    args = parser.parse_args()
    set_threads(args.threads)
    return args


def resolved_config(run_dir):
    """The resolved config (defaults included) tandem stored with the run's last checkpoint."""
    with open(os.path.join(run_dir, "latest")) as latest:
        checkpoint = latest.read().strip()
    with open(os.path.join(run_dir, checkpoint, "config.yaml")) as file:
        return yaml.safe_load(file)


def read_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as file:
        return [json.loads(line) for line in file if line.strip()]


# ---- the llama3 chat layout, as tandem's built-in `llama3` renders it (docs/data.md) -----------

BOS, HEADER, END_HEADER, EOT = "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"


def as_messages(value, role):
    return [{"role": role, "content": value}] if isinstance(value, str) else value


def render_llama3(messages, add_generation_prompt=False):
    text = BOS + "".join(f"{HEADER}{m['role']}{END_HEADER}\n\n{m['content'].strip()}{EOT}" for m in messages)
    return text + (f"{HEADER}assistant{END_HEADER}\n\n" if add_generation_prompt else "")


def preference_documents(record, tokenizer):
    """(prompt ids, chosen side ids, rejected side ids) of one preference record: each side is the
    prompt and its completion rendered as one conversation, as tandem renders it."""
    prompt = as_messages(record["prompt"], "user")
    prompt_ids = tokenizer(render_llama3(prompt, True), add_special_tokens=False)["input_ids"]
    sides = []
    for key in ("chosen", "rejected"):
        ids = tokenizer(render_llama3(prompt + as_messages(record[key], "assistant")),
                        add_special_tokens=False)["input_ids"]
        assert ids[: len(prompt_ids)] == prompt_ids, f"{record.get('id')}: prompt is not a prefix of {key}"
        sides.append(ids)
    return prompt_ids, sides[0], sides[1]


def text_document(record, tokenizer):
    """A `text` record's ids: the tokenizer's special tokens included (the demo's: a leading BOS)."""
    return tokenizer(record["text"])["input_ids"]


def read_jsonl(path):
    with open(path) as file:
        return [json.loads(line) for line in file if line.strip()]


def tandem_documents(tandem, data):
    """Every document as `tandem data inspect --ids` tokenizes it: {(record, side): (ids, loss
    mask)}, side "chosen"/"rejected" for preference records, None otherwise."""
    import re
    import subprocess

    command = [tandem, "data", "inspect", "--data", data["path"], "--format", data["format"],
               "--tokenizer", data["tokenizer"], "--index", "0", "--count", "1000000000", "--ids"]
    if data["format"] in ("conversations", "preference"):
        command += ["--chat-template", data["chat_template"]]
    text = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    documents, current = {}, None
    for line in text.splitlines():
        header = re.match(r"--- record (\d+) (chosen|rejected)?", line)
        if header:
            current = (int(header[1]), header[2])
            documents[current] = ([], [])
            continue
        token = re.match(r"\s+\d+\s+(\d+)\s+([01])\s", line)
        if token and current is not None:
            documents[current][0].append(int(token[1]))
            documents[current][1].append(int(token[2]))
    return documents


# ---- tandem's steps -----------------------------------------------------------------------------


def cut(length, seq_len, overlong):
    """A document's pieces (data/packing.cpp cut_document)."""
    if length <= seq_len:
        return [length]
    if overlong == "truncate":
        return [seq_len]
    if overlong == "split":
        return [min(seq_len, length - begin) for begin in range(0, length, seq_len)]
    raise ValueError(f"a document of {length} tokens exceeds seq_len {seq_len} (overlong: {overlong})")


def place(pieces, mode, seq_len, max_rows, free):
    """`free` (columns left per open row) after placing `pieces`, or None when one does not fit."""
    trial = list(free)
    for piece in pieces:
        row = -1
        if mode != "padded":
            for r, room in enumerate(trial):
                if room < piece:
                    continue
                if mode == "packed":
                    row = r
                    break
                if row < 0 or room < trial[row]:
                    row = r
        if row < 0:
            if max_rows and len(trial) >= max_rows:
                return None
            trial.append(seq_len)
            row = len(trial) - 1
        trial[row] -= piece
    return trial


class SamplerStream:
    """tandem's sampler on one rank: epoch e is epoch_permutation(records, seed, e)."""

    def __init__(self, records, seed):
        self.records, self.seed, self.epoch, self.offset = records, seed, 0, 0
        self.order = epoch_permutation(records, seed, 0)

    def _roll(self):
        if self.offset == self.records:
            self.epoch, self.offset = self.epoch + 1, 0
            self.order = epoch_permutation(self.records, self.seed, self.epoch)

    def next_epoch(self):
        """The epoch the next record is drawn in."""
        return self.epoch + 1 if self.offset == self.records else self.epoch

    def upcoming(self):
        """The records next() would return, without advancing this stream."""
        clone = SamplerStream.__new__(SamplerStream)
        clone.__dict__.update(self.__dict__)
        while True:
            yield clone.next()

    def next(self):
        self._roll()
        self.offset += 1
        return self.order[self.offset - 1]


def sampler_records(document_lengths, data, per_record):
    """tandem's sampler records (train/training_data.cpp plan_records): for preference data the
    pairs; for one-document records with `overlong: split`, a document longer than a row is cut
    into row-sized parts under best_fit, and one longer than a micro-batch into micro-batch-sized
    parts otherwise, each part a record of its own. Returns [(document, begin, end)] (end -1: the
    whole record) and each record's document lengths."""
    if per_record != 1:
        return ([(r, 0, -1) for r in range(len(document_lengths))],
                [list(lengths) for lengths in document_lengths])
    seq_len, capacity = int(data["seq_len"]), int(data["seq_len"]) * int(data["micro_batch_rows"])
    records, lengths = [], []
    for document, (length,) in enumerate(document_lengths):
        part = None
        if data["overlong"] == "split" and length > seq_len:
            if data["packing"] == "best_fit":
                part = seq_len
            elif len(cut(length, seq_len, "split")) > int(data["micro_batch_rows"]):
                part = capacity
        if part is None:
            records.append((document, 0, -1))
            lengths.append([length])
            continue
        for begin in range(0, length, part):
            records.append((document, begin, min(length, begin + part)))
            lengths.append([min(length, begin + part) - begin])
    return records, lengths


def plan_steps(lengths, data, steps, seed, micro_batches=1):
    """tandem's first `steps` optimizer steps: for each, the dataset records it trains on, in
    micro-batch order, and the token slots (padding included) of its micro-batches.
    `lengths[r]` lists record r's document lengths (two for a pair)."""
    mode, seq_len, rows = data["packing"], int(data["seq_len"]), int(data["micro_batch_rows"])
    overlong = data["overlong"]
    lookahead = int(data.get("packing_lookahead", 8))
    sampler = SamplerStream(len(lengths), seed)
    pending = []  # best_fit's pool: (record, epoch), oldest first

    def pieces_of(record):
        return [p for length in lengths[record] for p in cut(length, seq_len, overlong)]

    def fits_in_order(records, pack_mode):
        """How many leading records fit one micro-batch, placed document by document, and the
        columns left in each row they open."""
        free, taken = [], 0
        for record in records:
            trial = free
            for length in lengths[record]:
                trial = place(cut(length, seq_len, overlong), pack_mode, seq_len, rows, trial)
                if trial is None:
                    return taken, free
            free, taken = trial, taken + 1
        return taken, free

    def slots(free):
        """Token slots of the micro-batch: rows x seq_len, or x the longest row (padded)."""
        width = max(seq_len - f for f in free) if mode == "padded" else seq_len
        return len(free) * width

    def micro_batch():
        if mode in ("packed", "padded"):
            capacity, candidates, tokens = rows * seq_len, [], 0
            for _, record in zip(range(4 * len(lengths)), sampler.upcoming()):
                candidates.append(record)
                tokens += sum(lengths[record])
                if tokens > capacity:
                    break
            used, free = fits_in_order(candidates, mode)
            assert used > 0, "a record fits in no micro-batch"
            return [sampler.next() for _ in range(used)], slots(free)
        if mode != "best_fit":
            raise ValueError(f"unknown data.packing {mode}")
        wanted = lookahead * rows * seq_len
        tokens = sum(sum(lengths[r]) for r, _ in pending)
        while tokens < wanted:
            epoch = sampler.next_epoch()
            if pending and epoch != pending[0][1]:
                break
            pending.append((sampler.next(), epoch))
            tokens += sum(lengths[pending[-1][0]])
        # Tried in this order: the oldest, then the others longest first (oldest first among
        # equals); taken in the order they were placed.
        order = [0] + sorted(range(1, len(pending)), key=lambda i: -sum(lengths[pending[i][0]]))
        free, room, chosen = [], rows * seq_len, []
        for index in order:
            pieces = pieces_of(pending[index][0])
            if room <= 0:
                break
            if sum(pieces) > room:
                continue
            trial = place(pieces, "best_fit", seq_len, rows, free)
            if trial is None:
                continue
            free, room = trial, room - sum(pieces)
            chosen.append(index)
        assert chosen and chosen[0] == 0, "the pool's oldest record fits no micro-batch"
        records, taken = [pending[i][0] for i in chosen], set(chosen)
        pending[:] = [p for i, p in enumerate(pending) if i not in taken]
        used, free = fits_in_order(records, "best_fit")
        assert used == len(records)
        return records, slots(free)

    plan, step_slots = [], []
    for _ in range(steps):
        batches = [micro_batch() for _ in range(micro_batches)]
        plan.append([r for records, _ in batches for r in records])
        step_slots.append(sum(n for _, n in batches))
    return plan, step_slots


def check_against_tandem(plan, lengths, data, metrics, per_record):
    """Compares each reproduced step with tandem's metrics.jsonl; returns real tokens per step."""
    seq_len, overlong = int(data["seq_len"]), data["overlong"]
    tokens_per_step, previous_seen = [], 0
    for step, (records, row) in enumerate(zip(plan, metrics), start=1):
        pieces = [p for r in records for length in lengths[r] for p in cut(length, seq_len, overlong)]
        tokens = sum(pieces)
        tandem_tokens = round(row["tokens_seen"] - previous_seen)
        previous_seen = row["tokens_seen"]
        mismatch = []
        if len(pieces) != round(row["num_documents"]):
            mismatch.append(f"documents {len(pieces)} here, {row['num_documents']:.0f} in tandem's run")
        if tokens != tandem_tokens:
            mismatch.append(f"real tokens {tokens} here, {tandem_tokens} in tandem's run")
        if per_record == 2 and len(records) != round(row.get("pairs", -1)):
            mismatch.append(f"pairs {len(records)} here, {row.get('pairs')} in tandem's run")
        if mismatch:
            raise SystemExit(f"[side_by_side] step {step}: " + "; ".join(mismatch) +
                             " — tandem's batch selection changed; tools/side_by_side/common.py no longer"
                             " reproduces it, so the two sides would not train on the same batches")
        tokens_per_step.append(tokens)
    return tokens_per_step


# ---- timing --------------------------------------------------------------------------------------


def step_timer():
    """A TrainerCallback that stamps the end of every optimizer step (and the start of training),
    so step k's time covers fetching and collating its batch, forward, backward, the optimizer and
    the previous step's logging, as tandem's `time/step` covers drawing its batch through reading
    its metrics. Also keeps the logged losses."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.stamps, self.losses = [], []

        def on_train_begin(self, args, state, control, **kwargs):
            self.stamps = [time.perf_counter()]

        def on_step_end(self, args, state, control, **kwargs):
            self.stamps.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

        def step_seconds(self):
            return [b - a for a, b in zip(self.stamps, self.stamps[1:])]

    return StepTimer()


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def fixed_batches(trainer_class, batches, counted):
    """`trainer_class` drawing exactly `batches` (lists of dataset indices), one per optimizer
    step, in order, instead of its own shuffled fixed-size batches, through its own collator;
    appends each collated batch's (real tokens, token slots) to `counted`: its attention mask's
    sum and size."""
    from torch.utils.data import DataLoader

    class FixedBatches(trainer_class):
        def get_train_dataloader(self):
            def collate(examples):
                batch = self.data_collator(examples)
                counted.append((int(batch["attention_mask"].sum()), batch["attention_mask"].numel()))
                return batch

            loader = DataLoader(self.train_dataset, batch_sampler=batches, collate_fn=collate, num_workers=0)
            return self.accelerator.prepare(loader)

    FixedBatches.__name__ = f"FixedBatches{trainer_class.__name__}"
    return FixedBatches


def write_result(path, result):
    import torch
    import transformers

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    for name in ("trl", "accelerate", "datasets"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            pass
    result["versions"] = versions
    result["threads"] = torch.get_num_threads()
    with open(path, "w") as file:
        json.dump(result, file, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k not in ("losses", "step_seconds")}))


def timed_summary(seconds, tokens_per_step, counted, warmup):
    """The timed steps' figures; `counted` holds what the trainer collated, checked against
    tandem's real tokens per step."""
    real = [c[0] for c in counted[: len(tokens_per_step)]]
    if real != tokens_per_step:
        raise SystemExit(f"[side_by_side] the trainer's batches hold {real} real tokens, tandem's {tokens_per_step}")
    timed_seconds, timed_tokens = seconds[warmup:], tokens_per_step[warmup:]
    return {
        "steps_timed": len(timed_seconds),
        "slots_per_step": sum(c[1] for c in counted[warmup:len(tokens_per_step)]) / len(timed_seconds),
        "tokens_per_step": sum(timed_tokens) / len(timed_tokens),
        "tokens_per_s": sum(timed_tokens) / sum(timed_seconds),
        "step_seconds": seconds,
    }
