"""Distillation with the HF Trainer (or TRL's GKDTrainer) on the batches a tandem distillation run
trained on (bench/bench_vs_trl.sh runs it).

    python tools/side_by_side/hf_distill.py --tandem-run RUN_DIR [--trainer hf|gkd] --out result.json

Reads tandem's resolved config from RUN_DIR, reproduces its steps' documents (common.py; checked
against RUN_DIR/metrics.jsonl), cuts each into seq_len pieces as tandem's `overlong: split` does,
and trains a fresh student of the same config.json against the same frozen teacher, fp32:
  --trainer hf:  a `transformers.Trainer` subclass whose compute_loss is forward KL(teacher‖student)
                 over every next-token position, the teacher's logits divided by the temperature;
  --trainer gkd: TRL's GKDTrainer with lmbda = 0 (never generates: the data's tokens only),
                 beta = 0 (its generalized JSD is then KL(teacher‖student), forward KL) and
                 temperature = 1 (it divides both sides' logits by it).
Same learning rate, constant schedule, AdamW betas/eps, weight decay (matrices only on both sides:
the Trainer leaves out norms and biases), clipping. Each piece is one row, every row of the batch
padded to the longest. Times each optimizer step; real tokens exclude the padding.
"""
import tempfile

import common


def main():
    args = common.parse_arguments(
        __doc__.splitlines()[0],
        lambda parser: parser.add_argument("--trainer", choices=("hf", "gkd"), default="hf"))

    import torch
    import torch.nn.functional as F
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Trainer, TrainingArguments

    config = common.resolved_config(args.tandem_run)
    metrics = common.read_metrics(args.tandem_run)
    data, training, optimizer, loss = config["data"], config["training"], config["optimizer"], config["loss"]
    assert loss["divergence"] == "forward_kl" and float(loss["hard_label_weight"]) == 0
    assert training["schedule"] == "constant" and data["overlong"] == "split"
    assert int(training.get("micro_batches", 1)) == 1 and int(training.get("docs_per_step", 0)) == 0
    steps, seq_len, temperature = len(metrics), int(data["seq_len"]), float(loss["temperature"])
    tokenizer = AutoTokenizer.from_pretrained(data["tokenizer"])

    documents = [common.text_document(r, tokenizer) for r in common.read_jsonl(data["path"])]
    units, lengths = common.sampler_records([[len(ids)] for ids in documents], data, per_record=1)
    if args.tandem:
        theirs = common.tandem_documents(args.tandem, data)
        for r, ids in enumerate(documents):
            if theirs.get((r, None), ([],))[0] != ids:
                raise SystemExit(f"[hf_distill] record {r}: ids differ from tandem's")
    plan, tandem_slots = common.plan_steps(lengths, data, steps, int(training["seed"]))
    tokens_per_step = common.check_against_tandem(plan, lengths, data, metrics, per_record=1)

    # Each step's records (documents, or the parts tandem cut them into) cut into pieces of seq_len,
    # each its own sequence as tandem's `overlong: split` makes them, one row each; a batch a step.
    rows, batches = [], []
    for step in plan:
        first = len(rows)
        for r in step:
            document, begin, end = units[r]
            ids = documents[document][begin:] if end < 0 else documents[document][begin:end]
            rows.extend({"input_ids": ids[b:b + seq_len]} for b in range(0, len(ids), seq_len))
        batches.append(list(range(first, len(rows))))
    pad_id = tokenizer.convert_tokens_to_ids(common.EOT)

    def collate(examples):
        width = max(len(e["input_ids"]) for e in examples)
        ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(examples), width), dtype=torch.long)
        for i, e in enumerate(examples):
            ids[i, :len(e["input_ids"])] = torch.tensor(e["input_ids"])
            mask[i, :len(e["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    torch.manual_seed(int(training["seed"]))
    student_config = LlamaConfig.from_json_file(config["model"]["config"])
    student_config.initializer_range = float(config["model"]["init_std"])
    student = AutoModelForCausalLM.from_config(student_config, dtype=torch.float32)
    teacher = AutoModelForCausalLM.from_pretrained(config["teacher"]["path"], dtype=torch.float32).eval()
    teacher.requires_grad_(False)

    common_args = dict(
        output_dir=tempfile.mkdtemp(prefix="hf-distill-"), max_steps=steps, per_device_train_batch_size=1,
        learning_rate=float(training["lr"]), lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=float(optimizer["weight_decay"]), adam_beta1=float(optimizer["beta1"]),
        adam_beta2=float(optimizer["beta2"]), adam_epsilon=float(optimizer["eps"]),
        max_grad_norm=float(optimizer["max_grad_norm"]), bf16=False, fp16=False,
        gradient_checkpointing=False, use_cpu=True, seed=int(training["seed"]), logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
        remove_unused_columns=False)
    timer, counted = common.step_timer(), []  # (real tokens, slots) of each batch collated
    dataset = Dataset.from_list(rows)

    if args.trainer == "hf":
        class ForwardKLTrainer(Trainer):
            """KL(p_teacher ‖ p_student) per next-token position, averaged over the positions."""

            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
                with torch.no_grad():
                    teacher_logits = teacher(input_ids=inputs["input_ids"],
                                             attention_mask=inputs["attention_mask"]).logits
                positions = inputs["labels"][:, 1:] != -100  # logits at t predict token t + 1
                student_logp = F.log_softmax(outputs.logits[:, :-1][positions], dim=-1)
                teacher_logp = F.log_softmax(teacher_logits[:, :-1][positions] / temperature, dim=-1)
                value = F.kl_div(student_logp, teacher_logp, log_target=True, reduction="sum") / positions.sum()
                return (value, outputs) if return_outputs else value

        trainer_class = common.fixed_batches(ForwardKLTrainer, batches, counted)
        trainer = trainer_class(model=student, args=TrainingArguments(**common_args), train_dataset=dataset,
                                data_collator=collate, callbacks=[timer])
        side = "HF Trainer, forward KL"
    else:
        from trl.experimental.gkd import GKDConfig, GKDTrainer

        assert temperature == 1.0, "GKD divides both sides' logits by its temperature"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = common.EOT
        gkd_args = GKDConfig(**common_args, lmbda=0.0, beta=0.0, temperature=1.0, seq_kd=False)
        trainer_class = common.fixed_batches(GKDTrainer, batches, counted)
        trainer = trainer_class(model=student, teacher_model=teacher, args=gkd_args, train_dataset=dataset,
                                data_collator=collate, processing_class=tokenizer, callbacks=[timer])
        side = "TRL GKDTrainer (lmbda 0, beta 0)"

    trainer.train()
    result = {"objective": "distill", "side": side, "packing": "one piece per row, pad to the batch's longest",
              "losses": timer.losses, "tandem_slots_per_step": tandem_slots, "peak_rss_mib": common.peak_rss_mib(),
              "loss_positions_per_step": [sum(max(len(rows[i]["input_ids"]) - 1, 0) for i in b) for b in batches],
              "tandem_loss_tokens_per_step": [m.get("loss_tokens") for m in metrics]}
    result.update(common.timed_summary(timer.step_seconds(), tokens_per_step, counted, args.warmup))
    common.write_result(args.out, result)


if __name__ == "__main__":
    main()
