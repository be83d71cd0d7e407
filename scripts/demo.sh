#!/usr/bin/env bash
# The main job on the embedded default, from a fresh checkout:
#   1. set-up and build if needed (scripts/setup.sh),
#   2. the demo target: a small Llama trained from scratch on the Austen novels in data/demo, then
#      on its chat conversations; shipped in bf16 as data/demo/target (scripts/train_demo_target.sh
#      made it; --retrain-target trains it again, about 30 minutes more, and uses that one),
#   3. the Austen chat prompts answered by the target itself (`tandem regenerate`, greedy, up to
#      128 tokens per answer) into runs/demo-regenerated/chat.jsonl,
#   4. an EAGLE-3 draft trained online against the target on those answers
#      (configs/demo-eagle3.yaml), exported for SGLang and vLLM at every checkpoint,
#   5. `tandem eval`: speculative decoding on the 64 held-out prompts, τ printed with its 95%
#      interval, output checked against plain greedy decoding of the target.
# Each step resumes if interrupted and is skipped when already finished. Takes about 10 minutes
# on 2 cores once built.
#
#   scripts/demo.sh [--retrain-target]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
scripts/setup.sh

target=data/demo/target
regenerated=runs/demo-regenerated/chat.jsonl
draft=runs/demo-eagle3
case "${1:-}" in
  "") ;;
  --retrain-target)
    scripts/train_demo_target.sh runs/demo-target-chat/export-bf16
    target=runs/demo-target-chat/export-bf16
    regenerated=runs/demo-retrained-regenerated/chat.jsonl
    draft=runs/demo-retrained-eagle3 ;;
  *) echo "usage: scripts/demo.sh [--retrain-target]" >&2; exit 2 ;;
esac
echo "== the chat prompts answered by the target $target (tandem regenerate)"
build/tandem regenerate configs/demo-eagle3.yaml --target "$target" --data data/demo/chat.jsonl \
  --out "$regenerated" --max-new-tokens 128 --batch-size 32
final_step="$draft/$(printf 'step-%08d' "$(sed -n 's/^ *steps: *//p' configs/demo-eagle3.yaml)")"
if [ -d "$final_step" ] && ! grep -q "path: $target\$" "$final_step/config.yaml"; then
  echo "scripts/demo.sh: $draft was trained against another target; move it away to train again" >&2
  exit 1
fi
if [ ! -f "$draft/export/sglang/config.json" ] || [ ! -d "$final_step" ]; then
  echo "== EAGLE-3 draft (configs/demo-eagle3.yaml)"
  build/tandem train configs/demo-eagle3.yaml "target.path=$target" "data.path=$regenerated" \
    "training.run_dir=$draft"
fi
echo "== speculative decoding on held-out prompts"
build/tandem eval --target "$target" --draft "$draft/export" \
  --data data/demo/chat_heldout.jsonl --tokenizer data/demo/tokenizer \
  --max-new-tokens 64 --draft-tokens 7 --out "$draft/eval.json"
tau=$(python3 -c "import json; r = json.load(open('$draft/eval.json')); print(f\"{r['tau']:.2f} (95% interval {r['tau_ci95'][0]:.2f} to {r['tau_ci95'][1]:.2f})\")")
speed=$(python3 -c "import json; r = json.load(open('$draft/eval.json')); print(f\"{r['speculative_tokens_per_s']:.0f} tokens/s vs greedy {r['greedy_tokens_per_s']:.0f} tokens/s (batch 1, KV cache): {r['speedup']:.2f}x\")")
cat <<DONE

tandem demo finished in $(( $(date +%s) - start )) s
  acceptance length tau = $tau tokens per target forward (7 draft tokens; report: $draft/eval.json)
  speculative decoding $speed
  training data answered by the target: $regenerated
  EAGLE-3 draft for SGLang:             $draft/export/sglang       (LlamaForCausalLMEagle3)
  EAGLE-3 draft for vLLM (speculators): $draft/export/speculators  (Eagle3DraftModel)
  frozen target (HF):                   $target
DONE
