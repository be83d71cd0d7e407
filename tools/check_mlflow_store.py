#!/usr/bin/env python3
"""Checks that MLflow itself reads a tandem MLflow file store, and prints what it reads.

For a store (a tandem run's RUN_DIR/mlruns, a shared mlruns/, or tests/fixtures/mlflow/mlruns):
  1. copies it to a scratch folder and opens the copy with MLflow's own MlflowClient (a file:
     tracking URI): MLflow's FileStore makes .trash/ when it is missing, and the fixture's
     .gitkeep files (which only keep empty folders in git) stay out of the copy;
  2. lists every experiment and run as MLflow sees them, with status, times, params and tags, and
     prints every metric history as "key step value timestamp";
  3. logs the same params and metric lines (same timestamps) through MlflowClient into a second
     scratch store and checks that MLflow writes byte-for-byte the files tandem wrote.
With --expect-jsonl METRICS.jsonl, also asserts that the run (--run-id, or the only run) holds
exactly the values of that metrics.jsonl, step by step (null there: a non-finite value here), no
more metrics and no fewer; a name "a/b" may be stored as the key "a.b", and a name "a" as
"a.value" (train/mlflow_store.h says when). --expect-status FINISHED checks the run's status.

Needs MLflow's client only (mlflow-skinny has MlflowClient and the file store), in a throwaway
env: tools/check_mlflow_store.sh makes one and runs this. By hand:
  python3 -m venv VENV && VENV/bin/pip install mlflow-skinny
  VENV/bin/python tools/check_mlflow_store.py tests/fixtures/mlflow/mlruns \\
      --expect-jsonl tests/fixtures/mlflow/metrics.jsonl --expect-status FINISHED
Exit code 0 when every check passes.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

# MLflow 3 opens a file store only when asked to (it steers new users to a database).
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

import mlflow  # noqa: E402
from mlflow.entities import ViewType  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402


def copy_store(store, scratch):
    copy = os.path.join(scratch, "mlruns")
    shutil.copytree(store, copy, ignore=shutil.ignore_patterns(".gitkeep"))
    return copy


def file_uri(path):
    return "file:" + os.path.abspath(path)


def all_runs(client, experiment_id):
    return client.search_runs([experiment_id], run_view_type=ViewType.ALL, max_results=50000)


def describe(client):
    """Prints the store as MLflow reads it; returns {run_id: (run, {key: [Metric]})}."""
    runs = {}
    experiments = client.search_experiments(view_type=ViewType.ALL)
    for experiment in sorted(experiments, key=lambda e: int(e.experiment_id)):
        found = all_runs(client, experiment.experiment_id)
        print(f"experiment {experiment.experiment_id} {experiment.name!r} "
              f"({experiment.lifecycle_stage}): {len(found)} run(s)")
        for run in found:
            info = run.info
            print(f"  run {info.run_id} {info.run_name!r}: {info.status}, start {info.start_time}, "
                  f"end {info.end_time}, user {info.user_id}")
            for key, value in sorted(run.data.params.items()):
                print(f"    param {key} = {value!r}")
            for key, value in sorted(run.data.tags.items()):
                print(f"    tag {key} = {value!r}")
            histories = {}
            for key in sorted(run.data.metrics):
                histories[key] = client.get_metric_history(info.run_id, key)
                for metric in histories[key]:
                    print(f"    metric {key} {metric.step} {metric.value!r} {metric.timestamp}")
            runs[info.run_id] = (run, histories)
    return runs


def check_mlflow_writes_the_same(run, histories, store_copy, scratch):
    """Logs the run's params and metric lines again through MlflowClient; compares the files."""
    client = MlflowClient(tracking_uri=file_uri(os.path.join(scratch, "again")))
    again = client.create_run("0", run_name=run.info.run_name, start_time=run.info.start_time)
    for key, value in run.data.params.items():
        client.log_param(again.info.run_id, key, value)
    for key, metrics in histories.items():
        for metric in metrics:
            client.log_metric(again.info.run_id, key, metric.value, timestamp=metric.timestamp,
                              step=metric.step)
    ours = os.path.join(store_copy, run.info.experiment_id, run.info.run_id)
    theirs = os.path.join(scratch, "again", "0", again.info.run_id)
    compared = 0
    for folder, keys in (("params", run.data.params), ("metrics", histories)):
        for key in keys:
            with open(os.path.join(ours, folder, key), "rb") as file:
                our_bytes = file.read()
            with open(os.path.join(theirs, folder, key), "rb") as file:
                their_bytes = file.read()
            if our_bytes != their_bytes:
                sys.exit(f"{folder}/{key}: tandem wrote {our_bytes!r}, MLflow writes {their_bytes!r}")
            compared += 1
    print(f"run {run.info.run_id}: MLflow {mlflow.__version__} writes the same bytes for all "
          f"{compared} param and metric files")


def read_jsonl(path):
    """{name: [(step, value or None)]} in file order."""
    expected = {}
    with open(path) as file:
        for line in file:
            if not line.strip():
                continue
            record = json.loads(line)
            step = record.pop("step")
            for name, value in record.items():
                expected.setdefault(name, []).append((step, value))
    return expected


def mlflow_key_of(name, keys):
    """The key tandem stored `name` under (train/mlflow_store.h: mlflow_metric_key)."""
    candidates = [name, name.replace("/", "."), name + ".value"]
    for candidate in candidates:
        if candidate in keys:
            return candidate
    sys.exit(f"metric {name!r}: none of the keys {candidates} is in the run")


def check_against_jsonl(histories, jsonl_path):
    expected = read_jsonl(jsonl_path)
    keys = {mlflow_key_of(name, histories): name for name in expected}
    if len(keys) != len(expected):
        sys.exit(f"two names of {jsonl_path} meet at one key: {keys}")
    extra = sorted(set(histories) - set(keys))
    if extra:
        sys.exit(f"metrics not in {jsonl_path}: {extra}")
    count = 0
    for key, name in sorted(keys.items()):
        got = [(metric.step, metric.value) for metric in histories[key]]
        want = expected[name]
        if [step for step, _ in got] != [step for step, _ in want]:
            sys.exit(f"{key}: steps {[s for s, _ in got]}, {jsonl_path} says {[s for s, _ in want]}")
        for (step, value), (_, wanted) in zip(got, want):
            if (wanted is None and math.isfinite(value)) or (wanted is not None and value != wanted):
                sys.exit(f"{key} step {step}: MLflow reads {value!r}, {jsonl_path} says {wanted!r}")
            count += 1
        if key != name:
            print(f"metric {name!r} is the MLflow key {key!r}")
    print(f"all {count} values of {len(keys)} metrics match {jsonl_path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("store", help="an MLflow file store (the mlruns/ folder)")
    parser.add_argument("--expect-jsonl", help="metrics.jsonl the run's metrics must equal")
    parser.add_argument("--expect-status", help="the run's status, e.g. FINISHED")
    parser.add_argument("--run-id", help="the run to check (default: the only run)")
    args = parser.parse_args()
    if not os.path.isdir(args.store):
        sys.exit(f"{args.store}: not a directory")

    with tempfile.TemporaryDirectory() as scratch:
        store_copy = copy_store(args.store, scratch)
        print(f"{args.store}: read by MLflow {mlflow.__version__} as {file_uri(args.store)}")
        runs = describe(MlflowClient(tracking_uri=file_uri(store_copy)))
        if not runs:
            sys.exit(f"{args.store}: MLflow finds no run")
        for run, histories in runs.values():
            check_mlflow_writes_the_same(run, histories, store_copy, scratch)

    if args.expect_jsonl or args.expect_status:
        if args.run_id:
            if args.run_id not in runs:
                sys.exit(f"no run {args.run_id} in {args.store}")
            run, histories = runs[args.run_id]
        elif len(runs) == 1:
            run, histories = next(iter(runs.values()))
        else:
            sys.exit(f"{len(runs)} runs in {args.store}: say which with --run-id")
        if args.expect_status and run.info.status != args.expect_status:
            sys.exit(f"run {run.info.run_id}: status {run.info.status}, expected {args.expect_status}")
        if args.expect_jsonl:
            check_against_jsonl(histories, args.expect_jsonl)


if __name__ == "__main__":
    main()
