#!/usr/bin/env bash
# The main job on the embedded default, from a fresh checkout:
#   1. set-up and build if needed (scripts/setup.sh),
#   2. the demo target: a small Llama trained from scratch on the Austen novels in data/demo
#      (configs/demo-target.yaml),
#   3. an EAGLE-3 draft trained online against it on the Austen chat data
#      (configs/demo-eagle3.yaml), exported for SGLang and vLLM at every checkpoint,
#   4. `tandem eval`: speculative decoding on held-out prompts, τ printed, output checked
#      against plain greedy decoding of the target.
# Each run resumes if interrupted and is skipped when already finished. Takes about 10 minutes
# on 2 cores once built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
scripts/setup.sh

if [ ! -f runs/demo-target/export/config.json ]; then
  echo "== demo target (configs/demo-target.yaml)"
  build/tandem train configs/demo-target.yaml
fi
if [ ! -f runs/demo-eagle3/export/sglang/config.json ] || \
   [ ! -d "runs/demo-eagle3/$(printf 'step-%08d' "$(sed -n 's/^ *steps: *//p' configs/demo-eagle3.yaml)")" ]; then
  echo "== EAGLE-3 draft (configs/demo-eagle3.yaml)"
  build/tandem train configs/demo-eagle3.yaml
fi
echo "== speculative decoding on held-out prompts"
build/tandem eval --target runs/demo-target/export --draft runs/demo-eagle3/export \
  --data data/demo/chat_heldout.jsonl --tokenizer data/demo/tokenizer --num-prompts 32 \
  --max-new-tokens 64 --draft-tokens 7 --out runs/demo-eagle3/eval.json
tau=$(python3 -c "import json; print(f\"{json.load(open('runs/demo-eagle3/eval.json'))['tau']:.2f}\")")
cat <<DONE

tandem demo finished in $(( $(date +%s) - start )) s
  acceptance length tau = $tau tokens per target forward (7 draft tokens; report: runs/demo-eagle3/eval.json)
  EAGLE-3 draft for SGLang:             runs/demo-eagle3/export/sglang       (LlamaForCausalLMEagle3)
  EAGLE-3 draft for vLLM (speculators): runs/demo-eagle3/export/speculators  (Eagle3DraftModel)
  frozen target (HF):                   runs/demo-target/export
DONE
