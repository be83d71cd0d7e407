#!/usr/bin/env bash
# DFlash, DSpark and EAGLE-3 drafts trained by vLLM's speculators 0.9.0 next to tandem's, on the same
# ground: the shipped demo target (data/demo/target), the same training data (the chat prompts
# answered by the target: runs/demo-regenerated/chat.jsonl), the same draft shapes, anchors,
# steps, tokens per step, learning rate, schedule, Adam betas and clipping; every draft then
# evaluated by the same `tandem eval` on the 64 held-out prompts (64 new tokens, 7 draft tokens).
# What differs and why: tools/speculators/README.md.
#
#   tools/speculators/side_by_side.sh [dflash|dspark|eagle3|all|summary]   (summary: only the table)
#   env: SEEDS (default "0 1 2"), EAGLE3_SEEDS (default $SEEDS),
#        SPEC_VENV (default ~/.cache/tandem/venv-speculators-0.9.0; made with pip when missing,
#        about 6 GB), WORK (default runs/side-by-side), TANDEM (the binary, default build/tandem)
#
# tandem's side: DFlash and DSpark are configs/demo-dflash.yaml and configs/demo-dspark.yaml as
# they are, read from scripts/tau_seeds.sh's runs (run that first, with the same seeds); EAGLE-3 is configs/demo-eagle3.yaml with
# draft.train_lm_head=false (speculators cannot train the draft's lm_head), trained here, next to
# tau_seeds.sh's runs of the config as it is. Prints every run's τ with its 95% interval, then
# mean ± standard deviation per trainer; writes $WORK/summary.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
case "$what" in dflash | dspark | eagle3 | all | summary) ;; *) echo "usage: $0 [dflash|dspark|eagle3|all|summary]" >&2; exit 2 ;; esac
seeds=${SEEDS:-"0 1 2"}
eagle3_seeds=${EAGLE3_SEEDS:-$seeds}
venv=${SPEC_VENV:-$HOME/.cache/tandem/venv-speculators-0.9.0}
work=${WORK:-runs/side-by-side}
tandem=${TANDEM:-build/tandem}
target=data/demo/target
data=runs/demo-regenerated/chat.jsonl
mkdir -p "$work"
summary_only=0
[ "$what" = summary ] && { summary_only=1; what=all; }
if ((!summary_only)); then
  grep -q "\"target\": \"$target\"" "$data.settings.json" 2> /dev/null &&
    grep -q '"finished": true' "$data.settings.json" ||
    { echo "$0: $data.settings.json does not record a finished regeneration by $target; run scripts/demo.sh first" >&2; exit 1; }
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if ((summary_only)); then
  :
elif ! "$venv/bin/python" -c "import speculators" 2> /dev/null; then
  echo "== speculators 0.9.0 into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet speculators==0.9.0
fi
if ((!summary_only)); then
  "$venv/bin/python" -c "import importlib.metadata as m; v = m.version('speculators'); assert v == '0.9.0', v"
  "$venv/bin/python" tools/speculators/patch_for_cpu.py "$work/patched" --adam-beta2 0.95 --fp32-checkpoints
fi
threads=${TANDEM_THREADS:-$(nproc)}
export OMP_NUM_THREADS=$threads

steps_of() { sed -n 's/^ *steps: *\([0-9]*\).*/\1/p' "$1"; }

# Rows as speculators reads them, and the target's hidden states at LAYER_IDS (speculators'
# numbering: id k = output of target layer k - 1) plus the last layer, written with transformers.
prepare() {  # NAME LAYER_IDS [--shift-loss-mask | --next-trained-mask]
  local dir=$work/data-$1
  [ -f "$dir/.done" ] && return
  echo "== speculators data: $dir"
  rm -rf "$dir"
  "$venv/bin/python" tools/speculators/make_pretok.py "$data" "$dir.pretok.jsonl" "${@:3}"
  "$venv/bin/speculators" prepare-data --model "$target" --data "$dir.pretok.jsonl" \
    --output "$dir" --seq-length 256 --num-preprocessing-workers 1 --no-skip-token-freq \
    --token-freq-path "$dir/token_freq.pt" > "$dir.prepare.log" 2>&1
  "$venv/bin/python" tools/speculators/gen_hs.py "$dir" "$target" "$dir/hidden_states" "$2" \
    > "$dir.hidden_states.log" 2>&1
  touch "$dir/.done"
}

# Flags every speculators run shares: tandem's 8 documents of the demo data per step are about
# 1,530 tokens, and 1,620 tokens pack 8 of them in most steps; cosine over 0.44 of a cycle is
# the nearest to tandem's cosine down to 0.1 x lr (speculators' decays to 0); float32 hidden
# states keep autocast off.
common() {  # CONFIG SEED
  echo --verifier-name-or-path "$target" --seed "$2" --num-workers 0 --on-missing raise \
    --epochs 1 --max-steps "$(steps_of "$1")" --total-seq-len 1620 --train-data-ratio 0.99 \
    --hidden-states-dtype float32 --loss-implementation eager --draft-attn-impl sdpa \
    --optimizer adamw --lr 3e-3 --weight-decay 0 --scheduler-type cosine \
    --scheduler-warmup-ratio 0.05 --scheduler-num-cosine-cycles 0.44 --no-resume-from-checkpoint
}

evaluate() {  # DRAFT_DIR OUT_JSON: greedy, then at temperature 1 into OUT_JSON minus .json + .t1.json
  local args=(--target "$target" --draft "$1" --data data/demo/chat_heldout.jsonl
    --tokenizer data/demo/tokenizer --max-new-tokens 64 --draft-tokens 7)
  "$tandem" eval "${args[@]}" --out "$2" > "$2.log" 2>&1 ||
    { echo "$0: tandem eval of $1 failed, see $2.log" >&2; exit 1; }
  "$tandem" eval "${args[@]}" --temperature 1 --seed 0 --no-greedy-check --out "${2%.json}.t1.json" \
    > "${2%.json}.t1.json.log" 2>&1 ||
    { echo "$0: tandem eval at T = 1 of $1 failed, see ${2%.json}.t1.json.log" >&2; exit 1; }
}

speculators_train() {  # RUN_DIR ARGS...
  local run=$1; shift
  rm -rf "$run"
  PYTHONPATH="$work/patched" "$venv/bin/python" -m speculators train --save-path "$run" \
    --log-dir "$run-logs" "$@" > "$run.train.log" 2>&1 ||
    { echo "$0: speculators training failed, see $run.train.log" >&2; exit 1; }
}

if ((!summary_only)) && { [ "$what" = dflash ] || [ "$what" = all ]; }; then
  # tandem's DFlash draft (2 layers, block 8) reads target layers [1, 5]: speculators' 2 and 6.
  prepare dflash 2,6
  for seed in $seeds; do
    run=$work/speculators-dflash-seed$seed
    echo "== speculators DFlash, seed $seed"
    # The loss weight 1.8741 = 7 / (sum of the 7 slot weights exp(-(k-1)/4)) turns speculators'
    # mean over loss slots into tandem's weighted mean, so clipping sees the same gradient scale.
    # shellcheck disable=SC2046
    speculators_train "$run" $(common configs/demo-dflash.yaml "$seed") \
      --data-path "$work/data-dflash" --speculator-type dflash --draft-arch qwen3 --num-layers 2 \
      --full-attention-indices 0 1 --target-layer-ids 2 6 --block-size 8 --mask-token-id 4085 \
      --no-sample-from-anchor --max-anchors 512 --loss-fn '{"kl_div": 1.8741}' \
      --per-position-loss-weight fixed-exp-decay --dflash-decay-gamma 4
    "$venv/bin/python" tools/speculators/convert_to_zlab.py "$run/0" "$run-zlab" "$target" > /dev/null
    python3 tools/check_dflash_export.py "$run-zlab" --target "$target" > /dev/null
    evaluate "$run-zlab" "$run.eval.json"
  done
fi

if ((!summary_only)) && { [ "$what" = dspark ] || [ "$what" = all ]; }; then
  # tandem's DSpark draft (2 layers, block 7, Markov rank 64) reads target layers [1, 5] as its
  # DFlash does. --sample-from-anchor: slot k predicts token a+k+1, as in DeepSpec and tandem;
  # --next-trained-mask rows give tandem's anchors and supervised slots (make_pretok.py).
  prepare dspark 2,6 --next-trained-mask
  for seed in $seeds; do
    run=$work/speculators-dspark-seed$seed
    echo "== speculators DSpark, seed $seed"
    # tandem's loss is sum_k w_k (0.1 CE + 0.9 L1 + 1.0 BCE) / sum_k w_k, w_k = exp(-k/4) over
    # the 7 slots; speculators divides by the slot count instead, hence x 7 / 3.7352 = 1.8741 on
    # every term, and its "tv" is half the L1 distance: ce 0.18741, tv 3.37338, alpha 1.8741.
    # shellcheck disable=SC2046
    speculators_train "$run" $(common configs/demo-dspark.yaml "$seed") \
      --data-path "$work/data-dspark" --speculator-type dspark --draft-arch qwen3 --num-layers 2 \
      --full-attention-indices 0 1 --target-layer-ids 2 6 --block-size 7 --mask-token-id 4085 \
      --sample-from-anchor --max-anchors 512 --markov-rank 64 --confidence-head-alpha 1.8741 \
      --loss-fn '{"ce": 0.18741, "tv": 3.37338}' --per-position-loss-weight fixed-exp-decay \
      --dflash-decay-gamma 4
    # the peer's own classes load it and their forward equals an independent one
    tools/check_dspark_export.sh --speculators "$run/0" --target "$target" > "$run.check.log" 2>&1 ||
      { echo "$0: speculators' DSpark classes reject $run/0, see $run.check.log" >&2; exit 1; }
    evaluate "$run/0" "$run.eval.json"
  done
fi

if ((!summary_only)) && { [ "$what" = eagle3 ] || [ "$what" = all ]; }; then
  # EAGLE-3 counts a prediction by the mask of the token it reads: shifted rows (make_pretok.py).
  # Its draft vocabulary comes from the unshifted rows' token counts, as tandem's does.
  prepare dflash 2,6
  prepare eagle3 2,4,5 --shift-loss-mask
  for seed in $eagle3_seeds; do
    run=$work/speculators-eagle3-seed$seed
    echo "== speculators EAGLE-3, seed $seed"
    # shellcheck disable=SC2046
    speculators_train "$run" $(common configs/demo-eagle3.yaml "$seed") \
      --data-path "$work/data-eagle3" --speculator-type eagle3 --draft-arch llama --num-layers 1 \
      --full-attention-indices 0 --target-layer-ids 2 4 5 --draft-vocab-size 2048 \
      --token-freq-path "$work/data-dflash/token_freq.pt" --no-norm-before-fc \
      --no-norm-before-residual --no-norm-output --no-embed-requires-grad --ttt-steps 7 \
      --ttt-step-loss-decay 0.8 --loss-fn kl_div
    "$venv/bin/python" tools/speculators/convert_eagle3_to_sglang.py "$run/0" "$run-sglang" "$target" > /dev/null
    evaluate "$run-sglang" "$run.eval.json"

    run=$work/tandem-eagle3-frozen-head-seed$seed
    echo "== tandem EAGLE-3 with a frozen lm_head, seed $seed"
    rm -rf "$run"
    "$tandem" train configs/demo-eagle3.yaml "training.run_dir=$run" "training.seed=$seed" \
      draft.train_lm_head=false > "$run.train.log" 2>&1 ||
      { echo "$0: tandem training failed, see $run.train.log" >&2; exit 1; }
    evaluate "$run/export/sglang" "$run.eval.json"
  done
fi

python3 - "$work" "$what" "$seeds" "$eagle3_seeds" <<'PY' | tee "$work/summary.md"
import json, os, statistics, subprocess, sys
work, what, seeds, eagle3_seeds = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"# tandem vs speculators 0.9.0 on the demo\n\n{subprocess.run(['date', '-u', '+%F'], capture_output=True, text=True).stdout.strip()}, "
      f"{cpu}, {os.cpu_count()} cores, commit {commit}; tau over the 64 held-out prompts "
      "(64 new tokens, 7 draft tokens), 95% bootstrap interval over prompts\n")
rows = []
if what in ("dflash", "all"):
    rows += [("DFlash", "tandem (configs/demo-dflash.yaml)", "runs/tau-seeds/demo-dflash-seed{}/eval.json", seeds),
             ("DFlash", "speculators", work + "/speculators-dflash-seed{}.eval.json", seeds)]
if what in ("dspark", "all"):
    rows += [("DSpark", "tandem (configs/demo-dspark.yaml)", "runs/tau-seeds/demo-dspark-seed{}/eval.json", seeds),
             ("DSpark", "speculators", work + "/speculators-dspark-seed{}.eval.json", seeds)]
if what in ("eagle3", "all"):
    rows += [("EAGLE-3", "tandem (configs/demo-eagle3.yaml, lm_head trained)", "runs/tau-seeds/demo-eagle3-seed{}/eval.json", eagle3_seeds),
             ("EAGLE-3", "tandem, lm_head frozen", work + "/tandem-eagle3-frozen-head-seed{}.eval.json", eagle3_seeds),
             ("EAGLE-3", "speculators (lm_head frozen)", work + "/speculators-eagle3-seed{}.eval.json", eagle3_seeds)]
def summary(taus):
    return (f"{statistics.mean(taus):.2f} ± {statistics.stdev(taus):.2f}" if len(taus) > 1
            else f"{taus[0]:.2f}" if taus else "n/a")
# tau_seeds.sh writes eval-t1.json beside eval.json; evaluate() above writes NAME.t1.json
def t1_path(path):
    return path.replace("/eval.json", "/eval-t1.json") if path.endswith("/eval.json") else path[:-5] + ".t1.json"
print("| draft | trainer | tau per seed (95% interval) | mean ± sd | at T = 1: mean ± sd |\n|---|---|---|---|---|")
for draft, trainer, pattern, row_seeds in rows:
    taus, taus_t1, cells = [], [], []
    for seed in row_seeds:
        path = pattern.format(seed)
        if not os.path.exists(path):
            cells.append(f"seed {seed}: missing ({path})")
            continue
        r = json.load(open(path))
        taus.append(r["tau"])
        cells.append(f"{r['tau']:.2f} ({r['tau_ci95'][0]:.2f}–{r['tau_ci95'][1]:.2f})")
        if os.path.exists(t1_path(path)):
            taus_t1.append(json.load(open(t1_path(path)))["tau"])
    print(f"| {draft} | {trainer} | {'; '.join(cells)} | {summary(taus)} | {summary(taus_t1)} |")
PY
