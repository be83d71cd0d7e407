"""TRL's DPOTrainer on the batches a tandem DPO run trained on (bench/bench_vs_trl.sh runs it).

    python tools/side_by_side/trl_dpo.py --tandem-run RUN_DIR --warmup 2 --out result.json

Reads tandem's resolved config from RUN_DIR (model, data, loss, optimizer, steps), reproduces its
steps' preference pairs (common.py; checked against RUN_DIR/metrics.jsonl) and trains the same
policy against the same frozen reference with TRL: sigmoid loss, the same β, learning rate,
AdamW betas/eps, clipping, no weight decay, fp32, max_length = tandem's seq_len with keep_start
truncation. TRL lays each pair out its own way: chosen and rejected as two rows, every row of the
batch padded to the longest. Times each optimizer step; real tokens exclude the padding.
"""
import os
import tempfile

import common


def main():
    args = common.parse_arguments(__doc__.splitlines()[0])

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    config = common.resolved_config(args.tandem_run)
    metrics = common.read_metrics(args.tandem_run)
    data, training, optimizer = config["data"], config["training"], config["optimizer"]
    assert config["loss"]["type"] == "sigmoid" and training["schedule"] == "constant"
    assert int(training.get("micro_batches", 1)) == 1 and int(training.get("docs_per_step", 0)) == 0
    steps = len(metrics)
    tokenizer = AutoTokenizer.from_pretrained(data["tokenizer"])

    # Every record's two documents as tandem tokenizes them, then tandem's steps.
    records = common.read_jsonl(data["path"])
    documents = [common.preference_documents(r, tokenizer) for r in records]
    lengths = [[len(chosen), len(rejected)] for _, chosen, rejected in documents]
    if args.tandem:
        theirs = common.tandem_documents(args.tandem, data)
        for r, (prompt, chosen, rejected) in enumerate(documents):
            for side, ids in (("chosen", chosen), ("rejected", rejected)):
                if theirs.get((r, side)) != (ids, [0] * len(prompt) + [1] * (len(ids) - len(prompt))):
                    raise SystemExit(f"[trl_dpo] record {r} {side}: ids or loss mask differ from tandem's")
    plan, tandem_slots = common.plan_steps(lengths, data, steps, int(training["seed"]))
    tokens_per_step = common.check_against_tandem(plan, lengths, data, metrics, per_record=2)

    # TRL's dataset: the steps' records in step order, conversational (TRL renders them with the
    # tokenizer's chat template); one batch per step.
    used = [r for step in plan for r in step]
    rows = [{"prompt": common.as_messages(records[r]["prompt"], "user"),
             "chosen": common.as_messages(records[r]["chosen"], "assistant"),
             "rejected": common.as_messages(records[r]["rejected"], "assistant")} for r in used]
    batches, start = [], 0
    for step in plan:
        batches.append(list(range(start, start + len(step))))
        start += len(step)

    dtype = {"fp32": torch.float32, "float32": torch.float32}[config["model"]["dtype"]]
    policy = AutoModelForCausalLM.from_pretrained(config["model"]["path"], dtype=dtype)
    reference = AutoModelForCausalLM.from_pretrained(config["reference"]["path"], dtype=dtype)
    seq_len = int(data["seq_len"])
    dpo_args = DPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-dpo-"), max_steps=steps, per_device_train_batch_size=1,
        learning_rate=float(training["lr"]), lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=float(optimizer["weight_decay"]), adam_beta1=float(optimizer["beta1"]),
        adam_beta2=float(optimizer["beta2"]), adam_epsilon=float(optimizer["eps"]),
        max_grad_norm=float(optimizer["max_grad_norm"]), beta=float(config["loss"]["beta"]),
        loss_type=["sigmoid"], max_length=seq_len, truncation_mode="keep_start",
        bf16=False, fp16=False, gradient_checkpointing=False, use_cpu=True, seed=int(training["seed"]),
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, remove_unused_columns=False)
    timer, counted = common.step_timer(), []  # (real tokens, slots) of each batch TRL collates
    trainer_class = common.fixed_batches(DPOTrainer, batches, counted)
    trainer = trainer_class(model=policy, ref_model=reference, args=dpo_args,
                            train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[timer])

    # TRL's tokenization must give tandem's ids (prompt + completion, each side).
    for i, r in enumerate(used):
        example = trainer.train_dataset[i]
        _, chosen, rejected = documents[r]
        if (example["prompt_ids"] + example["chosen_ids"] != chosen or
                example["prompt_ids"] + example["rejected_ids"] != rejected):
            raise SystemExit(f"[trl_dpo] record {records[r].get('id')}: TRL's token ids differ from tandem's")

    trainer.train()
    result = {"objective": "dpo", "side": "TRL DPOTrainer", "packing": "pad to the batch's longest",
              "pairs_per_step": [len(s) for s in plan], "losses": timer.losses, "tandem_slots_per_step": tandem_slots,
              "peak_rss_mib": common.peak_rss_mib()}
    result.update(common.timed_summary(timer.step_seconds(), tokens_per_step, counted, args.warmup))
    common.write_result(args.out, result)


if __name__ == "__main__":
    main()
