#!/usr/bin/env python3
"""Checks that W&B turns tandem's TensorBoard event files into the right run history, offline.

W&B reads event files only through wandb-core, the service behind `wandb.init(sync_tensorboard=
True)`: `wandb sync --sync-tensorboard DIR`, which imported existing files, was removed in wandb
0.30.0. wandb-core reads a file only when its name is `*tfevents.<time>.<hostname>` with this
machine's hostname and a <time> no earlier than the W&B run's start (so that a shared log
directory's older files are not taken for the run's), and it learns of a log directory when a
patched TensorBoard writer opens one. So, for each event file given (one file, such as
tests/fixtures/metrics/events.golden, or every event file of a RUN_DIR/tensorboard), this:
  1. starts an offline W&B run (WANDB_MODE=offline: nothing is sent anywhere) in a scratch folder,
     with wandb.tensorboard.patch(root_logdir=LOGDIR);
  2. copies the files into LOGDIR as events.out.tfevents.<now + i>.<hostname>, in their order,
     and opens a TensorBoard EventFileWriter there, which tells wandb-core to read LOGDIR;
  3. finishes the run and reads its transaction log (offline-run-*/run-*.wandb: LevelDB log
     records holding wandb_internal.proto Records), printing each history row W&B would upload:
     global_step (TensorBoard's step) and the scalars;
  4. with --expect-jsonl METRICS.jsonl, asserts that the rows hold exactly that file's values as
     float32 (TensorBoard's simple_value), null there being a non-finite value here.
With --keep DIR the offline run (and the copies it read) stay in DIR for a look; uploading that
run with `wandb sync DIR/wandb/offline-run-*` needs a login and the network, and is not what this
checks.

W&B ignores TensorBoard's SessionLog START, which tandem writes to tell TensorBoard to forget
what an earlier attempt logged at steps >= the resume step: a resumed run's event files give W&B
those steps twice, once per attempt.

Needs wandb and tensorboard (for the writer that wandb patches), in a throwaway env:
  python3 -m venv VENV && VENV/bin/pip install wandb tensorboard
  VENV/bin/python tools/check_wandb_sync.py tests/fixtures/metrics/events.golden \\
      --expect-jsonl tests/fixtures/metrics/events.golden.jsonl
(tools/check_wandb_sync.sh does both.) Exit code 0 when every check passes.
"""
import argparse
import glob
import json
import math
import os
import shutil
import socket
import struct
import sys
import tempfile
import time

os.environ["WANDB_MODE"] = "offline"
os.environ.setdefault("WANDB_SILENT", "true")

import wandb  # noqa: E402
from tensorboard.summary.writer import event_file_writer  # noqa: E402
from wandb.proto import wandb_internal_pb2  # noqa: E402

from check_tensorboard_events import event_files  # noqa: E402  (this folder is on sys.path)

# wandb's transaction log: a 7-byte header (":W&B", magic 0xBEE1, version 0), then the LevelDB
# log format: 32 KiB blocks of records "crc32 (4) | length (2) | type (1) | data", a Record split
# across blocks as FIRST, MIDDLE..., LAST pieces.
HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_transaction_log(path):
    with open(path, "rb") as file:
        data = file.read()
    if not data.startswith(HEADER):
        sys.exit(f"{path}: not a W&B transaction log (header {data[:7]!r})")
    records, pieces, offset = [], None, len(HEADER)
    while offset + 7 <= len(data):
        room = BLOCK - offset % BLOCK
        if room < 7:  # a block's tail too short for a record header is padding
            offset += room
            continue
        _, length, kind = struct.unpack("<IHB", data[offset:offset + 7])
        if kind == 0 and length == 0:  # zero padding to the end of the block
            offset += room
            continue
        payload = data[offset + 7:offset + 7 + length]
        offset += 7 + length
        if kind == FULL:
            records.append(payload)
        elif kind == FIRST:
            pieces = payload
        elif kind in (MIDDLE, LAST) and pieces is not None:
            pieces += payload
            if kind == LAST:
                records.append(pieces)
                pieces = None
        else:
            sys.exit(f"{path}: unexpected record type {kind} at byte {offset}")
    parsed = []
    for payload in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        parsed.append(record)
    return parsed


def history_rows(records):
    """Each history record as {key: value}, keys joined with "/" as W&B shows them."""
    rows = []
    for record in records:
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            key = "/".join(item.nested_key) if item.nested_key else item.key
            row[key] = json.loads(item.value_json)  # NaN and Infinity too
        rows.append(row)
    return rows


def sync_offline(files, scratch):
    """The history rows of an offline W&B run that read `files` through wandb-core."""
    logdir = os.path.join(scratch, "tensorboard")
    os.makedirs(logdir)
    wandb.tensorboard.patch(root_logdir=logdir, save=False)
    run = wandb.init(project="tandem-check", dir=scratch, mode="offline")
    # File times no earlier than the run's start, in the files' order.
    first = int(math.ceil(time.time())) + 1
    host = socket.gethostname()
    for i, path in enumerate(files):
        shutil.copyfile(path, os.path.join(logdir, f"events.out.tfevents.{first + i}.{host}"))
    # The writer as patched (looked up now, after the patch) tells wandb-core about logdir.
    event_file_writer.EventFileWriter(logdir).close()
    run.finish()
    wandb.tensorboard.unpatch()
    logs = glob.glob(os.path.join(scratch, "wandb", "offline-run-*", "run-*.wandb"))
    if len(logs) != 1:
        sys.exit(f"{scratch}: expected one offline run, found {logs}")
    return logs[0], history_rows(read_transaction_log(logs[0]))


def float32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


def check_against_jsonl(rows, jsonl_path):
    """Rows and metrics.jsonl records pair up in order: one TensorBoard event per record."""
    with open(jsonl_path) as file:
        records = [json.loads(line) for line in file if line.strip()]
    if len(rows) != len(records):
        sys.exit(f"W&B has {len(rows)} history rows, {jsonl_path} {len(records)} records")
    count = 0
    for row, record in zip(rows, records):
        step = record.pop("step")
        if row.get("global_step") != step:
            sys.exit(f"row {row}: global_step is not {step}")
        scalars = {k: v for k, v in row.items() if not k.startswith("_") and k != "global_step"}
        if set(scalars) != set(record):
            sys.exit(f"step {step}: W&B has {sorted(scalars)}, {jsonl_path} {sorted(record)}")
        for name, wanted in record.items():
            got = scalars[name]
            if wanted is None:
                if math.isfinite(got):
                    sys.exit(f"{name} step {step}: W&B has {got!r}, {jsonl_path} says null")
            elif float32(got) != float32(wanted):
                sys.exit(f"{name} step {step}: W&B has {got!r}, {jsonl_path} says {wanted!r}")
            count += 1
    print(f"all {count} scalars of {len(rows)} rows match {jsonl_path} (as float32)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", help="an event file or a directory of them (RUN_DIR/tensorboard)")
    parser.add_argument("--expect-jsonl", help="metrics.jsonl the history must equal")
    parser.add_argument("--keep", help="leave the offline W&B run in this directory")
    args = parser.parse_args()

    files = event_files(args.path)
    if args.keep and os.path.exists(args.keep) and os.listdir(args.keep):
        sys.exit(f"{args.keep}: not empty (--keep wants a new or empty directory)")
    scratch = args.keep or tempfile.mkdtemp(prefix="tandem-wandb-")
    try:
        log, rows = sync_offline(files, os.path.abspath(scratch))
        print(f"{args.path}: {len(files)} event file(s) read by wandb {wandb.__version__} "
              f"(offline) into {len(rows)} history rows")
        for row in rows:
            shown = {k: v for k, v in row.items() if k not in ("_runtime", "_timestamp")}
            print(json.dumps(shown, sort_keys=True))
        if args.expect_jsonl:
            check_against_jsonl(rows, args.expect_jsonl)
        if args.keep:
            print(f"offline run: {os.path.dirname(log)}")
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
