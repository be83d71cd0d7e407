#!/usr/bin/env python3
"""Generate tiny random Hugging Face checkpoints plus transformers reference outputs.

Writes, for each fixture NAME, tests/fixtures/models/NAME/:
  config.json, model*.safetensors (+ index for sharded), generation_config.json  -- save_pretrained
  reference.safetensors:
    input_ids          I64 [2, 16]
    logits             F32 [2, 16, V]   fp32 eager forward, no attention mask, positions 0..15
    hidden.{i}         F32 [2, 16, H]   raw output of decoder layer i (forward hook, no final norm)
    logits_bf16        F32 [2, 16, V]   same forward in bf16 (from_pretrained dtype=bfloat16), upcast
    hidden_bf16.{i}    F32 [2, 16, H]
    __metadata__       generator, versions, seed, fixture, notes

Dense fixtures: llama3 (fp32, llama3 RoPE scaling), mistral (fp32, sliding_window 6),
qwen2 (bf16, two shards, qkv bias), qwen3 (fp32, q/k norm, tied embeddings).

Gemma 3 fixtures (fp32, one file each, seed 1005 for both: the same input_ids):
  gemma3_text Gemma3ForCausalLM (model_type gemma3_text), 6 layers, layer_types [sliding, sliding, full,
              sliding, sliding, full] (Gemma 3 4B's pattern, shortened), sliding_window 6 < 16 positions;
              4 heads, 2 kv heads, head_dim 32 (!= 64 / 4 on purpose), query_pre_attn_scalar 24 (softmax
              scale 24^-0.5, != head_dim^-0.5 on purpose); per-head q_norm / k_norm [32] before RoPE; four
              norms per layer (input, post_attention, pre_feedforward, post_feedforward), all Gemma3RMSNorm
              x * (1 + w), w = 0.2 * randn (transformers initialises w at 0); embeddings scaled by sqrt(64)
              = 8 and tied to lm_head (no lm_head.weight on disk; embed_std 0.1, see fixture_specs); MLP
              down(gelu_tanh(gate(x)) * up(x)), intermediate 128; config.json rope_parameters per layer
              type: full_attention {rope_type linear, factor 8, rope_theta 1e6}, sliding_attention
              {rope_type default, rope_theta 10000}; no softcapping; pad / eos / bos 0 / 1 / 2.  Tensors:
              model.embed_tokens.weight [512, 64], model.norm.weight [64], model.layers.N.{input_layernorm,
              post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm}.weight [64],
              .self_attn.{q_proj [128, 64], k_proj [64, 64], v_proj [64, 64], o_proj [64, 128]}.weight,
              .self_attn.{q_norm, k_norm}.weight [32], .mlp.{gate_proj, up_proj}.weight [128, 64],
              .mlp.down_proj.weight [64, 128].  Checked: the model written out in float64
              (gemma3_reference) matches the fp32 logits and every hidden.{i} to float32 rounding, while the
              usual mistakes (norm x * w, scale head_dim^-0.5, RoPE of the other layer type, no linear
              factor, no embedding scale) move the logits by 0.5 .. 3.3 (check_gemma3); the window's
              receptive fields per layer (check_gemma3_window).  Metadata keys gemma3 (every numeric
              detail, written out) and sliding_window.
  gemma3      Gemma3ForConditionalGeneration (model_type gemma3): gemma3_text's language model (its
              model.safetensors copied bit for bit: build gemma3_text first, into the same --out) with
              the same text_config, plus a tiny SigLIP vision tower (1 layer, hidden 32, 28x28 images,
              14x14 patches, vision_use_head false) and projector (mm_tokens_per_image 1; image / boi /
              eoi tokens 508 / 509 / 510), drawn at random, unused by the references.  save_pretrained
              writes the released checkpoints' layout: language_model.model.* (not the module names
              model.language_model.*), vision_tower.* (released: vision_tower.vision_model.*),
              multi_modal_projector.{mm_input_projection_weight [32, 64], mm_soft_emb_norm.weight [32]}, no
              lm_head.weight; both other spellings load as well (check_gemma3_vlm).  reference.safetensors:
              the language model on the same input_ids, text only: every tensor equal to gemma3_text's
              (asserted); metadata checkpoint says what is on disk.

Mixture-of-experts fixtures (8 experts each; seeds chosen for robust routing, see SEED_*):
  qwen3_moe   Qwen3MoeForCausalLM, bf16, two shards with layer 2's experts split across them;
              top-2 of softmax(router logits), renormalized; layers 0, 2, 3 MoE (expert
              intermediate 32), layer 1 a dense MLP (mlp_only_layers [1], intermediate 128).
  mixtral     MixtralForCausalLM, fp32, one kv head; top-2 of softmax, renormalized.
  minimax_m2  MiniMaxM2ForCausalLM, fp32; top-3 of sigmoid(logits) + e_score_correction_bias
              (random, non-zero: it changes the chosen experts of 6-15 tokens per layer), weights
              = the chosen sigmoids renormalized; partial RoPE (rotary_dim 16 of head_dim 32);
              q_norm/k_norm RMS over all heads at once ([heads*head_dim] weights); bos/eos 510/511.
              The dir also holds tokenizer.json (byte-level BPE: 510 tokens, then <s>, </s> -- no
              mask, no reserved tokens, exactly 512 = vocab_size) and tokenizer_config.json
              (no mask_token).
  glm4_moe    Glm4MoeForCausalLM (GLM-4.5), fp32, one file; layer 0 a dense MLP (first_k_dense_replace
              1, intermediate 128), layers 1-3 MoE: 8 routed experts (intermediate 32) + 1 shared
              expert (intermediate 32, always applied, added to the routed sum); group-limited routing:
              c = sigmoid(logits) + e_score_correction_bias (random, non-zero: it changes the chosen
              experts of 11-13 tokens per layer), 2 groups of 4 experts, group score = sum of its two
              largest c, keep the best 1 group, top-2 of c inside it; weights = the chosen sigmoids
              renormalized (+1e-20) times routed_scaling_factor 2.5.  Attention: q/k/v bias (o none),
              per-head q_norm/k_norm ([head_dim] weights, before RoPE), partial RoPE
              (partial_rotary_factor 0.5: the first 16 of head_dim 32, rope_theta 10000; config.json
              holds it in rope_parameters).  Glm4MoeForCausalLM computes no aux_loss: the stored one
              is transformers' load_balancing_loss_func called on its router logits (run_forward).
              model.safetensors also holds 10 tensors of a multi-token-prediction layer, named as
              the released checkpoints name theirs (layer index num_hidden_layers = 4; config
              num_nextn_predict_layers 1), random, unused by transformers (unexpected keys, same
              outputs: asserted) -- for a loader to skip by name: model.layers.4.{eh_proj.weight
              [64, 128], enorm.weight, hnorm.weight, shared_head.norm.weight, input_layernorm.weight
              [64], self_attn.q_proj.weight [128, 64], mlp.gate.weight [8, 64],
              mlp.gate.e_score_correction_bias [8], mlp.experts.0.gate_proj.weight [32, 64],
              mlp.shared_experts.down_proj.weight [64, 32]} (GLM4_MOE_MTP_TENSORS).
  deepseek_v3 DeepseekV3ForCausalLM (DeepSeek-V3), fp32, one file; MLP and routing as glm4_moe (layer 0
              dense, intermediate 128; layers 1-3 MoE: 8 routed experts of 32 + 1 shared expert of 32;
              group-limited: 2 groups of 4, keep 1, top-2, weights renormalized (+1e-20) times 2.5;
              the random e_score_correction_bias changes the chosen experts of 4-10 tokens per layer;
              no aux_loss either: the stored one is load_balancing_loss_func's, as glm4_moe's).
              Attention: multi-head latent attention (MLA), 4 heads, no biases: q = q_b_proj(
              q_a_layernorm(q_a_proj(x))) (q_lora_rank 32), per head [qk_nope_head_dim 16 without
              RoPE, qk_rope_head_dim 8 with] (qk_head_dim 24); kv_a_proj_with_mqa(x) = [c (kv_lora_rank
              16), k_rope (8, one head shared by all)]; kv_b_proj(kv_a_layernorm(c)) per head = [k_nope
              16, v 12] (v_head_dim 12 != qk_nope_head_dim 16 on purpose); o_proj [64, 4 * 12].
              rope_interleave true (RoPE dims in pairs (2j, 2j+1)).  YaRN RoPE (rope_parameters:
              rope_theta 10000, factor 4, original_max_position_embeddings 32, beta_fast 32, beta_slow
              1, mscale = mscale_all_dim = 1; max_position_embeddings 128): inv_freq [1, 0.025, 0.0025,
              0.00025] (the first frequency kept, the other three divided by 4), cos/sin unscaled
              (attention_factor 1), softmax scale 24^-0.5 * m^2 with m = 0.1 * ln 4 + 1.  transformers'
              yarn is static (the same inv_freq at every position), so the 16 reference positions are
              all scaled although they stay below 32.  config.json also carries head_dim 8 (=
              qk_rope_head_dim, set by DeepseekV3Config) and qk_head_dim 24.  model.safetensors also
              holds 15 tensors of the MTP layer, as glm4_moe (layer 4, num_nextn_predict_layers 1,
              unexpected keys, same outputs: asserted): model.layers.4.{embed_tokens.weight [512, 64],
              enorm.weight, hnorm.weight [64], eh_proj.weight [64, 128], shared_head.norm.weight [64],
              shared_head.head.weight [512, 64], input_layernorm.weight [64], self_attn.q_a_proj.weight
              [32, 64], self_attn.q_a_layernorm.weight [32], self_attn.kv_a_proj_with_mqa.weight
              [24, 64], self_attn.kv_b_proj.weight [112, 16], mlp.gate.weight [8, 64],
              mlp.gate.e_score_correction_bias [8], mlp.experts.0.gate_proj.weight [32, 64],
              mlp.shared_experts.down_proj.weight [64, 32]} (DEEPSEEK_V3_MTP_TENSORS).  Every layer's
              attention is also written out in float64 (mla_reference) and matched (check_deepseek_v3).
  deepseek_v3_q_proj  DeepseekV3ForCausalLM, fp32, one file, 2 layers (layer 0 dense, layer 1 MoE),
              as deepseek_v3 except: no query low rank (q_lora_rank null: one self_attn.q_proj
              [4 * 24, 64] instead of q_a_proj / q_a_layernorm / q_b_proj), rope_interleave false
              (rotate_half: dims (j, j + 4)), default RoPE (rope_theta 10000, softmax scale 24^-0.5),
              max_position_embeddings 512, n_group 1 = topk_group 1 (one group of 8: plain top-2 of
              sigmoid + bias; the bias changes the experts of 4 tokens); no MTP layer
              (num_nextn_predict_layers 0 in config.json, no model.layers.2.* tensors).
  gpt_oss     GptOssForCausalLM (gpt-oss-20b / -120b), fp32, one file; every layer MoE: top-4 of 8 experts
              (intermediate 32) by the raw router logits (mlp.router: Linear with bias), weights =
              softmax over the 4 chosen logits; experts with biases and the clamped SwiGLU (gate/up
              interleaved: gate = gu[..., ::2], up = gu[..., 1::2]; gate = min(gate, limit), up =
              clamp(up, -limit, limit), y = (up + 1) * gate * sigmoid(1.702 gate)), swiglu_limit 1.25
              (published 7.0; here the clamp cuts ~13% of the routed gate values and ~13% of the up
              values on each side).  Attention: 4 heads, 2 kv heads, head_dim 16, q/k/v/o biases,
              attention sinks (self_attn.sinks [4], drawn 1.0 * randn: one extra logit per head in every
              softmax row, its probability dropped); layer_types [sliding, full, sliding, full],
              sliding_window 4 < 16 positions (a query sees itself and 3 earlier keys); YaRN RoPE as
              published (rope_theta 150000, factor 32, beta_fast 32, beta_slow 1, truncate false,
              original_max_position_embeddings 4096; max_position_embeddings 131072): rotate_half (halves,
              not pairs), inv_freq [1, 0.225, 0.0508, 0.0068 (ramp 0.42), 0.00046 (0.85), then / 32],
              cos / sin times attention_factor 0.1 ln 32 + 1 = 1.3466; rms_norm_eps 1e-5; untied
              lm_head.  Written out in float64 (gpt_oss_reference) and matched (check_gpt_oss); in
              transformers, the clamp removed and the sinks at -inf each move the logits by >= 0.5
              (asserted; 3.2 and 5.5), the router bias changes the chosen experts of 6-14 tokens per
              layer; the window's receptive fields per layer (check_gpt_oss_window).  bf16:
              GptOssPreTrainedModel._keep_in_fp32_modules (the norms) only applies to float16 loads, so
              the bf16 load is bf16 throughout (asserted), and its eager attention softmax runs in bf16.
              Metadata keys gpt_oss (every numeric detail, written out, and what each part changes),
              sliding_window.
  On disk the experts are per-expert 2-D tensors, as transformers writes them (gpt_oss: 3-D, below):
    qwen3_moe:  model.layers.N.mlp.gate.weight [E, H]; model.layers.N.mlp.experts.J.{gate_proj,
                up_proj}.weight [I, H], .down_proj.weight [H, I]
    mixtral, minimax_m2: model.layers.N.block_sparse_moe.gate.weight [E, H];
                model.layers.N.block_sparse_moe.experts.J.{w1 (gate), w3 (up)}.weight [I, H],
                .w2.weight (down) [H, I]; minimax_m2 also
                model.layers.N.block_sparse_moe.e_score_correction_bias [E]
    glm4_moe:   as qwen3_moe (model.layers.N.mlp.gate.weight [E, H], mlp.experts.J.{gate_proj, up_proj,
                down_proj}.weight), plus model.layers.N.mlp.gate.e_score_correction_bias [E] (F32)
                and the shared expert model.layers.N.mlp.shared_experts.{gate_proj, up_proj}.weight
                [32, H], .down_proj.weight [H, 32]; the dense layer 0: model.layers.0.mlp.{gate_proj,
                up_proj}.weight [128, H], .down_proj.weight [H, 128]; attention
                self_attn.{q,k,v}_proj.{weight,bias}, o_proj.weight, q_norm.weight / k_norm.weight [32]
    deepseek_v3*: MLP, experts, gate (+ e_score_correction_bias) and shared expert as glm4_moe; attention
                self_attn.{q_a_proj [32, H], q_a_layernorm [32], q_b_proj [96, 32] (deepseek_v3) |
                q_proj [96, H] (deepseek_v3_q_proj), kv_a_proj_with_mqa [24, H], kv_a_layernorm [16],
                kv_b_proj [112, 16], o_proj [H, 48]}.weight (rows of q_b_proj / q_proj: head-major,
                24 per head = nope 16 then rope 8; of kv_b_proj: 28 per head = k_nope 16 then v 12;
                of kv_a_proj_with_mqa: c 16 then k_rope 8)
    gpt_oss:    all experts of a layer in one tensor, input dim first (x @ W): model.layers.N.mlp.experts.
                {gate_up_proj [E, H, 2I] (columns interleaved gate 0, up 0, gate 1, up 1, ...),
                gate_up_proj_bias [E, 2I] (interleaved alike), down_proj [E, I, H], down_proj_bias [E, H]};
                router model.layers.N.mlp.router.{weight [E, H], bias [E]}; attention
                self_attn.{q_proj [64, H], k_proj [32, H], v_proj [32, H], o_proj [H, 64]}.{weight, bias},
                self_attn.sinks [4]; norms input_layernorm / post_attention_layernorm / model.norm [H]
  Their reference.safetensors adds, all F32:
    router_logits.{i}       [B*T, E]  router (gate) logits of MoE layer i, fp32 forward (rows b*T+t)
    router_logits_bf16.{i}  [B*T, E]  the same in the bf16 forward, upcast
    aux_loss                []        load_balancing_loss_func(router_logits of all MoE layers, E,
                                      top_k, attention_mask=None) of the fp32 forward, i.e.
                                      out.aux_loss with output_router_logits=True, NOT multiplied by
                                      router_aux_loss_coef (glm4_moe, deepseek_v3*, whose out.aux_loss
                                      is None: that function called on out.router_logits, see
                                      run_forward)
  and the metadata keys num_experts, top_k, moe_layers, moe_note, experts_implementation,
  aux_loss, router_logits (+ routing for minimax_m2, glm4_moe, deepseek_v3* and gpt_oss, mtp_tensors for
  glm4_moe and deepseek_v3, attention (MLA and RoPE written out, mla_note) for deepseek_v3*, gpt_oss and
  sliding_window for gpt_oss; gpt_oss's router_logits include the router bias). The
  references run the experts with transformers' default experts_implementation "grouped_mm"
  (requested explicitly): per token, the k products expert_output * routing_weight (in the bf16
  forward: bf16 for qwen3_moe and gpt_oss, whose routers give weights in the activation dtype; float32 for
  mixtral / minimax_m2 / glm4_moe / deepseek_v3*, whose weights stay float32) are summed with float32
  accumulation and cast once to the activation dtype (glm4_moe, deepseek_v3*: then the shared
  expert's output is added in that dtype).  In the bf16 load glm4_moe's and deepseek_v3*'s
  e_score_correction_bias stays float32 (transformers' _keep_in_fp32_modules_strict).

Deterministic: fixed seeds, CPU, single thread; running it twice gives byte-identical files.
Run (from the repository root):
    <venv-tools>/bin/python tools/make_model_fixtures.py [--out tests/fixtures/models] [--only NAME ...]"""

import argparse
import json
import math
import os
import random
import re
import shutil
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import safetensors  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from fixture_safetensors import write_safetensors  # noqa: E402
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Gemma3Config,
    Gemma3ForCausalLM,
    Gemma3ForConditionalGeneration,
    Gemma3TextConfig,
    Glm4MoeConfig,
    Glm4MoeForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MiniMaxM2Config,
    MiniMaxM2ForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    SiglipVisionConfig,
)

GENERATOR = "tools/make_model_fixtures.py"
BATCH, SEQ = 2, 16
VOCAB, HIDDEN, LAYERS, INTER = 512, 64, 4, 128

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    intermediate_size=INTER,
    hidden_act="silu",
    attention_dropout=0.0,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
)

MOE_EXPERTS, MOE_INTER = 8, 32
# MoE seeds (searched; 1005-1007 and most others fail): in both the fp32 and the bf16 reference
# forward the k-th and (k+1)-th routing scores of every token in every MoE layer are
# >= MIN_ROUTING_GAP apart, the bf16 forward picks the same experts as the fp32 one and as a bf16
# forward with experts_implementation="eager" (all asserted), and as a plain model.to(bf16) (only
# printed).  This lowers, not removes, the chance that a reimplementation whose bf16 rounding
# differs picks another expert somewhere: the bf16 routing scores are off the fp32 ones by ~1e-2,
# several times MIN_ROUTING_GAP.
SEED_QWEN3_MOE, SEED_MIXTRAL, SEED_MINIMAX_M2 = 2094, 2410, 2074
# GLM-4.5: searched over 2500-2559 the same way, its gap being the smaller of the expert gap and the
# group gap (routing_report); 11 of the 60 pass (2502 first), most fail on a gap or on bf16 picking
# other experts than fp32.  2513 has the largest min gap of them (fp32 1.4e-2, bf16 1.2e-2).
SEED_GLM4_MOE = 2513
MIN_ROUTING_GAP = 2e-3
# GLM-4.5 fixture: the std of the random e_score_correction_bias (its selection scores are sigmoids
# in (0, 1); MiniMax-M2 uses reinit_'s default 0.1), and the multi-token-prediction (MTP) tensors
# appended to model.safetensors as layer num_hidden_layers (= 4), named like the released
# checkpoints' layer 46 / 92: random, never read by transformers' Glm4MoeForCausalLM (it warns
# about unexpected keys), for the C++ loader to skip by name.  [shape]; all float32.
GLM4_MOE_SCORE_BIAS_STD = 0.1
GLM4_MOE_MTP_TENSORS = {
    f"model.layers.{LAYERS}.eh_proj.weight": (HIDDEN, 2 * HIDDEN),
    f"model.layers.{LAYERS}.enorm.weight": (HIDDEN,),
    f"model.layers.{LAYERS}.hnorm.weight": (HIDDEN,),
    f"model.layers.{LAYERS}.shared_head.norm.weight": (HIDDEN,),
    f"model.layers.{LAYERS}.input_layernorm.weight": (HIDDEN,),
    f"model.layers.{LAYERS}.self_attn.q_proj.weight": (4 * 32, HIDDEN),
    f"model.layers.{LAYERS}.mlp.gate.weight": (MOE_EXPERTS, HIDDEN),
    f"model.layers.{LAYERS}.mlp.gate.e_score_correction_bias": (MOE_EXPERTS,),
    f"model.layers.{LAYERS}.mlp.experts.0.gate_proj.weight": (MOE_INTER, HIDDEN),
    f"model.layers.{LAYERS}.mlp.shared_experts.down_proj.weight": (HIDDEN, MOE_INTER),
}
# DeepSeek-V3: searched the same way, deepseek_v3 over 2600-2659: 12 of the 60 pass (2604 first),
# most fail on a gap or on bf16 picking other experts than fp32; 2604 has the largest min gap (fp32
# 1.2e-2, bf16 1.9e-2).  deepseek_v3_q_proj (one group, n_group 1 = topk_group: no group gap) over
# 2700-2759: 23 pass (2703 first); 2704 has the largest min gap (fp32 3.2e-2, bf16 3.3e-2).
SEED_DEEPSEEK_V3, SEED_DEEPSEEK_V3_Q_PROJ = 2604, 2704
# The same std for DeepSeek-V3's e_score_correction_bias (its choice scores are sigmoids too), and its
# MTP layer (released checkpoints: layer 61) as layer num_hidden_layers = 4: the MTP-only tensors
# (embed_tokens and shared_head.head are vocabulary-sized [V, H], like model.embed_tokens / lm_head,
# so a loader that matches on a name's tail would pick the wrong one) and a sample of the full
# decoder layer's (MLA attention, router, one routed and the shared expert).  [shape]; all float32.
DEEPSEEK_V3_SCORE_BIAS_STD = GLM4_MOE_SCORE_BIAS_STD
DEEPSEEK_V3_Q_LORA, DEEPSEEK_V3_KV_LORA = 32, 16
DEEPSEEK_V3_NOPE, DEEPSEEK_V3_ROPE, DEEPSEEK_V3_V = 16, 8, 12  # qk_nope / qk_rope / v head dims
DEEPSEEK_V3_HEADS = 4
# The DeepSeek-V3 fields both deepseek_v3 fixtures share (with COMMON): multi-head latent attention
# of 4 heads, v_head_dim 12 != qk_nope_head_dim 16 on purpose; layer 0 dense, the rest MoE (8 routed
# experts of intermediate 32, top-2, plus 1 shared expert); no biases, untied embeddings.
DEEPSEEK_V3_COMMON = dict(
    num_attention_heads=DEEPSEEK_V3_HEADS,
    num_key_value_heads=DEEPSEEK_V3_HEADS,
    kv_lora_rank=DEEPSEEK_V3_KV_LORA,
    qk_nope_head_dim=DEEPSEEK_V3_NOPE,
    qk_rope_head_dim=DEEPSEEK_V3_ROPE,
    v_head_dim=DEEPSEEK_V3_V,
    attention_bias=False,
    tie_word_embeddings=False,
    n_routed_experts=MOE_EXPERTS,
    num_experts_per_tok=2,
    moe_intermediate_size=MOE_INTER,
    n_shared_experts=1,
    routed_scaling_factor=2.5,
    norm_topk_prob=True,
    first_k_dense_replace=1,
    output_router_logits=False,
)
DEEPSEEK_V3_MTP_TENSORS = {
    f"model.layers.{LAYERS}.embed_tokens.weight": (VOCAB, HIDDEN),
    f"model.layers.{LAYERS}.enorm.weight": (HIDDEN,),
    f"model.layers.{LAYERS}.hnorm.weight": (HIDDEN,),
    f"model.layers.{LAYERS}.eh_proj.weight": (HIDDEN, 2 * HIDDEN),
    f"model.layers.{LAYERS}.shared_head.norm.weight": (HIDDEN,),
    f"model.layers.{LAYERS}.shared_head.head.weight": (VOCAB, HIDDEN),
    f"model.layers.{LAYERS}.input_layernorm.weight": (HIDDEN,),
    f"model.layers.{LAYERS}.self_attn.q_a_proj.weight": (DEEPSEEK_V3_Q_LORA, HIDDEN),
    f"model.layers.{LAYERS}.self_attn.q_a_layernorm.weight": (DEEPSEEK_V3_Q_LORA,),
    f"model.layers.{LAYERS}.self_attn.kv_a_proj_with_mqa.weight": (DEEPSEEK_V3_KV_LORA + DEEPSEEK_V3_ROPE,
                                                                   HIDDEN),
    f"model.layers.{LAYERS}.self_attn.kv_b_proj.weight": (
        DEEPSEEK_V3_HEADS * (DEEPSEEK_V3_NOPE + DEEPSEEK_V3_V), DEEPSEEK_V3_KV_LORA),
    f"model.layers.{LAYERS}.mlp.gate.weight": (MOE_EXPERTS, HIDDEN),
    f"model.layers.{LAYERS}.mlp.gate.e_score_correction_bias": (MOE_EXPERTS,),
    f"model.layers.{LAYERS}.mlp.experts.0.gate_proj.weight": (MOE_INTER, HIDDEN),
    f"model.layers.{LAYERS}.mlp.shared_experts.down_proj.weight": (HIDDEN, MOE_INTER),
}
# MiniMax-M2 fixture tokenizer: 510 byte-level BPE tokens, then <s>, </s> as the last two ids
# (MiniMax keeps its specials at the top of the vocabulary); no mask, no reserved tokens.
MINIMAX_BOS, MINIMAX_EOS = VOCAB - 2, VOCAB - 1
# Gemma 3: 6 layers in Gemma 3 4B's pattern (5 sliding : 1 full, here 2 : 1), head_dim 32 != hidden /
# heads = 16 and query_pre_attn_scalar 24 != head_dim (softmax scale 24^-0.5, not 32^-0.5), both on
# purpose; sliding_window 6 < the 16 reference positions.  RoPE per layer type as in Gemma 3 4B /
# 12B / 27B: full_attention layers theta 1e6 with linear scaling factor 8, sliding_attention layers
# plain theta 10000.  Gemma's RMSNorm is x * (1 + w) with w initialised at 0: every norm weight is
# drawn GEMMA3_NORM_STD * randn (reinit_ norm_center 0).  Gemma's specials: pad 0, eos 1, bos 2.
GEMMA3_LAYER_TYPES = ["sliding_attention", "sliding_attention", "full_attention",
                      "sliding_attention", "sliding_attention", "full_attention"]
GEMMA3_WINDOW, GEMMA3_QUERY_SCALAR, GEMMA3_NORM_STD = 6, 24, 0.2
GEMMA3_ROPE = {"full_attention": dict(rope_type="linear", factor=8.0, rope_theta=1000000.0),
               "sliding_attention": dict(rope_type="default", rope_theta=10000.0)}
# gemma3: a tiny SigLIP vision tower (1 layer, hidden 32, 28x28 images of 14x14 patches = 2x2 patches,
# average-pooled 2x2 -> mm_tokens_per_image 1), vision_use_head false as the released checkpoints;
# boi / eoi / image token ids inside the vocabulary as released (255999 / 256000 / 262144 of 262208),
# here 509 / 510 / 508 (508 is absent from the reference input_ids: asserted).
GEMMA3_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                     image_size=28, patch_size=14, num_channels=3, hidden_act="gelu_pytorch_tanh",
                     layer_norm_eps=1e-6, vision_use_head=False)
GEMMA3_BOI, GEMMA3_EOI, GEMMA3_IMAGE, GEMMA3_MM_TOKENS = 509, 510, 508, 1

# gpt-oss: the published models' shape of attention (sliding / full alternating, attention sinks, q/k/v/o
# biases, YaRN RoPE with their rope_parameters) and experts (top-4, clamped SwiGLU with biases),
# shrunk: 4 layers, 8 experts of intermediate 32, head_dim 16, sliding_window 4 < the 16 reference
# positions.  GPT_OSS_SWIGLU_LIMIT (published: 7.0) is low enough that the clamp engages on a visible
# share of the routed gate / up values (the gate_up pre-activations have std ~1.1 here; printed and
# recorded: check_gpt_oss).  Attention sinks (self_attn.sinks [heads], one logit per head appended to
# every softmax row, then dropped) are drawn GPT_OSS_SINK_STD * randn; router bias, expert biases
# (gate_up_proj_bias, down_proj_bias) and q/k/v/o biases take reinit_'s bias_std 0.5.
GPT_OSS_LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
GPT_OSS_WINDOW, GPT_OSS_SWIGLU_LIMIT, GPT_OSS_SINK_STD = 4, 1.25, 1.0
GPT_OSS_ROPE = dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                    truncate=False, original_max_position_embeddings=4096)
# searched over 2800-2859 the same way as the other MoE seeds (gap = the k-th minus the (k+1)-th router
# logit, routing_scores): 6 of the 60 pass (2803 first), most fail on bf16 picking other experts than
# fp32 (top-4 of 8 leaves small middle gaps); 2834 has the largest min gap (fp32 2.1e-2, bf16 2.3e-2).
SEED_GPT_OSS = 2834
GPT_OSS_MATERIAL = 0.5  # check_gpt_oss: max |dlogit| the clamp and the sinks must each make
GPT_OSS_WINDOW_TOL = 1e-4  # check_gpt_oss_window: a hidden state "changes" if it moves by more


def gemma3_text_config():
    """The Gemma3TextConfig of gemma3_text, also gemma3's text_config."""
    return Gemma3TextConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_hidden_layers=len(GEMMA3_LAYER_TYPES),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        query_pre_attn_scalar=GEMMA3_QUERY_SCALAR,
        hidden_activation="gelu_pytorch_tanh",
        rms_norm_eps=1e-6,
        sliding_window=GEMMA3_WINDOW,
        layer_types=list(GEMMA3_LAYER_TYPES),
        rope_parameters={k: dict(v) for k, v in GEMMA3_ROPE.items()},
        attention_bias=False,
        attention_dropout=0.0,
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )


def fixture_specs():
    """name -> dict(seed, config factory, model class, save dtype, shards, embed_std, moe, tokenizer)."""
    return {
        "llama3": dict(
            seed=1001,
            make_config=lambda: LlamaConfig(
                **COMMON,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                attention_bias=False,
                mlp_bias=False,
                rope_parameters=dict(
                    rope_type="llama3",
                    rope_theta=500000.0,
                    factor=8.0,
                    low_freq_factor=1.0,
                    high_freq_factor=4.0,
                    original_max_position_embeddings=64,
                ),
            ),
            cls=LlamaForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
        ),
        "mistral": dict(
            seed=1002,
            make_config=lambda: MistralConfig(
                **COMMON,
                num_attention_heads=4,
                num_key_value_heads=1,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                sliding_window=6,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            ),
            cls=MistralForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
        ),
        "qwen2": dict(
            seed=1003,
            make_config=lambda: Qwen2Config(
                **COMMON,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                use_sliding_window=False,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            ),
            cls=Qwen2ForCausalLM,
            save_dtype=torch.bfloat16,
            # bf16 weights total ~428 KB; 300 KB per shard -> exactly two shards (asserted below).
            max_shard_size="300KB",
        ),
        "qwen3": dict(
            seed=1004,
            make_config=lambda: Qwen3Config(
                **COMMON,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                max_position_embeddings=512,
                tie_word_embeddings=True,
                attention_bias=False,
                use_sliding_window=False,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            ),
            cls=Qwen3ForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            # tied: logits = norm(h) @ E^T, so the embedding scale sets the logit scale
            embed_std=0.4,
        ),
        # ---- mixture of experts (moe=True: router references, routing-gap and aux-loss checks) ----
        "qwen3_moe": dict(
            seed=SEED_QWEN3_MOE,
            make_config=lambda: Qwen3MoeConfig(
                **COMMON,  # intermediate_size 128: the dense MLP of the mlp_only layer
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                attention_bias=False,
                use_sliding_window=False,
                num_experts=MOE_EXPERTS,
                num_experts_per_tok=2,
                moe_intermediate_size=MOE_INTER,
                mlp_only_layers=[1],
                decoder_sparse_step=1,
                norm_topk_prob=True,
                output_router_logits=False,
                router_aux_loss_coef=0.001,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            ),
            cls=Qwen3MoeForCausalLM,
            save_dtype=torch.bfloat16,
            # bf16 weights total ~676 KB. transformers cuts shards in sorted-name order, moving a
            # layer's 8 experts' down_proj / gate_proj / up_proj as three blocks; 450 KB
            # (= 450000 B) per shard puts layer 2's experts.*.down_proj and experts.*.gate_proj in
            # shard 1 and its experts.*.up_proj in shard 2: exactly two shards, layer 2's experts
            # split across both (asserted in check_moe_shards).
            max_shard_size="450KB",
            moe=True,
        ),
        "mixtral": dict(
            seed=SEED_MIXTRAL,
            make_config=lambda: MixtralConfig(
                **{**COMMON, "intermediate_size": MOE_INTER},
                num_attention_heads=4,
                num_key_value_heads=1,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                sliding_window=None,
                num_local_experts=MOE_EXPERTS,
                num_experts_per_tok=2,
                output_router_logits=False,
                router_aux_loss_coef=0.02,
                router_jitter_noise=0.0,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            ),
            cls=MixtralForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            moe=True,
        ),
        "minimax_m2": dict(
            seed=SEED_MINIMAX_M2,
            make_config=lambda: MiniMaxM2Config(
                **{**COMMON, "intermediate_size": MOE_INTER,
                   "bos_token_id": MINIMAX_BOS, "eos_token_id": MINIMAX_EOS},
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                # the released checkpoints' legacy field; the config turns it into
                # rope_parameters.partial_rotary_factor = 16 / 32 (and keeps rotary_dim)
                rotary_dim=16,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                num_local_experts=MOE_EXPERTS,
                num_experts_per_tok=3,
                output_router_logits=False,
                router_aux_loss_coef=0.001,
                router_jitter_noise=0.0,
                rope_parameters=dict(rope_type="default", rope_theta=5000000.0),
            ),
            cls=MiniMaxM2ForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            moe=True,
            tokenizer=True,
        ),
        "glm4_moe": dict(
            seed=SEED_GLM4_MOE,
            make_config=lambda: Glm4MoeConfig(
                **COMMON,  # intermediate_size 128: the dense MLP of layer 0
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                # the released checkpoints' top-level field (also transformers' default); the
                # config moves it into rope_parameters: RoPE on the first 16 of 32 head dims
                partial_rotary_factor=0.5,
                attention_bias=True,  # q/k/v biased, o_proj not
                use_qk_norm=True,  # per-head RMSNorm [head_dim] of q and k, before RoPE
                max_position_embeddings=512,
                tie_word_embeddings=False,
                n_routed_experts=MOE_EXPERTS,
                num_experts_per_tok=2,
                moe_intermediate_size=MOE_INTER,
                n_shared_experts=1,
                n_group=2,
                topk_group=1,
                routed_scaling_factor=2.5,
                norm_topk_prob=True,
                first_k_dense_replace=1,
                num_nextn_predict_layers=1,  # the MTP layer: tensors only (GLM4_MOE_MTP_TENSORS)
                output_router_logits=False,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            ),
            cls=Glm4MoeForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            moe=True,
            score_bias_std=GLM4_MOE_SCORE_BIAS_STD,
            mtp_tensors=GLM4_MOE_MTP_TENSORS,
        ),
        "deepseek_v3": dict(
            seed=SEED_DEEPSEEK_V3,
            make_config=lambda: DeepseekV3Config(
                **COMMON,  # intermediate_size 128: the dense MLP of layer 0
                **DEEPSEEK_V3_COMMON,
                q_lora_rank=DEEPSEEK_V3_Q_LORA,  # q_a_proj -> q_a_layernorm -> q_b_proj
                n_group=2,
                topk_group=1,
                rope_interleave=True,  # the rope dims are pairs (x0, x1), (x2, x3), ...
                # YaRN: sequences of any length are scaled (the inv_freq are fixed, not dynamic);
                # factor 4 = max_position_embeddings / original_max_position_embeddings
                max_position_embeddings=128,
                rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                     original_max_position_embeddings=32, beta_fast=32.0, beta_slow=1.0,
                                     mscale=1.0, mscale_all_dim=1.0),
                num_nextn_predict_layers=1,  # the MTP layer: tensors only (DEEPSEEK_V3_MTP_TENSORS)
            ),
            cls=DeepseekV3ForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            moe=True,
            score_bias_std=DEEPSEEK_V3_SCORE_BIAS_STD,
            mtp_tensors=DEEPSEEK_V3_MTP_TENSORS,
        ),
        "deepseek_v3_q_proj": dict(
            seed=SEED_DEEPSEEK_V3_Q_PROJ,
            make_config=lambda: DeepseekV3Config(
                **{**COMMON, "num_hidden_layers": 2},  # layer 0 dense (intermediate 128), layer 1 MoE
                **DEEPSEEK_V3_COMMON,
                q_lora_rank=None,  # one self_attn.q_proj [heads * qk_head_dim, H]
                n_group=1,  # a single group of all 8 experts: plain top-2 of sigmoid + bias
                topk_group=1,
                rope_interleave=False,  # rotate_half over the rope dims (halves, not pairs)
                max_position_embeddings=512,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0),
                num_nextn_predict_layers=0,  # no MTP layer, no model.layers.2.* tensors
            ),
            cls=DeepseekV3ForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            moe=True,
            score_bias_std=DEEPSEEK_V3_SCORE_BIAS_STD,
        ),
        "gpt_oss": dict(
            seed=SEED_GPT_OSS,
            make_config=lambda: GptOssConfig(
                **{**COMMON, "intermediate_size": MOE_INTER, "rms_norm_eps": 1e-5},
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                attention_bias=True,  # q, k, v and o_proj biased
                sliding_window=GPT_OSS_WINDOW,
                layer_types=list(GPT_OSS_LAYER_TYPES),
                max_position_embeddings=131072,
                rope_parameters=dict(GPT_OSS_ROPE),
                tie_word_embeddings=False,
                num_local_experts=MOE_EXPERTS,
                num_experts_per_tok=4,
                swiglu_alpha=1.702,
                swiglu_limit=GPT_OSS_SWIGLU_LIMIT,
                output_router_logits=False,
                router_aux_loss_coef=0.001,
            ),
            cls=GptOssForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            moe=True,
            sink_std=GPT_OSS_SINK_STD,
        ),
        # ---- Gemma 3 (Gemma3RMSNorm (1 + w): norm weights drawn around 0, norm_center 0) ----
        "gemma3_text": dict(
            seed=1005,
            make_config=gemma3_text_config,
            cls=Gemma3ForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            # tied: logits = norm(h) @ E^T (std ~ 8 * embed_std), and the input embedding E[id] * sqrt(64)
            # = 8 E[id] stays in the residual stream, while every layer adds two RMS-normalised outputs
            # of RMS ~1: a larger embed_std makes the model mostly predict its input token (0.2: 41% of
            # the reference positions; 0.1: 6%) and greedy decoding repeat one token, insensitive to
            # the sliding window (make_generate_fixtures.py checks that it matters); 0.1 gives logits std
            # ~0.8
            embed_std=0.1,
            norm_center=0.0,
            norm_std=GEMMA3_NORM_STD,
        ),
        # the same language model (weights copied from gemma3_text's model.safetensors, not drawn)
        # inside Gemma3ForConditionalGeneration with a tiny vision tower: the same seed (so the same
        # input_ids) and references equal to gemma3_text's (asserted)
        "gemma3": dict(
            seed=1005,
            make_config=lambda: Gemma3Config(
                text_config=gemma3_text_config().to_dict(),
                vision_config=SiglipVisionConfig(**GEMMA3_VISION).to_dict(),
                mm_tokens_per_image=GEMMA3_MM_TOKENS,
                boi_token_index=GEMMA3_BOI,
                eoi_token_index=GEMMA3_EOI,
                image_token_index=GEMMA3_IMAGE,
                tie_word_embeddings=True,
            ),
            cls=Gemma3ForConditionalGeneration,
            save_dtype=torch.float32,
            max_shard_size=None,
            text_weights_from="gemma3_text",
        ),
    }


# MoE router [E, H] (not mlp.gate_proj); gpt-oss: mlp.router.weight
ROUTER_RE = re.compile(r"(^|\.)mlp\.(gate|router)\.weight$")
EXPERTS_RE = re.compile(r"(^|\.)mlp\.experts\.(gate_up_proj|down_proj)$")
EXPERT_BIAS_RE = re.compile(r"(^|\.)mlp\.experts\.(gate_up_proj_bias|down_proj_bias)$")  # gpt-oss


def reinit_(model, gen, embed_std=1.0, linear_gain=1.0, lm_head_gain=2.0, bias_std=0.5,
            router_gain=2.0, score_bias_std=0.1, norm_center=1.0, norm_std=0.1, sink_std=1.0):
    """Overwrite every parameter (and every persistent buffer) deterministically with a healthy spread.

    norms (input/post_attention/final/q_norm/k_norm; Gemma 3 also pre_/post_feedforward_layernorm):
        norm_center + norm_std*randn (1 + 0.1*randn; Gemma 3, whose RMSNorm scales by (1 + w): 0.2*randn)
    embed_tokens: embed_std * randn
    Linear weights [out, in]: gain * randn / sqrt(in)   (lm_head: lm_head_gain)
    biases: bias_std * randn (gpt-oss: also the router's mlp.router.bias [E] and the experts'
        mlp.experts.gate_up_proj_bias [E, 2I] / down_proj_bias [E, H])
    attention sinks self_attn.sinks [heads] (gpt-oss): sink_std * randn
    MoE router mlp.gate.weight (gpt-oss: mlp.router.weight) [E, H]: router_gain * randn / sqrt(H)
        (logit std ~router_gain: clearly non-uniform routing)
    MoE experts mlp.experts.gate_up_proj [E, 2I, H] / down_proj [E, H, I]: gain * randn / sqrt(last dim);
        transposed experts (the module's is_transposed, gpt-oss: gate_up_proj [E, H, 2I], down_proj
        [E, I, H]): gain * randn / sqrt(dim 1), the input dim either way
    persistent buffers (after all parameters, in named_buffers order): only MiniMax-M2's
        mlp.e_score_correction_bias [E] and GLM-4.5's mlp.gate.e_score_correction_bias [E]
        = score_bias_std * randn; any other one is an error.
    The random draws follow named_parameters() order, so models without MoE parameters get the
    same values as before these rules existed.
    """
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied params appear once
            shape = tuple(p.shape)
            r = torch.randn(shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                v = norm_center + norm_std * r
            elif "embed_tokens" in name:
                v = embed_std * r
            elif name.endswith(".bias") or EXPERT_BIAS_RE.search(name):
                v = bias_std * r
            elif name.endswith(".self_attn.sinks") and p.dim() == 1:
                v = sink_std * r
            elif name == "lm_head.weight":
                v = lm_head_gain * r / math.sqrt(shape[1])
            elif ROUTER_RE.search(name) and p.dim() == 2:
                v = router_gain * r / math.sqrt(shape[1])
            elif EXPERTS_RE.search(name) and p.dim() == 3:
                transposed = getattr(model.get_submodule(name.rsplit(".", 1)[0]), "is_transposed", False)
                v = linear_gain * r / math.sqrt(shape[1] if transposed else shape[2])
            elif p.dim() == 2:
                v = linear_gain * r / math.sqrt(shape[1])
            else:
                raise RuntimeError(f"unexpected parameter {name} {shape}")
            p.copy_(v.to(p.dtype))
        for mod_name, mod in model.named_modules():
            for bname, buf in mod._buffers.items():
                if buf is None or bname in mod._non_persistent_buffers_set:
                    continue  # e.g. RoPE inv_freq: derived from the config, not saved
                name = f"{mod_name}.{bname}"
                if (name.endswith("mlp.e_score_correction_bias")
                        or name.endswith("mlp.gate.e_score_correction_bias")) and buf.dim() == 1:
                    r = torch.randn(tuple(buf.shape), generator=gen, dtype=torch.float32)
                    buf.copy_((score_bias_std * r).to(buf.dtype))
                else:
                    raise RuntimeError(f"unexpected persistent buffer {name} {tuple(buf.shape)}")


def make_input_ids(seed, vocab):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(vocab, generator=g)[: BATCH * SEQ].view(BATCH, SEQ).clone()
    # make sure the extremes of the vocab are exercised
    ids[0, 7] = vocab - 1
    ids[1, 3] = 0
    ids[1, 12] = ids[1, 5]  # one repeated token within a row
    return ids.to(torch.int64)


def text_model(model):
    """The decoder stack: model.model, or model.model.language_model (Gemma3ForConditionalGeneration)."""
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


def rope_buffers(model):
    """{name: buffer} of the RoPE inverse frequencies (non-persistent, derived from the config):
    rotary_emb.inv_freq, or Gemma 3's per layer type {full,sliding}_attention_{,original_}inv_freq."""
    emb = text_model(model).rotary_emb
    if hasattr(emb, "layer_types"):  # Gemma3RotaryEmbedding
        return {n: b for n, b in emb.named_buffers() if n.endswith("inv_freq")}
    return {"inv_freq": emb.inv_freq}


def router_of(mlp):
    """The router of a sparse MoE block: mlp.gate, or gpt-oss's mlp.router (GptOssTopKRouter); None for
    a dense MLP."""
    if not hasattr(mlp, "experts"):
        return None
    router = getattr(mlp, "gate", None)
    return router if router is not None else getattr(mlp, "router", None)


def moe_routers(model):
    """{layer index: router module} for the decoder layers whose MLP is a sparse MoE block."""
    return {i: router_of(layer.mlp) for i, layer in enumerate(model.model.layers)
            if router_of(layer.mlp) is not None}


@torch.no_grad()
def run_forward(model, input_ids, moe=False):
    """Returns (logits F32, [hidden F32 per layer]) with hooks on model.model.layers[i]
    (text_model(model).layers[i]: Gemma3ForConditionalGeneration's model.model.language_model.layers[i]).

    moe=True: the forward also gets output_router_logits=True, hooks capture each MoE router's
    outputs, and a third item is returned: dict(router_logits={i: [B*T, E] in the model dtype},
    topk_index={i: [B*T, k]}, topk_weights={i: [B*T, k]}, aux_loss=out.aux_loss).
    Glm4MoeForCausalLM and DeepseekV3ForCausalLM compute no aux_loss (out.aux_loss is None): for them,
    aux_loss is what the other MoE models compute, transformers' load_balancing_loss_func(
    out.router_logits, num_experts, top_k, None) (Qwen3-MoE's copy of it), called here.
    """
    captured = {}
    handles = []
    decoder = text_model(model).layers
    for i, layer in enumerate(decoder):
        def hook(_mod, _inp, out, i=i):
            t = out[0] if isinstance(out, (tuple, list)) else out
            captured[i] = t.detach().to(torch.float32).clone()
        handles.append(layer.register_forward_hook(hook))
    routed = {}
    if moe:
        for i, gate in moe_routers(model).items():
            def gate_hook(_mod, _inp, out, i=i):
                # every router returns (router_logits, top_k_weights, top_k_index)
                routed[i] = (out[0].detach().clone(), out[2].detach().clone(), out[1].detach().clone())
            handles.append(gate.register_forward_hook(gate_hook))
    try:
        if moe:
            out = model(input_ids=input_ids, use_cache=False, output_router_logits=True)
        else:
            out = model(input_ids=input_ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    n = len(decoder)
    assert sorted(captured) == list(range(n)), captured.keys()
    logits = out.logits.detach().to(torch.float32).clone()
    hidden = [captured[i] for i in range(n)]
    if not moe:
        return logits, hidden
    layers = sorted(routed)
    assert layers == sorted(moe_routers(model)) and len(out.router_logits) == len(layers)
    for i, r in zip(layers, out.router_logits):  # the recorder sees the same tensors, in layer order
        assert torch.equal(r, routed[i][0]), i
    info = dict(router_logits={i: routed[i][0] for i in layers},
                topk_index={i: routed[i][1] for i in layers},
                topk_weights={i: routed[i][2] for i in layers},
                aux_loss=out.aux_loss)
    if info["aux_loss"] is None:
        assert isinstance(model, (Glm4MoeForCausalLM, DeepseekV3ForCausalLM)), type(model).__name__
        info["aux_loss"] = load_balancing_loss_func(out.router_logits, num_experts_of(model.config),
                                                    top_k_of(model.config), None)
    info["aux_loss"] = info["aux_loss"].detach().clone()
    return logits, hidden, info


EXPERTS_IMPL = "grouped_mm"  # transformers 5.x's default experts_implementation, requested explicitly


def load_model(path, dtype=torch.float32, experts=None):
    """experts: None for dense models, else the experts_implementation to request (MoE)."""
    kwargs = {} if experts is None else {"experts_implementation": experts}
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager", **kwargs)
    model.eval()
    assert model.config._attn_implementation == "eager"
    assert model.config.get_text_config()._attn_implementation == "eager"  # gemma3: its text_config too
    if experts is not None:
        assert model.config._experts_implementation == experts, model.config._experts_implementation
    return model


def dir_size(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in sorted(os.listdir(path)))


def check_sliding_window(model, input_ids, window):
    """Prove transformers applies Mistral's sliding window in eager mode.

    1) compare against the same weights with sliding_window=None: outputs must differ;
    2) perturb one token at position j and find which positions of layer 0's output change:
       must be exactly j <= i < j + window (token i sees keys i-window+1 .. i).
    """
    import copy

    full = copy.deepcopy(model)
    full.config.sliding_window = None
    full.model.config.sliding_window = None
    for layer in full.model.layers:
        layer.self_attn.config.sliding_window = None
    lw, _ = run_forward(model, input_ids)
    lf, hf = run_forward(full, input_ids)
    diff_full = (lw - lf).abs().max().item()
    # causal positions < window must agree exactly-ish, later ones must differ
    early = (lw[:, :window] - lf[:, :window]).abs().max().item()
    assert diff_full > 1e-3, f"sliding_window has no effect (max diff {diff_full})"
    assert early < 1e-4, f"positions < window differ ({early})"

    j = 3
    ids2 = input_ids.clone()
    ids2[:, j] = (ids2[:, j] + 1) % model.config.vocab_size
    _, h_a = run_forward(model, input_ids)
    _, h_b = run_forward(model, ids2)
    changed = ((h_a[0] - h_b[0]).abs().amax(dim=(0, 2)) > 0).nonzero().flatten().tolist()
    expect = list(range(j, min(j + window, SEQ)))
    assert changed == expect, f"layer-0 receptive field {changed} != {expect}"
    return diff_full, early, changed


def sliding_window_probe(model, input_ids, j=3):
    """The part check_gemma3_window and check_gpt_oss_window share (each then asserts its own receptive
    fields, with its own threshold for "changed").

    1) a deep copy with config.sliding_window = SEQ (every earlier key visible; the layers read the
       shared config): its logits must differ (by > 1e-3), those of positions < window agree (< 1e-4);
    2) perturb the token at position j (id + 1 mod vocab) and measure, per decoder layer, how far each
       position of its output moves.
    Returns (max |dlogit| vs no window, max |dlogit| of positions < window, j,
    [per layer: max |change| of each position's hidden state, F32 [T]])."""
    import copy

    cfg = model.config
    window = cfg.sliding_window
    wide = copy.deepcopy(model)
    wide.config.sliding_window = SEQ
    assert wide.model.config is wide.config
    lw, _ = run_forward(model, input_ids)
    lf, _ = run_forward(wide, input_ids)
    diff_full = (lw - lf).abs().max().item()
    early = (lw[:, :window] - lf[:, :window]).abs().max().item()
    assert diff_full > 1e-3, f"sliding_window has no effect (max diff {diff_full})"
    assert early < 1e-4, f"positions < window differ ({early})"

    ids2 = input_ids.clone()
    ids2[:, j] = (ids2[:, j] + 1) % cfg.vocab_size
    _, h_a = run_forward(model, input_ids)
    _, h_b = run_forward(model, ids2)
    per_pos = [(a - b).abs().amax(dim=(0, 2)) for a, b in zip(h_a, h_b)]
    return diff_full, early, j, per_pos


def check_gemma3_window(model, input_ids):
    """Prove transformers applies Gemma 3's sliding window (eager), to the sliding_attention layers only.

    1) the same weights with sliding_window = SEQ (every earlier key visible): outputs must differ,
       positions < window must agree;
    2) perturb the token at position j = 3 and find which positions of each layer's output change:
       layer 0 (sliding): j .. j+W-1; layer 1 (sliding): j .. j+2W-2; layer 2 (full): j .. T-1
       (token i of a sliding layer sees keys i-W+1 .. i).
    Returns (max |dlogit| vs no window, max |dlogit| of positions < window, {layer: changed positions})."""
    cfg = model.config
    window = cfg.sliding_window
    assert cfg.layer_types[:3] == ["sliding_attention", "sliding_attention", "full_attention"]
    for i, (attn, kind) in enumerate(zip((l.self_attn for l in model.model.layers), cfg.layer_types)):
        assert attn.sliding_window == (window if kind == "sliding_attention" else None), i
    diff_full, early, j, per_pos = sliding_window_probe(model, input_ids)
    changed = {}
    for layer, last in ((0, j + window - 1), (1, j + 2 * window - 2), (2, SEQ - 1)):
        changed[layer] = (per_pos[layer] > 0).nonzero().flatten().tolist()
        expect = list(range(j, min(last, SEQ - 1) + 1))
        assert changed[layer] == expect, f"layer-{layer} receptive field {changed[layer]} != {expect}"
    return diff_full, early, changed


def gemma3_inv_freq(cfg):
    """Gemma 3's RoPE inverse frequencies per layer type, written out (float64), d = head_dim:
    theta^(-2j/d) for j < d/2 (rope_type default), divided by factor (rope_type linear)."""
    d = cfg.head_dim
    out = {}
    for kind, rp in cfg.rope_parameters.items():
        inv = rp["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        if rp["rope_type"] == "linear":
            inv = inv / rp["factor"]
        else:
            assert rp["rope_type"] == "default", rp
        out[kind] = inv
    return out


def gemma3_reference(lm, cfg, input_ids):
    """Gemma 3's text model written out in float64 from the weights of lm (Gemma3TextModel) and the
    config, for input_ids [B, T] at positions 0..T-1, no cache, no padding: returns (logits [B, T, V],
    [hidden after layer i]).  Every choice a reimplementation must match:
      x = E[id] * sqrt(hidden_size)                          (scaled embedding; E is also the lm_head)
      rms(x, w) = x / sqrt(mean(x^2) + eps) * (1 + w)        (Gemma3RMSNorm)
      per layer, kind = layer_types[i]:
        a = attn(rms(x, input_layernorm)); x = x + rms(a, post_attention_layernorm)
        m = mlp(rms(x, pre_feedforward_layernorm)); x = x + rms(m, post_feedforward_layernorm)
      attn: q, k, v = projections viewed per head (head_dim d); q = rms(q, q_norm), k = rms(k, k_norm)
        per head over d, THEN RoPE (rotate_half: dims j and j + d/2 rotated by pos * inv_freq[kind][j]);
        scores = q.k * query_pre_attn_scalar^-0.5; key t visible from query s iff t <= s and, for
        sliding_attention, s - t < sliding_window; softmax; kv heads shared by num_heads / num_kv
        consecutive query heads; o_proj
      mlp: down(gelu_tanh(gate(h)) * up(h)), gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
      logits = rms(x, norm) @ E^T  (no final softcapping: final_logit_softcapping null)"""
    w = {n: p.detach().double() for n, p in lm.named_parameters()}
    b, t = input_ids.shape
    hsz, heads, kvh, d = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    eps, window = cfg.rms_norm_eps, cfg.sliding_window
    assert cfg.attn_logit_softcapping is None and cfg.final_logit_softcapping is None
    assert not cfg.attention_bias and not cfg.use_bidirectional_attention
    assert cfg.hidden_activation == "gelu_pytorch_tanh"
    inv_freq = gemma3_inv_freq(cfg)

    def rms(v, weight):
        return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight)

    def rotate(v, angle):  # v [B, T, heads, d], angle [T, d/2]
        cos, sin = angle.cos()[None, :, None, :], angle.sin()[None, :, None, :]
        x1, x2 = v[..., : d // 2], v[..., d // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    pos = torch.arange(t, dtype=torch.float64)
    q_pos, k_pos = pos[:, None], pos[None, :]
    x = w["embed_tokens.weight"][input_ids] * math.sqrt(hsz)
    hidden = []
    for i, kind in enumerate(cfg.layer_types):
        p = f"layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(b, t, heads, d)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(b, t, kvh, d)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(b, t, kvh, d)
        q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        angle = pos[:, None] * inv_freq[kind][None, :]
        q, k = rotate(q, angle), rotate(k, angle)
        k = k.repeat_interleave(heads // kvh, dim=2)
        v = v.repeat_interleave(heads // kvh, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * cfg.query_pre_attn_scalar ** -0.5
        visible = k_pos <= q_pos
        if kind == "sliding_attention":
            visible = visible & (q_pos - k_pos < window)
        else:
            assert kind == "full_attention", kind
        probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        a = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, heads * d)
        a = a @ w[p + "self_attn.o_proj.weight"].T
        x = x + rms(a, w[p + "post_attention_layernorm.weight"])
        h = rms(x, w[p + "pre_feedforward_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        g = 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))
        m = (g * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        x = x + rms(m, w[p + "post_feedforward_layernorm.weight"])
        hidden.append(x)
    logits = rms(x, w["norm.weight"]) @ w["embed_tokens.weight"].T
    return logits, hidden


@torch.no_grad()
def check_gemma3(model, input_ids, logits, hidden):
    """gemma3_text: what transformers built is what the config says (per layer: sliding window,
    softmax scale query_pre_attn_scalar^-0.5, RoPE buffers = gemma3_inv_freq with cos/sin factor 1;
    embed_scale sqrt(hidden_size); lm_head tied to embed_tokens) and the fp32 forward (logits,
    hidden) equals gemma3_reference (float64) to float32 rounding.  Also: the same forward with the
    norms read as w instead of (1 + w), with q/k-norm after RoPE, with RoPE swapped between the layer
    types, and with the softmax scale head_dim^-0.5 all move the logits by far more than that (so
    the fixture tells them apart).  Returns dict(inv_freq, scale, embed_scale, max_abs, max_abs_hidden,
    variants {name: max |dlogit|})."""
    cfg = model.config
    lm = text_model(model)
    emb = lm.rotary_emb
    ours = gemma3_inv_freq(cfg)
    bufs = rope_buffers(model)
    for kind, inv in ours.items():
        assert getattr(emb, f"{kind}_attention_scaling") == 1.0, kind
        for name in (f"{kind}_inv_freq", f"{kind}_original_inv_freq"):
            assert torch.allclose(bufs[name].double(), inv, rtol=1e-6, atol=0), (name, bufs[name], inv)
    scale = cfg.query_pre_attn_scalar ** -0.5
    for i, layer in enumerate(lm.layers):
        assert math.isclose(layer.self_attn.scaling, scale, rel_tol=1e-12), (i, layer.self_attn.scaling)
        assert layer.self_attn.head_dim == cfg.head_dim
    assert lm.embed_tokens.embed_scale.item() == math.sqrt(cfg.hidden_size)
    assert model.lm_head.weight.data_ptr() == lm.embed_tokens.weight.data_ptr(), "lm_head not tied"
    ref_logits, ref_hidden = gemma3_reference(lm, cfg, input_ids)
    diff = (ref_logits - logits.double()).abs().max().item()
    diff_h = max((r - h.double()).abs().max().item() for r, h in zip(ref_hidden, hidden))
    assert diff < 1e-4 and diff_h < 1e-4, f"written-out Gemma 3 differs from transformers' by {diff} / {diff_h}"

    # what the usual mistakes would cost (each must be >> the float32 error above)
    variants = {}
    plain_w = {n: p for n, p in lm.named_parameters() if n.endswith("norm.weight")}
    saved = {n: p.detach().clone() for n, p in plain_w.items()}
    try:  # RMSNorm read as x * w (Llama's form) instead of x * (1 + w)
        for n, p in plain_w.items():
            p.copy_(saved[n] - 1)
        variants["norm x*w instead of x*(1+w)"] = (run_forward(model, input_ids)[0] - logits).abs().max().item()
    finally:
        for n, p in plain_w.items():
            p.copy_(saved[n])
    for i, layer in enumerate(lm.layers):
        layer.self_attn.scaling = cfg.head_dim ** -0.5
    variants["softmax scale head_dim^-0.5"] = (run_forward(model, input_ids)[0] - logits).abs().max().item()
    for layer in lm.layers:
        layer.self_attn.scaling = scale
    swapped = {"full_attention": "sliding_attention", "sliding_attention": "full_attention"}
    orig = {k: getattr(emb, f"{k}_inv_freq").clone() for k in swapped}
    for k, other in swapped.items():
        setattr(emb, f"{k}_inv_freq", orig[other])
    variants["RoPE of the other layer type"] = (run_forward(model, input_ids)[0] - logits).abs().max().item()
    for k in swapped:
        setattr(emb, f"{k}_inv_freq", orig[k])
    setattr(emb, "full_attention_inv_freq", orig["full_attention"] * 8)
    variants["full_attention RoPE without linear factor"] = (run_forward(model, input_ids)[0]
                                                            - logits).abs().max().item()
    setattr(emb, "full_attention_inv_freq", orig["full_attention"])
    variants["no embedding scale"] = (gemma3_scaled_embedding_variant(model, input_ids, 1.0)
                                      - logits).abs().max().item()
    assert torch.equal(run_forward(model, input_ids)[0], logits), "restoring the model failed"
    assert min(variants.values()) > 100 * max(diff, 1e-6), variants
    return dict(inv_freq={k: v.tolist() for k, v in ours.items()}, scale=scale,
                embed_scale=lm.embed_tokens.embed_scale.item(), max_abs=diff, max_abs_hidden=diff_h,
                variants=variants)


def gemma3_scaled_embedding_variant(model, input_ids, embed_scale):
    """logits of the fp32 forward with the embedding multiplied by embed_scale instead of sqrt(H)."""
    buf = text_model(model).embed_tokens.embed_scale
    saved = buf.clone()
    try:
        buf.fill_(embed_scale)
        return run_forward(model, input_ids)[0]
    finally:
        buf.copy_(saved)


def gemma3_note(cfg, chk):
    """The reference.safetensors metadata "gemma3" of the gemma3* fixtures."""
    inv = {k: [float(f"{x:.9g}") for x in v] for k, v in chk["inv_freq"].items()}
    layers = ", ".join(f"{i} {k.split('_')[0]}" for i, k in enumerate(cfg.layer_types))
    full, slide = cfg.rope_parameters["full_attention"], cfg.rope_parameters["sliding_attention"]
    return (
        f"Gemma 3 text model: x = embed_tokens[id] * embed_scale, embed_scale = sqrt(hidden_size "
        f"{cfg.hidden_size}) = {chk['embed_scale']!r} (a float32 buffer cast to the weight dtype: in bf16 "
        f"sqrt(H) rounds to bf16, exact for H = 64); RMSNorm rms(x, w) = x / sqrt(mean(x^2) + "
        f"{cfg.rms_norm_eps}) * (1 + w) in float32, cast back to the activation dtype; per layer: x = x + "
        f"post_attention_layernorm(attn(input_layernorm(x))), x = x + post_feedforward_layernorm(mlp("
        f"pre_feedforward_layernorm(x))); attention: {cfg.num_attention_heads} heads, "
        f"{cfg.num_key_value_heads} kv heads, head_dim {cfg.head_dim}, no biases, q_norm / k_norm "
        f"[head_dim] per head BEFORE RoPE, softmax scale query_pre_attn_scalar^-0.5 = "
        f"{cfg.query_pre_attn_scalar}^-0.5 = {chk['scale']!r}, no attention softcapping; layer types "
        f"[{layers}]: sliding layers see keys t with s - t < sliding_window {cfg.sliding_window} (and t <= s), "
        f"full layers every t <= s; RoPE rotate_half (dims j, j + {cfg.head_dim // 2}), per layer type: "
        f"full_attention {full['rope_type']} (rope_theta {full['rope_theta']}, factor {full.get('factor')}: "
        f"inv_freq = theta^(-2j/d) / factor) inv_freq {inv['full_attention']}; sliding_attention "
        f"{slide['rope_type']} (rope_theta {slide['rope_theta']}) inv_freq {inv['sliding_attention']}; cos/sin "
        f"unscaled; mlp down(gelu_tanh(gate(h)) * up(h)); logits = norm(x) @ embed_tokens^T (tied, no "
        f"final softcapping).  Checked: written out in float64 (tools/make_model_fixtures.py "
        f"gemma3_reference), logits within {chk['max_abs']:.1e} and every hidden.{{i}} within "
        f"{chk['max_abs_hidden']:.1e} of the fp32 forward; max |dlogit| of the usual mistakes: "
        + "; ".join(f"{k} {v:.2f}" for k, v in chk["variants"].items()))


def is_gpt_oss(model):
    """gpt-oss (GptOssForCausalLM): mlp.router with bias, top-k of the logits, softmax over the chosen."""
    return getattr(model.config, "model_type", None) == "gpt_oss"


def is_group_limited(model):
    """GLM-4.5 (Glm4MoeTopkRouter), DeepSeek-V3 (DeepseekV3TopkRouter, the same code): group-limited
    top-k, e_score_correction_bias on mlp.gate."""
    return getattr(model.config, "n_group", None) is not None


def routing_scores(model, layer, router_logits):
    """The scores transformers' router takes the top-k of, for MoE layer `layer` (float32).

    Qwen3-MoE / Mixtral: softmax(router_logits in float32).  MiniMax-M2: sigmoid(router_logits in
    float32) + e_score_correction_bias (the selection score; the expert weights are the plain
    sigmoids of the chosen experts, renormalized).  GLM-4.5, DeepSeek-V3: sigmoid +
    mlp.gate.e_score_correction_bias, the score before the group limit (group_limited_routing).
    gpt-oss: the router logits themselves (router bias included; GptOssTopKRouter takes the top-k of
    the logits and softmaxes only the chosen ones), upcast to float32."""
    mlp = model.model.layers[layer].mlp
    logits = router_logits.float()
    if is_gpt_oss(model):
        return logits
    if is_group_limited(model):
        return torch.sigmoid(logits) + mlp.gate.e_score_correction_bias.float()
    if hasattr(mlp, "e_score_correction_bias"):
        return torch.sigmoid(logits) + mlp.e_score_correction_bias
    return torch.softmax(logits, dim=-1)


def group_limited_routing(config, router_logits, bias):
    """GLM-4.5's router (DeepSeek-V3's is the same code), written out (all float32), for rows of
    router logits [N, E]:
      s = sigmoid(logits); c = s + bias (the choice score); the E experts form n_group groups of
      E / n_group consecutive experts; group score = sum of the two largest c of the group; keep
      the topk_group best groups; chosen = the top-k of c over the kept groups' experts; weights =
      s of the chosen / (their sum + 1e-20) (norm_topk_prob) * routed_scaling_factor.
    Returns dict(index [N, k] (descending c), weights [N, k] (same order), expert_gap [N]: the k-th
    minus the (k+1)-th c among the kept groups' experts, group_gap [N]: the topk_group-th minus the
    (topk_group+1)-th group score; +inf where every group is kept, topk_group = n_group: the group
    limit never matters, as for deepseek_v3_q_proj's one group)."""
    n, e = router_logits.shape
    groups, keep, k = config.n_group, config.topk_group, config.num_experts_per_tok
    per_group = e // groups
    assert per_group * groups == e and per_group >= 2 and keep <= groups and k < keep * per_group
    s = torch.sigmoid(router_logits.float())
    c = s + bias.float()
    two_best = c.view(n, groups, per_group).sort(dim=-1, descending=True).values[..., :2]
    group_score = two_best[..., 0] + two_best[..., 1]
    g_sorted = group_score.sort(dim=-1, descending=True)
    kept = torch.zeros(n, groups, dtype=torch.bool)
    kept.scatter_(1, g_sorted.indices[:, :keep], True)
    kept_experts = kept.repeat_interleave(per_group, dim=1)  # [N, E], group j = experts j*P .. j*P+P-1
    c_kept = torch.where(kept_experts, c, torch.full_like(c, float("-inf")))
    e_sorted = c_kept.sort(dim=-1, descending=True)
    index = e_sorted.indices[:, :k]
    w = s.gather(1, index)
    if config.norm_topk_prob:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    w = w * config.routed_scaling_factor
    if keep == groups:
        group_gap = torch.full((n,), float("inf"))
    else:
        group_gap = g_sorted.values[:, keep - 1] - g_sorted.values[:, keep]
    return dict(index=index, weights=w,
                expert_gap=e_sorted.values[:, k - 1] - e_sorted.values[:, k], group_gap=group_gap)


def deepseek_v3_rope(config):
    """DeepSeek-V3's RoPE written out (float64): (inv_freq [qk_rope_head_dim / 2], softmax scale).
    default: inv_freq_j = theta^(-2j/d), d = qk_rope_head_dim; scale = qk_head_dim^-0.5.
    yarn: with f = factor, L = original_max_position_embeddings, dim(r) = d * ln(L / (2 pi r)) /
      (2 ln theta), low = max(floor(dim(beta_fast)), 0), high = min(ceil(dim(beta_slow)), d - 1),
      ramp_j = clamp((j - low) / (high - low), 0, 1): inv_freq_j = theta^(-2j/d) * (1 - ramp_j + ramp_j / f)
      (ramp 0: the original frequency, 1: divided by f); scale = qk_head_dim^-0.5 * m^2 with
      m = 0.1 * mscale_all_dim * ln(f) + 1 (DeepseekV3Attention's yarn_apply_mscale); cos/sin are
      multiplied by (0.1 mscale ln f + 1) / (0.1 mscale_all_dim ln f + 1) (1 here, asserted)."""
    rp = config.rope_parameters
    d, theta = config.qk_rope_head_dim, rp["rope_theta"]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    scale = (config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5
    if rp["rope_type"] == "yarn":
        f, length = rp["factor"], rp["original_max_position_embeddings"]

        def dim_of(rotations):
            return d * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low = max(math.floor(dim_of(rp["beta_fast"])), 0)
        high = min(math.ceil(dim_of(rp["beta_slow"])), d - 1)
        assert high > low, (low, high)
        ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        inv_freq = inv_freq * (1 - ramp) + inv_freq / f * ramp
        m = 0.1 * rp["mscale_all_dim"] * math.log(f) + 1
        scale *= m * m
    else:
        assert rp["rope_type"] == "default", rp
    return inv_freq, scale


def mla_reference(attn, config, x, inv_freq, scale):
    """One DeepseekV3Attention (multi-head latent attention) written out in float64, for its input x
    [B, T, H] at positions 0..T-1, causal, no cache.  rope_interleave: the RoPE dims of q and k are
    pairs (2j, 2j+1) rotated by inv_freq_j and kept in place (transformers writes them out
    de-interleaved, [rotated evens, rotated odds], for q and k alike: the same q.k); else rotate_half
    (dims j and j + d/2).  q_a_layernorm / kv_a_layernorm: their own eps (transformers' default 1e-6,
    not rms_norm_eps).  Returns the attention output [B, T, H] (after o_proj)."""
    b, t, _ = x.shape
    heads, nope, rope, dv, rank = (config.num_attention_heads, config.qk_nope_head_dim,
                                   config.qk_rope_head_dim, config.v_head_dim, config.kv_lora_rank)
    w = {n: p.detach().double() for n, p in attn.named_parameters()}
    x = x.double()

    def rms(v, norm, weight):
        return weight * v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)

    if attn.q_proj is not None:
        q = x @ w["q_proj.weight"].T
    else:
        q_a = rms(x @ w["q_a_proj.weight"].T, attn.q_a_layernorm, w["q_a_layernorm.weight"])
        q = q_a @ w["q_b_proj.weight"].T
    q = q.view(b, t, heads, nope + rope)
    ckv = x @ w["kv_a_proj_with_mqa.weight"].T
    latent, k_rope = ckv[..., :rank], ckv[..., rank:]  # k_rope [B, T, rope]: one head, shared
    kv = (rms(latent, attn.kv_a_layernorm, w["kv_a_layernorm.weight"]) @ w["kv_b_proj.weight"].T)
    kv = kv.view(b, t, heads, nope + dv)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [T, rope / 2]

    def rotate(v, angle):  # v [B, T, ..., rope], angle broadcast over the dims between
        cos, sin = angle.cos(), angle.sin()
        if config.rope_interleave:
            a, c = v[..., 0::2], v[..., 1::2]
            return torch.stack((a * cos - c * sin, c * cos + a * sin), dim=-1).flatten(-2)
        a, c = v[..., : rope // 2], v[..., rope // 2:]
        return torch.cat((a * cos - c * sin, c * cos + a * sin), dim=-1)

    q_rot = rotate(q[..., nope:], angle[:, None, :])
    k_rot = rotate(k_rope, angle)[:, :, None, :].expand(b, t, heads, rope)
    qk = torch.cat((q[..., :nope], q_rot), -1)
    kk = torch.cat((kv[..., :nope], k_rot), -1)
    scores = torch.einsum("bqhd,bkhd->bhqk", qk, kk) * scale
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    out = torch.einsum("bhqk,bkhd->bqhd", probs, kv[..., nope:]).reshape(b, t, heads * dv)
    return out @ w["o_proj.weight"].T


@torch.no_grad()
def check_deepseek_v3(model, input_ids):
    """deepseek_v3*: the attention transformers built is the one the config describes: q_proj xor the
    q_a_proj / q_a_layernorm / q_b_proj path, inv_freq and softmax scale as deepseek_v3_rope writes
    them, cos/sin factor 1, and every layer's attention output of the fp32 forward of input_ids equal
    (to float32 rounding) to mla_reference.  Returns dict(inv_freq, scale, mla_max_abs, attention)."""
    cfg = model.config
    inv_freq, scale = deepseek_v3_rope(cfg)
    emb = model.model.rotary_emb
    assert emb.attention_scaling == 1.0, emb.attention_scaling
    assert torch.allclose(emb.inv_freq.double(), inv_freq, rtol=1e-6, atol=0), (emb.inv_freq, inv_freq)
    captured, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        assert math.isclose(attn.scaling, scale, rel_tol=1e-12), (attn.scaling, scale)
        assert (attn.q_proj is None) == (cfg.q_lora_rank is not None)
        assert (attn.q_a_proj is None) == (attn.q_b_proj is None) == (cfg.q_lora_rank is None)

        def hook(_mod, _args, kwargs, out, i=i):
            captured[i] = (kwargs["hidden_states"].detach().clone(), out[0].detach().clone())
        handles.append(attn.register_forward_hook(hook, with_kwargs=True))
    try:
        model(input_ids=input_ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    assert sorted(captured) == list(range(cfg.num_hidden_layers))
    diff = max((mla_reference(model.model.layers[i].self_attn, cfg, x, inv_freq, scale) - y.double())
               .abs().max().item() for i, (x, y) in captured.items())
    assert diff < 1e-4, f"written-out MLA differs from transformers' by {diff}"
    return dict(inv_freq=inv_freq.tolist(), scale=scale, mla_max_abs=diff)


def mla_note(cfg, mla):
    """The reference.safetensors metadata "attention" of the deepseek_v3* fixtures."""
    nope, rope, dv = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    heads = cfg.num_attention_heads
    rp = cfg.rope_parameters
    if cfg.q_lora_rank is None:
        q = "q = self_attn.q_proj(x)"
    else:
        q = (f"q = q_b_proj(q_a_layernorm(q_a_proj(x))) (q_lora_rank {cfg.q_lora_rank}; q_a_layernorm "
             f"eps 1e-6, transformers' default, not rms_norm_eps)")
    if rp["rope_type"] == "yarn":
        freqs = (f"yarn (rope_theta {rp['rope_theta']}, factor {rp['factor']}, "
                 f"original_max_position_embeddings {rp['original_max_position_embeddings']}, beta_fast "
                 f"{rp['beta_fast']}, beta_slow {rp['beta_slow']}; static: every position is scaled, none "
                 f"is compared with the length)")
        scale = (f"{nope + rope}^-0.5 * m^2, m = 0.1 * mscale_all_dim {rp['mscale_all_dim']} * ln(factor) "
                 f"+ 1; cos/sin times (0.1 mscale ln f + 1) / (0.1 mscale_all_dim ln f + 1) = 1")
    else:
        freqs = f"default (rope_theta {rp['rope_theta']})"
        scale = f"{nope + rope}^-0.5"
    if cfg.rope_interleave:
        pairs = ("rope_interleave: dims (2j, 2j+1) of the RoPE part rotated by inv_freq[j] (transformers "
                 "returns them de-interleaved, [rotated even dims, rotated odd dims], for q and k alike)")
    else:
        pairs = f"rope_interleave false: rotate_half, dims (j, j + {rope // 2}) rotated by inv_freq[j]"
    inv_freq = [float(f"{v:.9g}") for v in mla["inv_freq"]]
    return (f"multi-head latent attention, {heads} heads, no biases: {q}, viewed "
            f"[T, {heads}, {nope} + {rope}]: the first qk_nope_head_dim {nope} without, the last "
            f"qk_rope_head_dim {rope} with RoPE; kv_a_proj_with_mqa(x) = [c (kv_lora_rank "
            f"{cfg.kv_lora_rank}), k_rope ({rope})]: kv_b_proj(kv_a_layernorm(c)) (eps 1e-6) viewed "
            f"[T, {heads}, {nope} + {dv}] = [k_nope, v], k_rope one head shared by all, with RoPE; scores "
            f"over [nope, rope] ({nope + rope} dims), softmax scale {mla['scale']!r} = {scale}; output "
            f"[T, {heads} * v_head_dim {dv}] -> o_proj.  RoPE {freqs}: inv_freq {inv_freq}; {pairs}.  "
            f"Checked: written out in float64 (tools/make_model_fixtures.py mla_reference), every layer's "
            f"attention output matches the fp32 forward within {mla['mla_max_abs']:.1e}")


def gpt_oss_rope(cfg):
    """gpt-oss's RoPE written out (float64): (inv_freq [head_dim / 2], attention_factor, (low, high)).
    YaRN with truncate false (the published rope_parameters): d = head_dim, theta = rope_theta, f = factor,
    L = original_max_position_embeddings, dim(r) = d * ln(L / (2 pi r)) / (2 ln theta), low =
    max(dim(beta_fast), 0), high = min(dim(beta_slow), d - 1) (NOT floored / ceiled: truncate false),
    ramp_j = clamp((j - low) / (high - low), 0, 1), inv_freq_j = theta^(-2j/d) * (1 - ramp_j + ramp_j / f);
    attention_factor = 0.1 * ln(f) + 1 multiplies cos and sin (so q.k by its square)."""
    rp = cfg.rope_parameters
    assert rp["rope_type"] == "yarn" and rp.get("truncate") is False, rp
    assert rp.get("attention_factor") is None and rp.get("mscale") is None, rp
    d, theta, f, length = cfg.head_dim, rp["rope_theta"], rp["factor"], rp["original_max_position_embeddings"]

    def dim_of(rotations):
        return d * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = max(dim_of(rp["beta_fast"]), 0.0), min(dim_of(rp["beta_slow"]), d - 1.0)
    ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    inv_freq = inv_freq * (1 - ramp) + inv_freq / f * ramp
    return inv_freq, 0.1 * math.log(f) + 1.0, (low, high)


# The usual mistakes a gpt-oss reimplementation can make; gpt_oss_reference(variant=...) computes each,
# check_gpt_oss records how far each moves the logits (all must move them by far more than float32
# rounding).  name -> what the variant does instead of transformers.
GPT_OSS_VARIANTS = {
    "no swiglu clamp": "no clamp of gate / up (swiglu_limit ignored)",
    "clamp gate on both sides": "gate clamped to [-limit, limit] instead of (-inf, limit]",
    "no sinks": "softmax over the keys only (sinks = -inf)",
    "gate/up as halves": "gate = gate_up[..., :I], up = gate_up[..., I:] instead of interleaved ::2 / 1::2",
    "up instead of (up + 1)": "expert hidden = up * glu instead of (up + 1) * glu",
    "alpha 1 (plain SiLU gate)": "glu = gate * sigmoid(gate) instead of sigmoid(1.702 gate)",
    "window sees 4 earlier": "sliding window: query s sees keys t > s - (window + 1) (one key more)",
    "window sees 2 earlier": "sliding window: query s sees keys t > s - (window - 1) (one key fewer)",
    "no sliding window": "every layer attends to all earlier keys",
    "RoPE pairs (2j, 2j+1)": "interleaved RoPE instead of halves (j, j + d/2)",
    "RoPE without attention_factor": "cos / sin not multiplied by 0.1 ln(factor) + 1",
    "RoPE without YaRN": "plain RoPE theta^(-2j/d), no attention_factor",
    "softmax over all experts": "weights = softmax over all E router logits at the top-k (not renormalised)",
}


def gpt_oss_reference(model, input_ids, variant=None):
    """gpt-oss (GptOssForCausalLM) written out in float64 from model's weights and config, for input_ids
    [B, T] at positions 0..T-1, no cache, no padding: returns (logits [B, T, V], [hidden after layer i]).
    variant: None (transformers' computation) or a key of GPT_OSS_VARIANTS.  Every choice:
      x = embed_tokens[id]  (no scaling)
      rms(x, w) = w * x / sqrt(mean(x^2) + rms_norm_eps)
      per layer: x = x + attn(rms(x, input_layernorm)); x = x + moe(rms(x, post_attention_layernorm))
      attn: q, k, v = h @ W^T + b viewed per head (head_dim d); RoPE on q and k: dims j and j + d/2
        rotated by pos * inv_freq_j (gpt_oss_rope), cos and sin times attention_factor; scores = q.k /
        sqrt(d); key t visible from query s iff t <= s and, for sliding_attention, s - t < sliding_window;
        p = softmax over [visible scores, sinks[head]] with the sink's column dropped afterwards (the
        probabilities of the keys sum to < 1); kv heads shared by num_heads / num_kv consecutive query
        heads; out = p @ v, then o_proj (with bias)
      moe: r = h @ router.weight^T + router.bias; chosen = top-k of r; weights = softmax(r[chosen]);
        per chosen expert e: gu = h @ gate_up_proj[e] + gate_up_proj_bias[e] ([E, H, 2I]: h @ W, not
        W^T); gate = gu[..., 0::2], up = gu[..., 1::2] (interleaved); gate = min(gate, limit), up =
        clamp(up, -limit, limit); y = (up + 1) * gate * sigmoid(alpha * gate); out_e = y @ down_proj[e]
        + down_proj_bias[e]; moe = sum_e weight_e * out_e
      logits = rms(x, norm) @ lm_head^T"""
    cfg = model.config
    assert variant is None or variant in GPT_OSS_VARIANTS, variant
    w = {n: p.detach().double() for n, p in model.named_parameters()}
    b, t = input_ids.shape
    heads, kvh, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    eps, window, k_top = cfg.rms_norm_eps, cfg.sliding_window, cfg.num_experts_per_tok
    inter, alpha, limit = cfg.intermediate_size, cfg.swiglu_alpha, cfg.swiglu_limit
    inv_freq, att_factor, _ = gpt_oss_rope(cfg)
    if variant == "RoPE without attention_factor":
        att_factor = 1.0
    if variant == "RoPE without YaRN":
        inv_freq = cfg.rope_parameters["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        att_factor = 1.0
    if variant == "window sees 4 earlier":
        window += 1
    if variant == "window sees 2 earlier":
        window -= 1
    if variant == "no swiglu clamp":
        limit = float("inf")
    if variant == "alpha 1 (plain SiLU gate)":
        alpha = 1.0

    def rms(v, weight):
        return weight * v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + eps)

    pos = torch.arange(t, dtype=torch.float64)
    angle = pos[:, None] * inv_freq[None, :]  # [T, d/2]
    cos, sin = (angle.cos() * att_factor)[None, :, None, :], (angle.sin() * att_factor)[None, :, None, :]

    def rotate(v):  # v [B, T, heads, d]
        if variant == "RoPE pairs (2j, 2j+1)":
            x1, x2 = v[..., 0::2], v[..., 1::2]
            return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        x1, x2 = v[..., : d // 2], v[..., d // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    q_pos, k_pos = pos[:, None], pos[None, :]
    x = w["model.embed_tokens.weight"][input_ids]
    hidden = []
    for i, kind in enumerate(cfg.layer_types):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])

        def proj(name, n):
            return (h @ w[p + f"self_attn.{name}.weight"].T + w[p + f"self_attn.{name}.bias"]).view(b, t, n, d)

        q, k, v = rotate(proj("q_proj", heads)), rotate(proj("k_proj", kvh)), proj("v_proj", kvh)
        k = k.repeat_interleave(heads // kvh, dim=2)
        v = v.repeat_interleave(heads // kvh, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
        visible = k_pos <= q_pos
        if kind == "sliding_attention" and variant != "no sliding window":
            visible = visible & (q_pos - k_pos < window)
        else:
            assert kind in ("full_attention", "sliding_attention"), kind
        scores = scores.masked_fill(~visible, float("-inf"))
        sinks = w[p + "self_attn.sinks"].view(1, heads, 1, 1).expand(b, heads, t, 1)
        if variant == "no sinks":
            sinks = torch.full_like(sinks, float("-inf"))
        probs = torch.cat((scores, sinks), dim=-1).softmax(-1)[..., :-1]
        a = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, heads * d)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T + w[p + "self_attn.o_proj.bias"]

        h = rms(x, w[p + "post_attention_layernorm.weight"]).reshape(b * t, -1)
        r = h @ w[p + "mlp.router.weight"].T + w[p + "mlp.router.bias"]
        top = r.topk(k_top, dim=-1)
        if variant == "softmax over all experts":
            weights = r.softmax(-1).gather(1, top.indices)
        else:
            weights = top.values.softmax(-1)
        m = torch.zeros_like(h)
        for slot in range(k_top):
            e = top.indices[:, slot]
            gu = torch.einsum("nh,nhj->nj", h, w[p + "mlp.experts.gate_up_proj"][e]) + \
                w[p + "mlp.experts.gate_up_proj_bias"][e]
            if variant == "gate/up as halves":
                gate, up = gu[:, :inter], gu[:, inter:]
            else:
                gate, up = gu[:, 0::2], gu[:, 1::2]
            if variant == "clamp gate on both sides":
                gate = gate.clamp(-limit, limit)
            else:
                gate = gate.clamp(max=limit)
            up = up.clamp(-limit, limit)
            glu = gate * torch.sigmoid(alpha * gate)
            y = up * glu if variant == "up instead of (up + 1)" else (up + 1) * glu
            out = torch.einsum("ni,nih->nh", y, w[p + "mlp.experts.down_proj"][e]) + \
                w[p + "mlp.experts.down_proj_bias"][e]
            m = m + weights[:, slot: slot + 1] * out
        x = x + m.view(b, t, -1)
        hidden.append(x)
    logits = rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T
    return logits, hidden


@torch.no_grad()
def check_gpt_oss(model, input_ids, logits, hidden, info):
    """gpt_oss: what transformers built is what the config says (RoPE buffers = gpt_oss_rope, cos/sin
    factor attention_factor; per layer softmax scale head_dim^-0.5, sliding window on the
    sliding_attention layers only, the experts' alpha and limit), and the fp32 forward (logits,
    hidden) equals gpt_oss_reference (float64) to float32 rounding.  Also measured in transformers
    itself (model copies): the swiglu clamp removed (experts.limit = inf) and the sinks set to -inf
    must both move the logits by >= GPT_OSS_MATERIAL; zeroed router bias / expert biases / attention
    biases (recorded); the share of routed gate / up values the clamp cuts (recorded: GptOssExperts.
    _apply_gate wrapped for one forward); every GPT_OSS_VARIANTS entry in float64.  Returns a dict."""
    import copy

    cfg = model.config
    emb = model.model.rotary_emb
    inv_freq, att_factor, (low, high) = gpt_oss_rope(cfg)
    assert torch.allclose(emb.inv_freq.double(), inv_freq, rtol=1e-6, atol=0), (emb.inv_freq, inv_freq)
    assert math.isclose(emb.attention_scaling, att_factor, rel_tol=1e-12), emb.attention_scaling
    for i, (layer, kind) in enumerate(zip(model.model.layers, cfg.layer_types)):
        attn, experts = layer.self_attn, layer.mlp.experts
        assert math.isclose(attn.scaling, cfg.head_dim ** -0.5, rel_tol=1e-12), i
        assert attn.sliding_window == (cfg.sliding_window if kind == "sliding_attention" else None), i
        assert experts.alpha == cfg.swiglu_alpha and experts.limit == cfg.swiglu_limit, i
        assert experts.is_transposed and not experts.is_concatenated and experts.has_bias, i
    ref_logits, ref_hidden = gpt_oss_reference(model, input_ids)
    diff = (ref_logits - logits.double()).abs().max().item()
    diff_h = max((r - h.double()).abs().max().item() for r, h in zip(ref_hidden, hidden))
    assert diff < 1e-4 and diff_h < 1e-4, f"written-out gpt-oss differs from transformers' by {diff} / {diff_h}"

    def moved(m):
        out = run_forward(m, input_ids)[0]
        d = (out - logits).abs()
        argmax = int((out.argmax(-1) != logits.argmax(-1)).sum().item())
        return dict(max_abs=d.max().item(), mean_abs=d.mean().item(), argmax_changed=argmax)

    measured = {}
    m = copy.deepcopy(model)
    for layer in m.model.layers:
        layer.mlp.experts.limit = float("inf")
    measured["swiglu clamp removed (experts.limit = inf)"] = moved(m)
    m = copy.deepcopy(model)
    for layer in m.model.layers:
        layer.self_attn.sinks.fill_(float("-inf"))
    measured["sinks = -inf"] = moved(m)
    m = copy.deepcopy(model)
    for layer in m.model.layers:
        layer.mlp.experts.gate_up_proj_bias.zero_()
        layer.mlp.experts.down_proj_bias.zero_()
    measured["expert biases = 0"] = moved(m)
    m = copy.deepcopy(model)
    for layer in m.model.layers:
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(layer.self_attn, proj).bias.zero_()
    measured["q/k/v/o biases = 0"] = moved(m)
    m = copy.deepcopy(model)
    for layer in m.model.layers:
        layer.mlp.router.bias.zero_()
    measured["router bias = 0"] = moved(m)
    del m
    for key in ("swiglu clamp removed (experts.limit = inf)", "sinks = -inf"):
        assert measured[key]["max_abs"] >= GPT_OSS_MATERIAL, (key, measured[key])
    # tokens whose chosen experts the router bias changes (fp32 forward's router logits)
    bias_changes = {}
    for i, r in info["router_logits"].items():
        bias = model.model.layers[i].mlp.router.bias
        plain = (r - bias).topk(cfg.num_experts_per_tok, dim=-1).indices.sort(-1).values
        biased = info["topk_index"][i].sort(-1).values
        bias_changes[i] = int((plain != biased).any(-1).sum().item())
    assert max(bias_changes.values()) >= 3, f"router bias barely matters: {bias_changes}"

    # share of the routed gate / up values the clamp changes
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    seen = []
    original = GptOssExperts._apply_gate

    def recording(self, gate_up):
        seen.append(gate_up.detach().clone())
        return original(self, gate_up)

    GptOssExperts._apply_gate = recording
    try:
        run_forward(model, input_ids)
    finally:
        GptOssExperts._apply_gate = original
    gu = torch.cat(seen, dim=0)
    limit = cfg.swiglu_limit
    assert gu.shape == (cfg.num_hidden_layers * BATCH * SEQ * cfg.num_experts_per_tok,
                        2 * cfg.intermediate_size), gu.shape
    gate, up = gu[:, 0::2], gu[:, 1::2]
    clamp = {"gate > limit": (gate > limit).float().mean().item(),
             "gate < -limit (not clamped)": (gate < -limit).float().mean().item(),
             "up > limit": (up > limit).float().mean().item(),
             "up < -limit": (up < -limit).float().mean().item(),
             "routed rows": gu.shape[0], "gate_up std": gu.std().item()}
    for key in ("gate > limit", "up > limit", "up < -limit"):
        assert clamp[key] >= 0.02, (key, clamp)

    variants = {}
    for name in GPT_OSS_VARIANTS:
        variants[name] = (gpt_oss_reference(model, input_ids, name)[0] - ref_logits).abs().max().item()
    assert min(variants.values()) > 100 * max(diff, 1e-6), variants
    return dict(inv_freq=inv_freq.tolist(), attention_factor=att_factor, ramp=(low, high), max_abs=diff,
                max_abs_hidden=diff_h, measured=measured, router_bias_changes_selection=bias_changes,
                clamp=clamp, variants=variants)


def check_gpt_oss_window(model, input_ids):
    """Prove transformers applies gpt-oss's sliding window (eager), to the sliding_attention layers only.
    1) the same weights with sliding_window = SEQ (every earlier key visible): outputs must differ,
       positions < window must agree;
    2) perturb the token at position j = 3 and find which positions of each layer's output change:
       layer 0 (sliding): j .. j+W-1 (token i sees keys i-W+1 .. i: itself and W-1 earlier), layer 1
       (full) and every later layer: j .. T-1.  "Changes" means by more than GPT_OSS_WINDOW_TOL: the
       other positions move by float32 rounding only (the perturbed token's other experts change the
       sizes of the experts' row groups, and with them the rounding of other tokens' products).
    Returns (max |dlogit| vs no window, max |dlogit| of positions < window, {layer: changed positions},
    the largest move of an unchanged position)."""
    cfg = model.config
    window = cfg.sliding_window
    assert cfg.layer_types[:2] == ["sliding_attention", "full_attention"]
    diff_full, early, j, per_pos = sliding_window_probe(model, input_ids)
    changed, noise = {}, 0.0
    for layer in range(cfg.num_hidden_layers):
        last = j + window - 1 if layer == 0 else SEQ - 1
        changed[layer] = (per_pos[layer] > GPT_OSS_WINDOW_TOL).nonzero().flatten().tolist()
        expect = list(range(j, last + 1))
        assert changed[layer] == expect, f"layer-{layer} receptive field {changed[layer]} != {expect}"
        unchanged = [i for i in range(SEQ) if i not in expect]
        noise = max(noise, per_pos[layer][unchanged].max().item() if unchanged else 0.0)
    return diff_full, early, changed, noise


def gpt_oss_note(cfg, chk):
    """The reference.safetensors metadata "gpt_oss" of the gpt_oss fixture: every numeric detail."""
    inv = [float(f"{x:.9g}") for x in chk["inv_freq"]]
    rp = cfg.rope_parameters
    layers = ", ".join(f"{i} {k.split('_')[0]}" for i, k in enumerate(cfg.layer_types))
    low, high = chk["ramp"]
    clamp = chk["clamp"]
    def fmt(d):
        return "; ".join(f"{k}: max {v['max_abs']:.2f}, mean {v['mean_abs']:.3f}, argmax changed at "
                         f"{v['argmax_changed']} of {BATCH * SEQ} positions" for k, v in d.items())
    return (
        f"gpt-oss: x = embed_tokens[id] (no scaling); RMSNorm rms(x, w) = w * x / sqrt(mean(x^2) + "
        f"{cfg.rms_norm_eps}) computed in float32 (bf16 forward: the bf16 weight times the float32 "
        f"normalised x, rounded once to bf16); per layer: x = x + attn(input_layernorm(x)), x = x + "
        f"moe(post_attention_layernorm(x)); logits = lm_head(norm(x)) (untied).  Attention: "
        f"{cfg.num_attention_heads} heads, {cfg.num_key_value_heads} kv heads (query head h uses kv head "
        f"h // {cfg.num_attention_heads // cfg.num_key_value_heads}), head_dim {cfg.head_dim}, q/k/v/o_proj "
        f"all with bias; softmax scale head_dim^-0.5; layer types [{layers}]: sliding layers see keys t with "
        f"s - t < sliding_window {cfg.sliding_window} and t <= s (itself and {cfg.sliding_window - 1} earlier "
        f"keys), full layers every t <= s; attention sinks: per head one logit self_attn.sinks[h] (not "
        f"scaled) joins every query row's softmax: p_t = exp(score_t) / (sum_visible exp(score) + "
        f"exp(sink_h)), the sink's own probability is dropped (rows sum to < 1; transformers subtracts the "
        f"row max, sink included, first, and runs this softmax in the activation dtype: bf16 in the bf16 "
        f"forward, where Llama's eager attention uses float32).  RoPE: halves (rotate_half: dims j and "
        f"j + {cfg.head_dim // 2}, "
        f"not interleaved pairs), cos/sin [T, {cfg.head_dim // 2}] of pos * inv_freq times attention_factor "
        f"0.1 * ln({rp['factor']}) + 1 = {chk['attention_factor']!r} (applied to q and k: scores grow by its "
        f"square); YaRN rope_theta {rp['rope_theta']}, factor {rp['factor']}, beta_fast {rp['beta_fast']}, "
        f"beta_slow {rp['beta_slow']}, original_max_position_embeddings "
        f"{rp['original_max_position_embeddings']}, truncate false: ramp bounds low {low:.9g}, high "
        f"{high:.9g} (unrounded), inv_freq_j = theta^(-2j/d) * (1 - ramp_j + ramp_j / factor) = {inv}; static "
        f"(the same at every position; max_position_embeddings {cfg.max_position_embeddings} unused).  MoE "
        f"(every layer): router logits r = h @ mlp.router.weight^T + mlp.router.bias; top-"
        f"{cfg.num_experts_per_tok} of r (of {cfg.num_local_experts}); weights = softmax of the "
        f"{cfg.num_experts_per_tok} chosen logits (in the activation dtype); expert e: gu = h @ "
        f"experts.gate_up_proj[e] ([E, H, 2I]: x @ W, not x @ W^T) + gate_up_proj_bias[e]; gate = gu[..., 0::2], "
        f"up = gu[..., 1::2] (interleaved columns); gate = min(gate, swiglu_limit {cfg.swiglu_limit}) (no "
        f"lower clamp), up = clamp(up, -{cfg.swiglu_limit}, {cfg.swiglu_limit}); y = (up + 1) * gate * "
        f"sigmoid(swiglu_alpha {cfg.swiglu_alpha} * gate); out = y @ experts.down_proj[e] ([E, I, H]) + "
        f"down_proj_bias[e]; moe = sum of weight * out over the chosen (no shared expert).  The clamp "
        f"engages on {100 * clamp['gate > limit']:.1f}% of the routed gate values (gate > limit), "
        f"{100 * clamp['up > limit']:.1f}% / {100 * clamp['up < -limit']:.1f}% of the up values (above / "
        f"below), while {100 * clamp['gate < -limit (not clamped)']:.1f}% of the gate values lie below "
        f"-limit, unclamped ({clamp['routed rows']} routed rows, gate_up std {clamp['gate_up std']:.3f}).  "
        f"Checked: written out in float64 (tools/make_model_fixtures.py gpt_oss_reference), logits within "
        f"{chk['max_abs']:.1e} and every hidden.{{i}} within {chk['max_abs_hidden']:.1e} of the fp32 forward.  "
        f"What the parts change, in transformers (fp32 logits vs the stored): {fmt(chk['measured'])}; the "
        f"router bias changes the chosen experts of {chk['router_bias_changes_selection']} tokens per layer.  "
        f"max |dlogit| of the usual mistakes (float64): "
        + "; ".join(f"{k} {v:.2f}" for k, v in chk["variants"].items()))


def routing_report(model, info, top_k, details=None):
    """Checks our reading of the router against the experts the model picked; returns
    (min over tokens and MoE layers of score[k-th] - score[(k+1)-th], {layer: that minimum}).

    GLM-4.5, DeepSeek-V3 (group-limited): the gap is min(expert gap, group gap) of group_limited_routing (the
    k-th vs (k+1)-th choice score within the kept groups, and the topk_group-th vs next group score),
    the routing weights are checked too (equal), and `details` (a dict, if given) gets
    {layer: (min expert gap, min group gap)}."""
    per_layer = {}
    for i, logits in info["router_logits"].items():
        theirs = info["topk_index"][i].sort(dim=-1)
        if is_group_limited(model):
            bias = model.model.layers[i].mlp.gate.e_score_correction_bias
            r = group_limited_routing(model.config, logits, bias)
            gaps = (r["expert_gap"].min().item(), r["group_gap"].min().item())
            per_layer[i] = min(gaps)
            if details is not None:
                details[i] = gaps
            ours = r["index"].sort(dim=-1)
            assert torch.equal(ours.values, theirs.values), f"layer {i}: group-limited top-k != the model's"
            w_ours = r["weights"].gather(1, ours.indices)
            w_theirs = info["topk_weights"][i].float().gather(1, theirs.indices)
            assert torch.equal(w_ours, w_theirs), \
                f"layer {i}: routing weights differ by {(w_ours - w_theirs).abs().max().item()}"
            continue
        scores = routing_scores(model, i, logits)
        top = scores.topk(top_k + 1, dim=-1).values
        per_layer[i] = (top[:, top_k - 1] - top[:, top_k]).min().item()
        ours = scores.topk(top_k, dim=-1).indices.sort(dim=-1).values
        assert torch.equal(ours, theirs.values), f"layer {i}: routing does not match the model's top-k"
        if is_gpt_oss(model):  # weights = softmax over the k chosen logits, in the logits' dtype
            chosen = logits.gather(1, info["topk_index"][i])
            w_ours = torch.softmax(chosen, dim=-1, dtype=logits.dtype)
            assert torch.equal(w_ours, info["topk_weights"][i]), f"layer {i}: gpt-oss routing weights differ"
    return min(per_layer.values()), per_layer


def selection_diffs(info_a, info_b):
    """Number of (token, MoE layer)s whose chosen expert sets differ between two forwards."""
    return sum(int((info_a["topk_index"][i].sort(-1).values != info_b["topk_index"][i].sort(-1).values)
                   .any(-1).sum().item()) for i in info_a["topk_index"])


def reference_aux_loss(router_logits, num_experts, top_k):
    """Switch-Transformer load-balancing loss written out independently of transformers:
    all MoE layers' rows together (L*N rows, no mask), p = softmax(logits),
    f_e = (#rows whose top-k holds e) / (L*N), P_e = mean_rows p_e, loss = E * sum_e f_e * P_e."""
    logits = torch.cat([router_logits[i].float() for i in sorted(router_logits)], dim=0)
    probs = torch.softmax(logits, dim=-1)
    chosen = probs.topk(top_k, dim=-1).indices
    f = torch.nn.functional.one_hot(chosen, num_experts).float().sum(dim=1).mean(dim=0)
    return num_experts * (f * probs.mean(dim=0)).sum()


def bias_changes_selection(model, info, top_k):
    """MiniMax-M2, GLM-4.5, DeepSeek-V3: {layer: number of tokens whose top-k with
    e_score_correction_bias differs from the top-k of the plain sigmoid scores} (fp32 forward; GLM-4.5,
    DeepSeek-V3: both group-limited)."""
    out = {}
    for i, logits in info["router_logits"].items():
        if is_group_limited(model):
            bias = model.model.layers[i].mlp.gate.e_score_correction_bias
            plain = group_limited_routing(model.config, logits, torch.zeros_like(bias))["index"]
            biased = group_limited_routing(model.config, logits, bias)["index"]
            plain, biased = plain.sort(dim=-1).values, biased.sort(dim=-1).values
        else:
            plain = torch.sigmoid(logits.float()).topk(top_k, dim=-1).indices.sort(dim=-1).values
            biased = routing_scores(model, i, logits).topk(top_k, dim=-1).indices.sort(dim=-1).values
        out[i] = int((plain != biased).any(dim=-1).sum().item())
    return out


def check_moe_shards(out_dir):
    """Two shard files, and some layer's expert tensors spread over both; returns that split."""
    with open(os.path.join(out_dir, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    assert sorted(set(weight_map.values())) == ["model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors"], weight_map
    files_per_layer = {}
    for key, file in weight_map.items():
        m = re.match(r"model\.layers\.(\d+)\..*\.experts\.", key)
        if m:
            files_per_layer.setdefault(int(m.group(1)), set()).add(file)
    split = sorted(i for i, files in files_per_layer.items() if len(files) == 2)
    assert split, f"no layer has its experts in both shards: {files_per_layer}"
    return split


# The byte-level BPE of the minimax_m2 fixture: Llama-3's split pattern + ByteLevel (the layout
# tools/make_demo_data.py uses, which tandem's tokenizer reads), trained on a fixed synthetic corpus.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TOKENIZER_SPECIALS = ["<s>", "</s>"]
TOKENIZER_SAMPLE = ("Hello, MiniMax-M2!  The 3 experts\tsaid: \"ok\" -- "
                    "caf\u00e9 \u00fcber \u4e2d\u6587 12345\n")


def tokenizer_corpus():
    rng = random.Random(20250612)
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
              "ch", "sh", "th", "st", "tr", "pl"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ee", "\u00e9"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "ng", "ck", "x"]
    words = sorted({"".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                            for _ in range(rng.randint(1, 3))) for _ in range(600)})
    weights = [1.0 / (1 + k) for k in range(len(words))]  # Zipf-like: frequent pairs to merge
    rng.shuffle(words)
    lines = []
    for _ in range(800):
        ws = rng.choices(words, weights=weights, k=rng.randint(3, 14))
        if rng.random() < 0.3:
            ws[0] = ws[0].capitalize()
        if rng.random() < 0.2:
            ws.insert(rng.randint(0, len(ws)), str(rng.randint(0, 99999)))
        lines.append(" ".join(ws) + rng.choice([".", ",", "!", "?", ":", ";", " --", ""]))
    return lines


def write_tokenizer(out_dir, bos_id, eos_id, vocab):
    """tokenizer.json (vocab-2 BPE tokens, then <s>, </s>) + tokenizer_config.json (no mask_token)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    n_plain = vocab - len(TOKENIZER_SPECIALS)
    trainer = trainers.BpeTrainer(vocab_size=n_plain, min_frequency=2, show_progress=False,
                                  special_tokens=[], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    assert tok.get_vocab_size() == n_plain, tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in TOKENIZER_SPECIALS])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    assert [tok.token_to_id(t) for t in TOKENIZER_SPECIALS] == [bos_id, eos_id]
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    config = {
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                      "rstrip": False, "single_word": False, "special": True}
            for t in TOKENIZER_SPECIALS},
        "bos_token": "<s>",
        "eos_token": "</s>",
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 512,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")

    # checks: through the tokenizers library and through transformers
    back = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    assert back.get_vocab_size(with_added_tokens=True) == vocab
    assert sorted(back.get_vocab(with_added_tokens=True).values()) == list(range(vocab))
    added = {i: t.content for i, t in back.get_added_tokens_decoder().items()}
    assert added == {bos_id: "<s>", eos_id: "</s>"}, added  # no mask, no reserved tokens
    ids = back.encode(TOKENIZER_SAMPLE).ids
    assert back.decode(ids, skip_special_tokens=False) == TOKENIZER_SAMPLE, ids
    wrapped = back.encode("<s>" + TOKENIZER_SAMPLE + "</s>").ids
    assert wrapped == [bos_id] + ids + [eos_id], wrapped
    hf = transformers.AutoTokenizer.from_pretrained(out_dir)
    assert len(hf) == vocab and hf.bos_token_id == bos_id and hf.eos_token_id == eos_id
    assert hf.mask_token is None and hf.mask_token_id is None
    assert hf(TOKENIZER_SAMPLE, add_special_tokens=True)["input_ids"] == ids
    assert hf.decode(ids) == TOKENIZER_SAMPLE
    return dict(sample_tokens=len(ids), sample_chars=len(TOKENIZER_SAMPLE))


def top_k_of(config):
    return config.num_experts_per_tok


def num_experts_of(config):
    return config.num_experts if hasattr(config, "num_experts") else config.num_local_experts


def add_mtp_tensors(out_dir, mtp_tensors, seed):
    """Rewrites model.safetensors with the tensors {name: shape} added (random float32, drawn in
    that order from a generator seeded seed + 17: norms 1 + 0.1 * randn, e_score_correction_bias
    0.1 * randn, matrices randn / sqrt(in)); the existing tensors (values, dtypes) and the metadata
    stay as save_pretrained wrote them (asserted), the file is laid out by write_safetensors."""
    path = os.path.join(out_dir, "model.safetensors")
    with safe_open(path, "pt") as f:
        meta = f.metadata()
        before = {k: f.get_tensor(k) for k in f.keys()}
    assert meta == {"format": "pt"}, meta
    tensors = dict(before)
    g = torch.Generator().manual_seed(seed + 17)
    for name, shape in mtp_tensors.items():
        assert name not in tensors, name
        r = torch.randn(shape, generator=g, dtype=torch.float32)
        if name.endswith("norm.weight"):
            tensors[name] = 1.0 + 0.1 * r
        elif name.endswith("e_score_correction_bias"):
            tensors[name] = 0.1 * r
        else:
            assert len(shape) == 2, (name, shape)
            tensors[name] = r / math.sqrt(shape[1])
    write_safetensors(path, tensors, meta)
    with safe_open(path, "pt") as f:
        assert f.metadata() == meta and sorted(f.keys()) == sorted(tensors)
        for k, t in before.items():
            back = f.get_tensor(k)
            assert back.dtype == t.dtype and torch.equal(back, t), k
    return list(mtp_tensors)


def init_from_text_fixture_(model, gen, text_dir):
    """gemma3: the language model's weights are text_dir's model.safetensors (gemma3_text: model.X ->
    model.language_model.X, lm_head tied to its embed_tokens), loaded strictly; the vision tower and the
    projector, never used by the references, are drawn from gen in named_parameters() order: LayerNorm
    weights 1 + 0.1*randn, biases 0.1*randn, mm_soft_emb_norm (a Gemma3RMSNorm, (1 + w)) 0.2*randn,
    mm_input_projection_weight [vision hidden, text hidden] (applied as x @ W) randn / sqrt(rows), the
    rest (patch conv [32, 3, 14, 14], position embedding, projections) randn / sqrt(fan_in)."""
    with safe_open(os.path.join(text_dir, "model.safetensors"), "pt") as f:
        text = {k: f.get_tensor(k) for k in f.keys()}
    assert all(k.startswith("model.") for k in text), sorted(text)
    lm = text_model(model)
    with torch.no_grad():
        lm.load_state_dict({k[len("model."):]: v for k, v in text.items()}, strict=True)
        for name, p in model.named_parameters():  # tied params appear once
            if name.startswith("model.language_model."):
                continue
            assert name.startswith(("model.vision_tower.", "model.multi_modal_projector.")), name
            shape = tuple(p.shape)
            r = torch.randn(shape, generator=gen, dtype=torch.float32)
            if name.endswith("mm_soft_emb_norm.weight"):
                v = GEMMA3_NORM_STD * r
            elif re.search(r"(layer_norm\d|layernorm)\.weight$", name):
                v = 1.0 + 0.1 * r
            elif name.endswith(".bias"):
                v = 0.1 * r
            elif name.endswith("mm_input_projection_weight"):
                v = r / math.sqrt(shape[0])
            elif p.dim() >= 2:
                v = r / math.sqrt(math.prod(shape[1:]))
            else:
                raise RuntimeError(f"unexpected parameter {name} {shape}")
            p.copy_(v.to(p.dtype))
    assert model.lm_head.weight.data_ptr() == lm.embed_tokens.weight.data_ptr(), "lm_head not tied"


def rename_checkpoint(src_dir, dst_dir, rename):
    """A copy of src_dir (config.json, generation_config.json, model.safetensors) whose tensor names
    are rename(name)."""
    os.makedirs(dst_dir)
    for f in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(src_dir, f), os.path.join(dst_dir, f))
    with safe_open(os.path.join(src_dir, "model.safetensors"), "pt") as f:
        meta = f.metadata()
        tensors = {rename(k): f.get_tensor(k) for k in f.keys()}
    write_safetensors(os.path.join(dst_dir, "model.safetensors"), tensors, meta)


@torch.no_grad()
def check_gemma3_vlm(out_dir, text_dir, input_ids, logits):
    """gemma3: what save_pretrained wrote and what loads.  The checkpoint's language model tensors are
    gemma3_text's, bit for bit, under language_model.model.* (transformers 5.23 saves Gemma 3 in the
    released checkpoints' layout, reversing its load-time renaming to model.language_model.*); the
    vision tower is saved as vision_tower.* (the released checkpoints: vision_tower.vision_model.*).
    Both other spellings load too, with no missing / unexpected keys and the same logits: the module
    names model.language_model.* / model.vision_tower.* / model.multi_modal_projector.*, and
    vision_tower.vision_model.*.  Smoke test of the vision path (not stored): one 28x28 image (1 token)
    changes the logits from its position on, not before.  Returns dict(tensors {name: shape},
    prefixes, renamed {spelling: max |dlogit|}, image)."""
    import tempfile

    with safe_open(os.path.join(text_dir, "model.safetensors"), "pt") as f:
        text = {k: f.get_tensor(k) for k in f.keys()}
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        vlm = {k: f.get_tensor(k) for k in f.keys()}
    lm_keys = {k for k in vlm if k.startswith("language_model.model.")}
    assert lm_keys == {"language_model." + k for k in text}, sorted(lm_keys ^ {"language_model." + k for k in text})
    for k, t in text.items():
        assert vlm["language_model." + k].dtype == t.dtype and torch.equal(vlm["language_model." + k], t), k
    rest = sorted(set(vlm) - lm_keys)
    assert all(k.startswith(("vision_tower.", "multi_modal_projector.")) for k in rest), rest
    assert not any(k.startswith("vision_tower.vision_model.") or "lm_head" in k for k in vlm)

    def load(path):
        m, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
        m.eval()
        assert type(m) is Gemma3ForConditionalGeneration, type(m).__name__
        assert not any(info.values()), info
        return m

    base = load(out_dir)
    base_sd = {k: v.clone() for k, v in base.state_dict().items()}
    renames = {
        "model.language_model.*, model.vision_tower.*, model.multi_modal_projector.*":
            lambda k: re.sub(r"^language_model\.model\.", "model.language_model.",
                             re.sub(r"^(vision_tower|multi_modal_projector)\.", r"model.\1.", k)),
        "vision_tower.vision_model.*": lambda k: re.sub(r"^vision_tower\.", "vision_tower.vision_model.", k),
    }
    renamed = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (spelling, fn) in enumerate(renames.items()):
            path = os.path.join(tmp, str(i))
            rename_checkpoint(out_dir, path, fn)
            m = load(path)
            sd = m.state_dict()
            assert sorted(sd) == sorted(base_sd) and all(torch.equal(sd[k], base_sd[k]) for k in sd), spelling
            renamed[spelling] = (run_forward(m, input_ids)[0] - logits).abs().max().item()
            assert renamed[spelling] == 0.0, (spelling, renamed[spelling])
            del m

    cfg = base.config
    g = torch.Generator().manual_seed(4242)
    ids = input_ids[:1].clone()
    at = 5
    ids[0, at] = cfg.image_token_id
    assert cfg.mm_tokens_per_image == 1 and (input_ids != cfg.image_token_id).all()
    pixels = torch.randn(1, 3, cfg.vision_config.image_size, cfg.vision_config.image_size, generator=g)
    with_image = base(input_ids=ids, pixel_values=pixels, use_cache=False).logits
    text_only = base(input_ids=ids, use_cache=False).logits
    moved = (with_image - text_only).abs().amax(dim=(0, 2))
    assert torch.isfinite(with_image).all() and moved[:at].max() == 0 and moved[at:].min() > 1e-3, moved
    return dict(tensors={k: list(v.shape) for k, v in sorted(vlm.items())},
                prefixes=sorted({".".join(k.split(".")[:2]) for k in vlm}), renamed=renamed,
                image=f"image token at position {at}: logits from {at} on move by >= {moved[at:].min().item():.3f}")


def build_fixture(name, spec, out_root):
    seed = spec["seed"]
    moe = spec.get("moe", False)
    experts = EXPERTS_IMPL if moe else None
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = spec["make_config"]()
    config._attn_implementation = "eager"
    model = spec["cls"](config).to(torch.float32)
    text_dir = None
    if spec.get("text_weights_from"):  # gemma3: gemma3_text's language model inside a VLM wrapper
        text_dir = os.path.join(out_root, spec["text_weights_from"])
        init_from_text_fixture_(model, gen, text_dir)
    else:
        reinit_(model, gen, embed_std=spec.get("embed_std", 1.0), score_bias_std=spec.get("score_bias_std", 0.1),
                norm_center=spec.get("norm_center", 1.0), norm_std=spec.get("norm_std", 0.1),
                sink_std=spec.get("sink_std", 1.0))
    model.eval()

    out_dir = os.path.join(out_root, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    to_save = model.to(spec["save_dtype"])
    to_save.config.dtype = spec["save_dtype"]
    kwargs = {}
    if spec["max_shard_size"] is not None:
        kwargs["max_shard_size"] = spec["max_shard_size"]
    to_save.save_pretrained(out_dir, **kwargs)
    del to_save, model

    files = sorted(os.listdir(out_dir))
    extra = {}
    if spec["max_shard_size"] is not None:
        want = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                "model.safetensors.index.json"}
        assert want <= set(files) and "model.safetensors" not in files, files
        if moe:
            extra["experts_split_layers"] = check_moe_shards(out_dir)
    else:
        assert "model.safetensors" in files and not any(f.endswith(".index.json") for f in files), files
    if spec.get("tokenizer"):
        extra["tokenizer"] = write_tokenizer(out_dir, config.bos_token_id, config.eos_token_id,
                                             config.vocab_size)

    # References always come from the checkpoint as stored on disk, loaded in fp32.
    model = load_model(out_dir, torch.float32, experts)
    assert type(model) is spec["cls"], type(model).__name__
    input_ids = make_input_ids(seed + 7, config.get_text_config().vocab_size)
    if moe:
        logits, hidden, info = run_forward(model, input_ids, moe=True)
    else:
        logits, hidden = run_forward(model, input_ids)
    assert torch.isfinite(logits).all()

    if spec.get("mtp_tensors"):
        # the MTP layer's tensors go in after the reference forward; the checkpoint with them
        # loads with only unexpected keys and gives the same outputs
        extra["mtp_tensors"] = add_mtp_tensors(out_dir, spec["mtp_tensors"], seed)
        m2, loading = AutoModelForCausalLM.from_pretrained(
            out_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation=experts,
            output_loading_info=True)
        m2.eval()
        assert m2.config._experts_implementation == experts and m2.config._attn_implementation == "eager"
        assert not loading["missing_keys"] and not loading["mismatched_keys"], loading
        mtp_prefix = f"model.layers.{config.num_hidden_layers}."
        assert loading["unexpected_keys"] and all(
            k.startswith(mtp_prefix) for k in loading["unexpected_keys"]), loading
        l2, h2, info2 = run_forward(m2, input_ids, moe=moe)
        assert torch.equal(l2, logits) and all(torch.equal(a, b) for a, b in zip(h2, hidden))
        assert all(torch.equal(info2["router_logits"][i], r) for i, r in info["router_logits"].items())
        extra["mtp_unexpected_keys"] = sorted(loading["unexpected_keys"])
        del m2

    if name == "mistral":
        extra["sliding_window_check"] = check_sliding_window(model, input_ids, config.sliding_window)
    if name == "gemma3_text":
        extra["gemma3_window_check"] = check_gemma3_window(model, input_ids)
        extra["gemma3"] = check_gemma3(model, input_ids, logits, hidden)
    if text_dir is not None:
        extra["vlm"] = check_gemma3_vlm(out_dir, text_dir, input_ids, logits)
    if moe:
        top_k, n_exp = top_k_of(model.config), num_experts_of(model.config)
        moe_layers = sorted(info["router_logits"])
        assert all(info["router_logits"][i].dtype == torch.float32 for i in moe_layers)
        extra["moe_layers"] = moe_layers
        if is_group_limited(model):
            extra["gaps"] = {"fp32": {}, "bf16": {}}
        extra["min_gap"], extra["min_gap_per_layer"] = routing_report(model, info, top_k,
                                                                      extra.get("gaps", {}).get("fp32"))
        ours = reference_aux_loss(info["router_logits"], n_exp, top_k)
        extra["aux_loss"] = info["aux_loss"].item()
        assert abs(ours.item() - extra["aux_loss"]) <= 1e-6, (ours.item(), extra["aux_loss"])
        if name == "minimax_m2":
            changed = bias_changes_selection(model, info, top_k)
            extra["bias_changes_selection"] = changed
            assert max(changed.values()) >= 3, f"e_score_correction_bias barely matters: {changed}"
            assert model.model.rotary_emb.inv_freq.numel() == 8  # rotary_dim 16 of head_dim 32
            extra["score_bias_dtype"] = {"fp32": str(model.model.layers[0].mlp.e_score_correction_bias.dtype)}
        if is_group_limited(model):  # glm4_moe, deepseek_v3*
            changed = bias_changes_selection(model, info, top_k)
            extra["bias_changes_selection"] = changed
            assert max(changed.values()) >= 3, f"e_score_correction_bias barely matters: {changed}"
            if name == "glm4_moe":
                assert model.model.rotary_emb.inv_freq.numel() == 8  # partial_rotary_factor 0.5 of head_dim 32
            else:
                extra["mla"] = check_deepseek_v3(model, input_ids)
            assert moe_layers == list(range(config.first_k_dense_replace, config.num_hidden_layers))
            first_moe = model.model.layers[moe_layers[0]].mlp
            extra["score_bias_dtype"] = {"fp32": str(first_moe.gate.e_score_correction_bias.dtype)}
        if is_gpt_oss(model):
            assert moe_layers == list(range(config.num_hidden_layers))
            extra["gpt_oss"] = check_gpt_oss(model, input_ids, logits, hidden, info)
            extra["gpt_oss_window_check"] = check_gpt_oss_window(model, input_ids)

    # bf16 reference = what transformers computes for this checkpoint loaded in bf16
    # (from_pretrained(dtype=bfloat16)): every weight rounded to bf16, RoPE inv_freq kept fp32.
    model_bf16 = load_model(out_dir, torch.bfloat16, experts)
    assert all(b.dtype == torch.float32 for b in rope_buffers(model_bf16).values())
    if is_gpt_oss(model_bf16):  # _keep_in_fp32_modules (the norms) only applies to float16 loads
        assert all(p.dtype == torch.bfloat16 for p in model_bf16.parameters())
    if moe:
        logits_bf16, hidden_bf16, info_bf16 = run_forward(model_bf16, input_ids, moe=True)
        extra["min_gap_bf16"], extra["min_gap_bf16_per_layer"] = routing_report(
            model_bf16, info_bf16, top_k, extra.get("gaps", {}).get("bf16"))
        # scale of the bf16 forward's error in the routing scores, to compare with the gaps
        extra["bf16_score_err"] = max(
            (routing_scores(model_bf16, i, info_bf16["router_logits"][i])
             - routing_scores(model, i, info["router_logits"][i])).abs().max().item() for i in moe_layers)
        extra["bf16_vs_fp32_selection_differs"] = selection_diffs(info, info_bf16)
        if name == "minimax_m2":
            bias = model_bf16.model.layers[0].mlp.e_score_correction_bias
            extra["score_bias_dtype"]["bf16"] = str(bias.dtype)
        if is_group_limited(model_bf16):
            bias = model_bf16.model.layers[moe_layers[0]].mlp.gate.e_score_correction_bias
            extra["score_bias_dtype"]["bf16"] = str(bias.dtype)
            assert bias.dtype == torch.float32  # _keep_in_fp32_modules_strict
    else:
        logits_bf16, hidden_bf16 = run_forward(model_bf16, input_ids)
    assert torch.isfinite(logits_bf16).all()
    del model_bf16
    # Cross-check: identical to the fp32 model after model.to(torch.bfloat16) with inv_freq
    # restored to fp32.  A plain model.to(torch.bfloat16) also rounds the non-persistent
    # inv_freq buffer to bf16 (RoPE angles off by up to ~pos * 2^-9 rad); that variant is only
    # measured, not stored.  GLM-4.5, DeepSeek-V3: the cast also rounds the routers'
    # e_score_correction_bias, which the bf16 load keeps float32 (_keep_in_fp32_modules_strict):
    # restored for the cross-check too (the plain variant keeps it bf16).
    inv_freq = {n: b.clone() for n, b in rope_buffers(model).items()}
    fp32_gate_bias = {}
    if moe and is_group_limited(model):
        fp32_gate_bias = {i: model.model.layers[i].mlp.gate.e_score_correction_bias.clone()
                          for i in moe_layers}
    model = model.to(torch.bfloat16)
    if moe:
        lit_logits, _, lit_info = run_forward(model, input_ids, moe=True)
    else:
        lit_logits, _ = run_forward(model, input_ids)
    for n, b in inv_freq.items():
        setattr(text_model(model).rotary_emb, n, b)
    for i, bias in fp32_gate_bias.items():
        model.model.layers[i].mlp.gate.e_score_correction_bias = bias
    cast_logits, cast_hidden = run_forward(model, input_ids)
    assert torch.equal(cast_logits, logits_bf16) and all(
        torch.equal(a, b) for a, b in zip(cast_hidden, hidden_bf16)), "bf16 load != fp32 model cast to bf16"
    extra["literal_to_bf16_vs_stored_max_abs"] = (lit_logits - logits_bf16).abs().max().item()
    if moe:
        # How robust is the bf16 expert selection?  Two bf16 forwards that only round differently
        # from the stored one: the literal modeling-file experts loop (experts_implementation=
        # "eager": each expert's weighted output cast to the activation dtype and index_add_-ed
        # in expert order, vs grouped_mm's one float32 sum over the top-k), and the plain
        # model.to(bf16) above (RoPE inv_freq rounded).  Count the (token, layer)s whose experts
        # differ from the stored bf16 forward's (the MoE seeds are chosen so the first is 0).
        eager, extra["bf16_selection_flips"] = {}, {"bf16_inv_freq": selection_diffs(lit_info, info_bf16)}
        for dtype, ref in ((torch.float32, logits), (torch.bfloat16, logits_bf16)):
            m = load_model(out_dir, dtype, "eager")
            e_logits, _, e_info = run_forward(m, input_ids, moe=True)
            eager[str(dtype).replace("torch.", "")] = (e_logits - ref).abs().max().item()
            if dtype == torch.bfloat16:
                extra["bf16_selection_flips"]["eager_experts"] = selection_diffs(e_info, info_bf16)
            del m
        extra["eager_experts_vs_stored_max_abs"] = eager

    tensors = {"input_ids": input_ids.contiguous(), "logits": logits.contiguous(),
               "logits_bf16": logits_bf16.contiguous()}
    for i, h in enumerate(hidden):
        tensors[f"hidden.{i}"] = h.contiguous()
    for i, h in enumerate(hidden_bf16):
        tensors[f"hidden_bf16.{i}"] = h.contiguous()
    metadata = {
        "generator": GENERATOR,
        "fixture": name,
        "seed": str(seed),
        "input_ids_seed": str(seed + 7),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "architecture": type(model).__name__,
        "checkpoint_dtype": str(spec["save_dtype"]).replace("torch.", ""),
        "reference": "eager attention, eval, no attention mask (causal), position_ids 0..15, use_cache=False; "
                     "logits/hidden: model loaded from this dir with dtype=float32; "
                     "*_bf16: this dir loaded with dtype=bfloat16 (== fp32 model .to(bfloat16) with RoPE "
                     "inv_freq kept float32), outputs upcast to float32; "
                     "hidden.{i}: raw output of model.model.layers[i] (forward hook, before final norm)",
        "num_layers": str(len(hidden)),
    }
    if "gemma3" in extra:  # gemma3_text
        metadata["gemma3"] = gemma3_note(model.config, extra["gemma3"])
        dw, early, changed = extra["gemma3_window_check"]
        metadata["sliding_window"] = (
            f"checked: with sliding_window = {SEQ} (no window) the logits move by up to {dw:.2f} (positions "
            f"< {config.sliding_window}: {early:.1e}); changing the token at position 3 changes the outputs "
            f"of layer 0 (sliding) at {changed[0]}, layer 1 (sliding) at {changed[1]}, layer 2 (full) at "
            f"{changed[2]}")
    if text_dir is not None:  # gemma3: the same references as gemma3_text (asserted below)
        with safe_open(os.path.join(text_dir, "reference.safetensors"), "pt") as f:
            text_ref = {k: f.get_tensor(k) for k in f.keys()}
            text_meta = f.metadata()
        assert sorted(text_ref) == sorted(tensors), sorted(set(text_ref) ^ set(tensors))
        for k, t in tensors.items():
            assert t.dtype == text_ref[k].dtype and torch.equal(t, text_ref[k]), f"{name}: {k} != {text_dir}'s"
        metadata["reference"] = metadata["reference"].replace(
            "model.model.layers[i]", "model.model.language_model.layers[i]") + (
            f"; text only (no pixel_values, no token_type_ids); every tensor equals "
            f"{spec['text_weights_from']}'s reference.safetensors (asserted: the language model's weights "
            f"are {spec['text_weights_from']}'s)")
        metadata["gemma3"] = text_meta["gemma3"]
        metadata["sliding_window"] = text_meta["sliding_window"]
        vlm = extra["vlm"]
        metadata["checkpoint"] = (
            f"Gemma3ForConditionalGeneration as transformers {transformers.__version__}'s save_pretrained "
            f"writes it (the released checkpoints' layout): language_model.model.* (= "
            f"{spec['text_weights_from']}'s model.* bit for bit), vision_tower.* (released checkpoints: "
            f"vision_tower.vision_model.*), multi_modal_projector.{{mm_input_projection_weight, "
            f"mm_soft_emb_norm.weight}}; no lm_head.weight (tied to language_model.model.embed_tokens).  "
            f"transformers also loads, with the same logits and no missing or unexpected keys: "
            + "; ".join(vlm["renamed"]) + f".  Vision path smoke-tested (not stored): {vlm['image']}")
    if moe:
        for i in moe_layers:
            tensors[f"router_logits.{i}"] = info["router_logits"][i].float().contiguous()
            tensors[f"router_logits_bf16.{i}"] = info_bf16["router_logits"][i].float().contiguous()
        tensors["aux_loss"] = info["aux_loss"].to(torch.float32).reshape(()).contiguous()
        dense = [i for i in range(len(hidden)) if i not in moe_layers]
        metadata.update({
            "num_experts": str(n_exp),
            "top_k": str(top_k),
            "moe_layers": ",".join(str(i) for i in moe_layers),
            "moe_note": f"layers {moe_layers} are sparse MoE blocks (router_logits.{{i}} stored for each); "
                        + (f"layers {dense} are dense MLPs" if dense else "no dense MLP layers"),
            "experts_implementation": f"{EXPERTS_IMPL} (from_pretrained(experts_implementation="
                                      f"'{EXPERTS_IMPL}'), transformers' default)",
            "aux_loss": "out.aux_loss of the fp32 forward with output_router_logits=True and no "
                        "attention_mask = load_balancing_loss_func(router_logits of all MoE layers, "
                        "num_experts, top_k, None): rows of all MoE layers together, p = softmax(logits) "
                        "(also for MiniMax-M2, whose router uses sigmoid + bias), f_e = share of rows whose "
                        "softmax top-k holds e, loss = E * sum_e f_e * mean_rows(p_e); raw value, NOT "
                        "multiplied by router_aux_loss_coef",
            "router_logits": "router_logits.{i}: [B*T, E] output of model.model.layers[i].mlp.gate "
                             "(rows b*T+t) in the fp32 forward; router_logits_bf16.{i}: the bf16 forward's, "
                             "upcast to float32",
        })
        if name == "minimax_m2":
            metadata["routing"] = ("sigmoid(router_logits.float()) + e_score_correction_bias -> top-k "
                                   "experts; weights = sigmoid of the chosen, divided by their sum (float32)")
        if is_group_limited(model):  # glm4_moe, deepseek_v3, deepseek_v3_q_proj
            cfg, arch = model.config, type(model).__name__
            metadata["reference"] += (f"; {name}: the bf16 load (and so the cast it equals) also keeps "
                                      "every mlp.gate.e_score_correction_bias float32")
            metadata["aux_loss"] = (f"{arch} computes no aux_loss (out.aux_loss is None); this is "
                                    "what the other MoE models' out.aux_loss is: transformers' "
                                    "load_balancing_loss_func (Qwen3-MoE's) called on the fp32 forward's "
                                    "out.router_logits (all MoE layers), num_experts, top_k, "
                                    "attention_mask=None: p = softmax(logits), f_e = share of rows whose "
                                    "softmax top-k holds e, loss = E * sum_e f_e * mean_rows(p_e); raw value "
                                    "(no coefficient)")
            metadata["moe_note"] += (f"; every MoE layer (mlp.{{gate,experts,shared_experts}}) adds the "
                                     f"shared expert mlp.shared_experts (SiLU-gated MLP, intermediate "
                                     f"{cfg.moe_intermediate_size * cfg.n_shared_experts}) of the same "
                                     f"input to the routed experts' sum; layer 0 (< first_k_dense_replace "
                                     f"{cfg.first_k_dense_replace}) is a dense MLP (intermediate "
                                     f"{cfg.intermediate_size})")
            if cfg.topk_group < cfg.n_group:
                gaps = (f"both the expert gap (k-th vs (k+1)-th c within the kept groups) and the group gap "
                        f"(topk_group-th vs next group score) are >= {MIN_ROUTING_GAP}")
            else:  # every group kept: the group limit never matters
                gaps = (f"the expert gap (k-th vs (k+1)-th c) is >= {MIN_ROUTING_GAP} (topk_group = "
                        f"n_group: every group is kept, no group gap)")
            metadata["routing"] = (
                f"group-limited (float32): s = sigmoid(router_logits); c = s + "
                f"mlp.gate.e_score_correction_bias; experts in n_group {cfg.n_group} groups of "
                f"{n_exp // cfg.n_group} consecutive ids; group score = sum of the group's two largest c; "
                f"keep the topk_group {cfg.topk_group} best groups; top-{top_k} of c over the kept groups' "
                f"experts; weights = s of the chosen / (their sum + 1e-20) * routed_scaling_factor "
                f"{cfg.routed_scaling_factor}.  Seed chosen so that {gaps} for every token and MoE layer, "
                f"in the fp32 and the bf16 forward")
            if extra.get("mtp_tensors"):
                metadata["mtp_tensors"] = (
                    "model.safetensors also holds " + ", ".join(extra["mtp_tensors"]) + " (float32, random, "
                    f"named like the released checkpoints' multi-token-prediction layer, stored as layer "
                    f"num_hidden_layers = {cfg.num_hidden_layers}; config num_nextn_predict_layers "
                    f"{cfg.num_nextn_predict_layers}); transformers' {arch} does not read them "
                    f"(unexpected keys) and the references do not depend on them")
            if "mla" in extra:
                metadata["attention"] = mla_note(cfg, extra["mla"])
        if "gpt_oss" in extra:
            cfg = model.config
            metadata["gpt_oss"] = gpt_oss_note(cfg, extra["gpt_oss"])
            dw, early, changed, noise = extra["gpt_oss_window_check"]
            metadata["sliding_window"] = (
                f"checked: with sliding_window = {SEQ} (no window) the logits move by up to {dw:.2f} "
                f"(positions < {cfg.sliding_window}: {early:.1e}); changing the token at position 3 changes "
                f"(by > {GPT_OSS_WINDOW_TOL}) the outputs of layer 0 (sliding) at {changed[0]}, layer 1 (full) "
                f"at {changed[1]}; the other positions move by <= {noise:.1e} (float32 rounding: other "
                f"expert row groups)")
            metadata["router_logits"] = metadata["router_logits"].replace("mlp.gate ", "mlp.router ") + (
                " (router bias included)")
            metadata["routing"] = (
                f"top-{top_k} of the router logits (router_logits.{{i}}: bias included), weights = softmax "
                f"over the {top_k} chosen logits in the activation dtype (bf16 in the bf16 forward).  Seed "
                f"chosen so that the {top_k}-th and {top_k + 1}-th router logits of every token and layer are "
                f">= {MIN_ROUTING_GAP} apart in the fp32 and the bf16 forward and the bf16 forward picks the "
                f"fp32 forward's experts")
            metadata["moe_note"] += (
                "; mlp.{router, experts}; no shared expert; experts_implementation grouped_mm: per routed "
                "row x @ W rounded to the activation dtype, then + bias (rounded again), _apply_gate, the "
                "same for down_proj; in the bf16 forward each expert output * its bf16 weight is a bf16 "
                "product and the k products are summed with float32 accumulation, rounded once to bf16")
            metadata["reference"] += (
                "; gpt_oss: GptOssPreTrainedModel._keep_in_fp32_modules (the norms) applies to float16 "
                "loads only: in the bf16 load every weight, norms and sinks included, is bf16 (== the "
                "plain cast, asserted)")
    write_safetensors(os.path.join(out_dir, "reference.safetensors"), tensors, metadata)

    stats = dict(
        logits_std=logits.std().item(),
        logits_max_abs=logits.abs().max().item(),
        bf16_vs_fp32_max_abs=(logits_bf16 - logits).abs().max().item(),
        bytes=dir_size(out_dir),
        files={f: os.path.getsize(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))},
        **extra,
    )
    return stats


def self_check(name, out_root, moe=False):
    """Reload the checkpoint from disk and reproduce the stored fp32 logits/hidden exactly
    (MoE: also router_logits / router_logits_bf16 / aux_loss)."""
    out_dir = os.path.join(out_root, name)
    with safe_open(os.path.join(out_dir, "reference.safetensors"), "pt") as f:
        ref = {k: f.get_tensor(k) for k in f.keys()}
    experts = EXPERTS_IMPL if moe else None
    diffs = []
    for dtype, sfx in ((torch.float32, ""), (torch.bfloat16, "_bf16")):
        model = load_model(out_dir, dtype, experts)
        out = run_forward(model, ref["input_ids"], moe=moe)
        logits, hidden = out[0], out[1]
        d = (logits - ref["logits" + sfx]).abs().max().item()
        dh = max((h - ref[f"hidden{sfx}.{i}"]).abs().max().item() for i, h in enumerate(hidden))
        assert d == 0.0 and dh == 0.0, f"{name}: {dtype} reload mismatch logits {d} hidden {dh}"
        if moe:
            info = out[2]
            assert sorted(k for k in ref if k.startswith(f"router_logits{sfx}.")) == sorted(
                f"router_logits{sfx}.{i}" for i in info["router_logits"])
            for i, r in info["router_logits"].items():
                assert torch.equal(r.float(), ref[f"router_logits{sfx}.{i}"]), f"{name}: router {i} {dtype}"
            if dtype == torch.float32:
                assert torch.equal(info["aux_loss"].float().reshape(()), ref["aux_loss"]), name
        diffs.append(d)
    return tuple(diffs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "models"))
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    out_root = os.path.normpath(args.out)
    os.makedirs(out_root, exist_ok=True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    specs = fixture_specs()
    names = args.only or list(specs)
    total = 0
    for name in names:
        st = build_fixture(name, specs[name], out_root)
        total += st["bytes"]
        assert 0.5 <= st["logits_std"] <= 5.0, f"{name}: logits std {st['logits_std']} out of range"
        print(f"{name}: logits std {st['logits_std']:.4f}  max|logit| {st['logits_max_abs']:.4f}  "
              f"bf16-vs-fp32 max|diff| {st['bf16_vs_fp32_max_abs']:.4f}  size {st['bytes']} B")
        for f, s in st["files"].items():
            print(f"    {f}: {s} B")
        print(f"    plain model.to(bf16) (inv_freq rounded to bf16) vs stored logits_bf16: "
              f"max|diff| {st['literal_to_bf16_vs_stored_max_abs']:.4f}")
        if "sliding_window_check" in st:
            dfull, early, changed = st["sliding_window_check"]
            print(f"    sliding_window check: vs sliding_window=None max|dlogit| {dfull:.4f} "
                  f"(positions < window: {early:.2e}); layer-0 positions affected by token 3: {changed}")
        if "gemma3_window_check" in st:
            dfull, early, changed = st["gemma3_window_check"]
            print(f"    sliding_window check: vs no window max|dlogit| {dfull:.4f} (positions < window: "
                  f"{early:.2e}); positions affected by token 3 per layer: {changed}")
        if "gemma3" in st:
            g3 = st["gemma3"]
            print(f"    Gemma 3 written out in float64 (gemma3_reference) vs transformers fp32: logits "
                  f"{g3['max_abs']:.2e}, hidden {g3['max_abs_hidden']:.2e}; softmax scale {g3['scale']:.9g}, "
                  f"embed_scale {g3['embed_scale']}")
            print("    max|dlogit| of the usual mistakes: "
                  + "; ".join(f"{k} {v:.3f}" for k, v in g3["variants"].items()))
        if "vlm" in st:
            vlm = st["vlm"]
            print(f"    checkpoint prefixes {vlm['prefixes']}; {len(vlm['tensors'])} tensors; renamed spellings "
                  f"load with max|dlogit| {vlm['renamed']}; {vlm['image']}")
        if "moe_layers" in st:
            fmt = lambda d: "{" + ", ".join(f"{i}: {v:.2e}" for i, v in d.items()) + "}"  # noqa: E731
            print(f"    MoE layers {st['moe_layers']}, seed {specs[name]['seed']}; min gap k-th vs (k+1)-th "
                  f"routing score: fp32 {st['min_gap']:.3e} {fmt(st['min_gap_per_layer'])}")
            print(f"        bf16 {st['min_gap_bf16']:.3e} {fmt(st['min_gap_bf16_per_layer'])}; "
                  f"max|score bf16 - fp32| {st['bf16_score_err']:.3e}")
            print(f"    (token, layer)s whose experts differ from the stored bf16 forward's: fp32 forward "
                  f"{st['bf16_vs_fp32_selection_differs']}, bf16 with experts_implementation='eager' "
                  f"{st['bf16_selection_flips']['eager_experts']}, plain model.to(bf16) "
                  f"{st['bf16_selection_flips']['bf16_inv_freq']}")
            print(f"    aux_loss (raw, before router_aux_loss_coef) {st['aux_loss']:.6f}; "
                  f"experts_implementation='eager' vs stored ({EXPERTS_IMPL}) max|dlogit|: "
                  f"{st['eager_experts_vs_stored_max_abs']}")
            if "gaps" in st:
                for dt, per in st["gaps"].items():
                    print(f"    group-limited routing, {dt}: per MoE layer (min expert gap, min group gap) "
                          + ", ".join(f"{i}: ({e:.3e}, {g:.3e})" for i, (e, g) in per.items()))
            if "mtp_tensors" in st:
                print(f"    MTP tensors added to model.safetensors (transformers: unexpected keys "
                      f"{st['mtp_unexpected_keys']}): {st['mtp_tensors']}")
            if "mla" in st:
                mla = st["mla"]
                print(f"    MLA: inv_freq {[float(f'{v:.6g}') for v in mla['inv_freq']]}, softmax scale "
                      f"{mla['scale']:.9g}; written-out attention (mla_reference) vs transformers, "
                      f"every layer: max|diff| {mla['mla_max_abs']:.2e}")
            if "gpt_oss" in st:
                g = st["gpt_oss"]
                print(f"    gpt-oss written out in float64 (gpt_oss_reference) vs transformers fp32: logits "
                      f"{g['max_abs']:.2e}, hidden {g['max_abs_hidden']:.2e}; YaRN inv_freq "
                      f"{[float(f'{v:.6g}') for v in g['inv_freq']]}, attention_factor "
                      f"{g['attention_factor']:.9g}")
                print("    clamp shares: " + ", ".join(f"{k} {v:.4g}" for k, v in g["clamp"].items()))
                for k, v in g["measured"].items():
                    print(f"    {k}: max|dlogit| {v['max_abs']:.3f}, mean {v['mean_abs']:.3f}, argmax changed "
                          f"{v['argmax_changed']}/{BATCH * SEQ}")
                print("    router bias changes the top-k of tokens per layer: "
                      f"{g['router_bias_changes_selection']}")
                print("    max|dlogit| of the usual mistakes: "
                      + "; ".join(f"{k} {v:.3f}" for k, v in g["variants"].items()))
                dfull, early, changed, noise = st["gpt_oss_window_check"]
                print(f"    sliding_window check: vs no window max|dlogit| {dfull:.4f} (positions < window: "
                      f"{early:.2e}); positions affected by token 3 per layer: {changed} (others move "
                      f"<= {noise:.1e})")
            if "experts_split_layers" in st:
                print(f"    shards: layers with expert tensors in both files: {st['experts_split_layers']}")
            if "bias_changes_selection" in st:
                print(f"    e_score_correction_bias changes the top-k of tokens per layer: "
                      f"{st['bias_changes_selection']}; its dtype fp32/bf16 load: {st['score_bias_dtype']}")
            if "tokenizer" in st:
                tok = st["tokenizer"]
                print(f"    tokenizer: 512 ids, <s>/</s> = {MINIMAX_BOS}/{MINIMAX_EOS}, sample round-trips "
                      f"({tok['sample_chars']} chars -> {tok['sample_tokens']} tokens)")
            assert st["min_gap_bf16"] >= MIN_ROUTING_GAP, f"{name}: bf16 routing gap {st['min_gap_bf16']}"
            assert st["min_gap"] >= MIN_ROUTING_GAP, f"{name}: fp32 routing gap {st['min_gap']}"
            assert st["bf16_vs_fp32_selection_differs"] == 0, name
            assert st["bf16_selection_flips"]["eager_experts"] == 0, name
    for name in names:
        d, db = self_check(name, out_root, specs[name].get("moe", False))
        print(f"self-check {name}: reload from disk reproduces logits/hidden (fp32 max abs diff {d}, "
              f"bf16 max abs diff {db})")
    print(f"total size {total} B ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    sys.exit(main())
