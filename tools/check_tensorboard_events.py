#!/usr/bin/env python3
"""Checks that TensorBoard itself reads tandem's event files, and prints their scalars.

For each event file (or every file of a directory whose name holds "tfevents"):
  1. reads the TFRecords with TensorBoard's own reader, which verifies both masked CRC32Cs;
  2. parses each record as a tensorboard.Event and checks that protobuf re-serializes it to the
     same bytes (tandem's hand encoding is the canonical one), and that the first record is
     file_version "brain.Event:2";
  3. loads the file with TensorBoard's EventAccumulator and prints every scalar as
     "tag step value".
With --expect-jsonl METRICS.jsonl, also asserts that the scalars are exactly the float32 values of
that metrics.jsonl (null there: a non-finite value here), no more and no fewer.

Needs only the `tensorboard` package (no TensorFlow), in a throwaway env:
  python3 -m venv /tmp/tbvenv && /tmp/tbvenv/bin/pip install tensorboard
  /tmp/tbvenv/bin/python tools/check_tensorboard_events.py tests/fixtures/metrics/events.golden \
      --expect-jsonl tests/fixtures/metrics/events.golden.jsonl
Exit code 0 when every check passes.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow


def event_files(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if "tfevents" in n)
        if not names:
            sys.exit(f"{path}: no event files (names holding 'tfevents')")
        return [os.path.join(path, n) for n in names]
    return [path]


def check_records(path):
    """Every record: CRCs verified by TensorBoard's reader, canonical protobuf bytes."""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    count = 0
    while True:
        try:
            reader.GetNext()
        except Exception as error:  # the stub raises errors.OutOfRangeError at the end
            if type(error).__name__ == "OutOfRangeError":
                break
            raise
        payload = reader.record()
        event = event_pb2.Event.FromString(payload)
        if event.SerializeToString() != payload:
            sys.exit(f"{path}: record {count} is not canonically encoded: {event}")
        if count == 0 and event.file_version != "brain.Event:2":
            sys.exit(f"{path}: first record is not file_version brain.Event:2: {event}")
        count += 1
    return count


def load_scalars(path):
    """{(tag, step): value} as EventAccumulator sees the file."""
    with tempfile.TemporaryDirectory() as scratch:
        if "tfevents" not in os.path.basename(path):  # the accumulator goes by the name
            shutil.copy(path, os.path.join(scratch, "events.out.tfevents.0.check"))
            path = scratch
        accumulator = event_accumulator.EventAccumulator(path, size_guidance={"scalars": 0})
        accumulator.Reload()
        return {
            (tag, scalar.step): scalar.value
            for tag in accumulator.Tags()["scalars"]
            for scalar in accumulator.Scalars(tag)
        }


def float32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


def expected_scalars(jsonl_path):
    expected = {}
    with open(jsonl_path) as file:
        for line in file:
            if not line.strip():
                continue
            record = json.loads(line)
            step = record.pop("step")
            for tag, value in record.items():
                expected[(tag, step)] = None if value is None else float32(value)
    return expected


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", help="an event file or a directory of them")
    parser.add_argument("--expect-jsonl", help="metrics.jsonl the scalars must equal")
    args = parser.parse_args()

    scalars = {}
    for path in event_files(args.path):
        records = check_records(path)
        print(f"{path}: {records} records, CRCs and encoding OK")
        scalars.update(load_scalars(path))
    for (tag, step), value in sorted(scalars.items(), key=lambda item: (item[0][1], item[0][0])):
        print(f"{tag} {step} {value!r}")

    if args.expect_jsonl:
        expected = expected_scalars(args.expect_jsonl)
        if set(expected) != set(scalars):
            sys.exit(f"scalars differ from {args.expect_jsonl}: missing "
                     f"{sorted(set(expected) - set(scalars))}, extra {sorted(set(scalars) - set(expected))}")
        for key, want in expected.items():
            got = scalars[key]
            if (want is None and math.isfinite(got)) or (want is not None and got != want):
                sys.exit(f"{key}: TensorBoard reads {got!r}, {args.expect_jsonl} says {want!r}")
        print(f"all {len(expected)} scalars match {args.expect_jsonl}")


if __name__ == "__main__":
    main()
