#!/usr/bin/env python3
"""Record transformers' greedy `generate` output for the model fixtures (reference for KV-cached decoding).

Writes, for each fixture NAME of tests/fixtures/models/ (llama3, mistral, qwen2, qwen3, qwen3_moe,
mixtral, minimax_m2, glm4_moe, deepseek_v3, deepseek_v3_q_proj, gemma3_text, gemma3, gpt_oss; the hybrids
qwen3_5, qwen3_5_moe, qwen3_next of tools/make_hybrid_fixtures.py), tests/fixtures/generate/NAME.json:
  generator             "tools/make_generate_fixtures.py"
  fixture               NAME (the checkpoint is tests/fixtures/models/NAME)
  transformers_version, torch_version
  prompt_seed           seed of the torch.Generator that drew the prompts (PROMPT_SEEDS below)
  max_new_tokens        12
  prompts               3 prompts of lengths 5, 9, 3: torch.randint(3, vocab_size - 3) from one
                        generator, in that order (never a special id: bos/eos are 1/2, or 510/511
                        for minimax_m2, pad 0); the hybrids: torch.randint(3, 504), ids 3..503 (the
                        text range of tools/make_hybrid_fixtures.py), below the Qwen3.5 vision
                        special tokens 504 (vision_start), 505 (vision_end), 507 (image), 508
                        (video) that sit inside the vocabulary of 512 (qwen3_next has none, but
                        keeps the same range); gemma3_text and gemma3: torch.randint(3, 508), ids
                        3..507, below gemma3's image 508, boi 509 and eoi 510 tokens (gemma3_text
                        has none but keeps the same range; the two get the same prompts); Gemma's
                        pad / eos / bos are 0 / 1 / 2
  generated             per prompt, the 12 new token ids (prompt not repeated)
  min_margin            per prompt, the minimum over the 12 steps of top-1 minus top-2 of the fp32
                        next-token logits (output_logits, before any logits processor), rounded
                        to 6 significant digits
  min_routing_gap       (MoE fixtures only) per prompt, the minimum over every MoE layer and every
                        position of the prompt + the first 11 generated tokens (all the tokens the
                        model reads) of the k-th minus (k+1)-th routing score (softmax of the
                        router logits; minimax_m2: sigmoid + e_score_correction_bias; gpt_oss: the
                        router logits themselves, router bias included, whose top-k GptOssTopKRouter
                        takes), from one
                        uncached fp32 forward of that sequence; 6 significant digits.  glm4_moe,
                        deepseek_v3 (group-limited routing, make_model_fixtures.group_limited_routing):
                        the smaller of the expert gap (k-th minus (k+1)-th sigmoid + bias score among
                        the kept group's experts) and the group gap (kept group's score minus the
                        next group's); deepseek_v3_q_proj (one group, n_group = topk_group = 1): the
                        expert gap alone.  The MoE layers are those whose mlp has experts and a router
                        mlp.gate (gpt_oss: mlp.router; hooked, its top-k asserted): every layer, except
                        qwen3_next's
                        dense layer 1 (mlp_only_layers [1]) and the dense layer 0 of glm4_moe and
                        deepseek_v3* (first_k_dense_replace 1), all asserted against the config.  For
                        qwen3_5_moe / qwen3_next (Qwen3_5MoeSparseMoeBlock /
                        Qwen3NextSparseMoeBlock: top-2 of the softmax, renormalised, plus a shared
                        expert that is not routed) the gap is taken on the softmax before
                        renormalisation, as the router picks.
  notes

How: AutoModelForCausalLM.from_pretrained(dir, dtype=float32, attn_implementation="eager") (MoE:
transformers' default experts_implementation "grouped_mm", asserted), eval, CPU, one thread,
deterministic algorithms; per prompt, one call
  model.generate(input_ids [1, L], attention_mask ones, do_sample=False, num_beams=1,
                 max_new_tokens=12, min_new_tokens=12, pad_token_id=0, use_cache=True,
                 return_dict_in_generate=True, output_scores=True, output_logits=True)
(no padding, no batching).  min_new_tokens=12 only keeps eos from ending a prompt early.
glm4_moe, deepseek_v3: their model.safetensors also hold the MTP layer's model.layers.4.* tensors,
which Glm4MoeForCausalLM / DeepseekV3ForCausalLM do not read (asserted: they, and only they, are
unexpected keys).  deepseek_v3 / deepseek_v3_q_proj: multi-head latent attention; use_cache=True
runs transformers' DynamicCache, which for DeepseekV3Attention holds the compressed latents
(kv_a_layernorm(c) and the rotated k_rope, one head) and expands them through kv_b_proj at every
step.  deepseek_v3's YaRN scaling (original_max_position_embeddings 32) is static: the sequences
here (the model reads at most 9 + 11 = 20 positions) are scaled although shorter than 32.
Hybrids (Gated DeltaNet + gated attention layers): use_cache=True runs transformers' hybrid cache
(attention KV plus each linear-attention layer's conv window and recurrent state); use_cache=False
recomputes the whole sequence every step.  qwen3_5 / qwen3_5_moe are vision-language checkpoints
(Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration, weights under
model.language_model.*, a vision tower, and for qwen3_5 mtp.* tensors): AutoModelForCausalLM loads the
text-only Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM from them (asserted: that class, no missing
keys); the recorded ids come from it.  qwen3_5 is stored in bf16 and loaded as fp32 like the rest.

Checked (asserted) for every prompt, so the recorded ids do not depend on generate's machinery:
  * the same call with use_cache=False yields the same 12 ids;
  * at every step the generated id is the argmax of the raw logits (min_new_tokens' eos
    suppression never changed a pick; eos was never the top token) and top-1 - top-2 >= MIN_MARGIN;
  * a plain greedy loop (full uncached forward of the whole sequence, argmax of the last row)
    yields the same ids;
  * MoE: the same ids with experts_implementation="eager", and min_routing_gap >= MIN_ROUTING_GAP;
  * qwen3_5, qwen3_5_moe: the full vision-language model (AutoModelForImageTextToText, the
    checkpoint's ConditionalGeneration class, asserted) on the same text input generates the same
    ids with exactly equal logits (torch.equal), and its uncached forward of the prompt + the 12
    generated ids gives exactly the text-only model's logits (for text the three mRoPE position
    rows are equal, so mRoPE is plain RoPE);
  * mistral: with sliding_window=None every prompt generates other ids (the window of 6 is
    exercised: the model reads 16, 20 and 14 positions); gemma3_text, gemma3: likewise with the
    window of the sliding_attention layers widened to 128 (= max_position_embeddings: no window;
    their config cannot say None), which changes the ids of every prompt; gpt_oss: likewise, its
    window of 4 widened to 131072 (its max_position_embeddings; use_cache=True runs DynamicCache's
    sliding-window layers for the sliding_attention layers);
  * gemma3 (Gemma3ForConditionalGeneration: AutoModelForCausalLM gives the full vision-language
    model for model_type gemma3, asserted; its language model is gemma3_text's): gemma3_text's
    Gemma3ForCausalLM on the same prompts generates the same ids, its generate logits within 1e-5
    (float32 rounding of the last-position-only lm_head product: ~2e-6, not bit for bit) and exactly
    the same uncached forward of the prompt + the 12 generated ids (torch.equal), so gemma3.json
    records what gemma3_text.json records (same prompt seed).
The seeds in PROMPT_SEEDS were found with --search (first seed from the base value 1000 + 100*i
upward passing all the checks, the sliding-window one of mistral and gemma3* included).
Deterministic: running it twice gives byte-identical files.
Layout: what clang-format 14 with the repository's .clang-format makes of json.dumps(indent=2) (the
committed files went through it): one value per line; a top-level "key": value line over 100 columns
is broken after the colon, the value on the next line indented by 6 (write_json).
Run (from the repository root):
    <venv-tools>/bin/python tools/make_generate_fixtures.py [--out tests/fixtures/generate] [--only NAME ...]
    <venv-tools>/bin/python tools/make_generate_fixtures.py --search [--only NAME ...]
        (prints the first passing seed per fixture, writes nothing)"""

import argparse
import json
import os
import re
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import transformers  # noqa: E402
from make_model_fixtures import group_limited_routing  # noqa: E402  (GLM-4.5's / DeepSeek-V3's router)
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText  # noqa: E402

GENERATOR = "tools/make_generate_fixtures.py"
NAMES = ["llama3", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "minimax_m2",
         "qwen3_5", "qwen3_5_moe", "qwen3_next", "glm4_moe", "deepseek_v3", "deepseek_v3_q_proj",
         "gemma3_text", "gemma3", "gpt_oss"]
MOE = {"qwen3_moe", "mixtral", "minimax_m2", "qwen3_5_moe", "qwen3_next", "glm4_moe", "deepseek_v3",
       "deepseek_v3_q_proj", "gpt_oss"}
# checkpoints with model.layers.{num_hidden_layers}.* tensors (unexpected keys)
MTP_LAYER = {"glm4_moe", "deepseek_v3"}
HYBRID = {"qwen3_5", "qwen3_5_moe", "qwen3_next"}
# vision-language checkpoints: the text-only class AutoModelForCausalLM gives, the full model's class
VLM = {"qwen3_5": ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"),
       "qwen3_5_moe": ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration")}
HYBRID_ID_HIGH = 504  # hybrids: prompt ids 3..503, below the vision special tokens 504..508
GEMMA3 = {"gemma3_text", "gemma3"}
GEMMA3_ID_HIGH = 508  # gemma3*: prompt ids 3..507, below gemma3's image 508, boi 509, eoi 510
GEMMA3_IMAGE_KEYS = ("image_token_id", "boi_token_id", "eoi_token_id")
# vision-language checkpoints whose language model is another fixture's: that fixture (the same
# prompts and ids, logits within TWIN_LOGITS_TOL: twin_check)
TWIN = {"gemma3": "gemma3_text"}
SLIDING = {"mistral", "gemma3_text", "gemma3", "gpt_oss"}  # window_matters
TWIN_LOGITS_TOL = 1e-5  # twin_check
VISION_TOKEN_KEYS = ("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id")
PROMPT_LENGTHS = (5, 9, 3)
MAX_NEW_TOKENS = 12
PAD_ID = 0
MIN_MARGIN = 1e-3
MIN_ROUTING_GAP = 1e-3
EXPERTS_IMPL = "grouped_mm"  # transformers 5.x's default experts_implementation
# prompt seeds (found with --search from the base values 1000 + 100 * (index in NAMES)): every
# base seed passes the logit-margin checks; mixtral 1500-1502 and minimax_m2 1600 fail only
# min_routing_gap >= MIN_ROUTING_GAP (gaps down to 6e-5).  Hybrids: qwen3_5 1700 passes;
# qwen3_5_moe 1800-1808 and qwen3_next 1900 fail only min_routing_gap (gaps down to 2e-5);
# qwen3_next 1901 fails it and, on one prompt, MIN_MARGIN too (5.7e-4).  glm4_moe (appended to
# NAMES, base 2000): 2000 passes.  deepseek_v3 (base 2100): 2100 fails only min_routing_gap (3.0e-4);
# deepseek_v3_q_proj (base 2200): 2200 passes.  gemma3_text (base 2300): 2300 passes; gemma3 takes
# gemma3_text's seed (the same language model: the same prompts and ids, asserted).  gpt_oss (base 2500):
# 2500 fails only min_routing_gap (8.6e-4); 2501 passes.
PROMPT_SEEDS = {
    "llama3": 1000,
    "mistral": 1100,
    "qwen2": 1200,
    "qwen3": 1300,
    "qwen3_moe": 1400,
    "mixtral": 1503,
    "minimax_m2": 1601,
    "qwen3_5": 1700,
    "qwen3_5_moe": 1809,
    "qwen3_next": 1902,
    "glm4_moe": 2000,
    "deepseek_v3": 2101,
    "deepseek_v3_q_proj": 2200,
    "gemma3_text": 2300,
    "gemma3": 2300,
    "gpt_oss": 2501,
}
NOTES = ("greedy, fp32, eager attention, one prompt per call, no padding, use_cache=True "
         "(equal to use_cache=False)")
NOTES_EXTRA = {
    "qwen3_5": "; AutoModelForCausalLM: the text-only Qwen3_5ForCausalLM (same ids and logits as "
               "Qwen3_5ForConditionalGeneration); prompt ids 3..503",
    "qwen3_5_moe": "; AutoModelForCausalLM: the text-only Qwen3_5MoeForCausalLM (same ids and logits as "
                   "Qwen3_5MoeForConditionalGeneration); prompt ids 3..503",
    "qwen3_next": "; prompt ids 3..503",
    "glm4_moe": "; the checkpoint's MTP layer tensors (model.layers.4.*) are unexpected keys, unused",
    "deepseek_v3": "; the checkpoint's MTP layer tensors (model.layers.4.*) are unexpected keys, unused",
    "gemma3_text": "; prompt ids 3..507",
    "gemma3": "; AutoModelForCausalLM: Gemma3ForConditionalGeneration, text only (same ids as gemma3_text's "
              "Gemma3ForCausalLM, logits within 1e-5); prompt ids 3..507",
}
COLUMN_LIMIT = 100  # .clang-format's ColumnLimit (write_json)


def load_model(path, experts=None, auto=AutoModelForCausalLM, mtp_layer=False):
    """mtp_layer: the checkpoint also holds model.layers.{num_hidden_layers}.* (an MTP layer the model
    does not read): asserted to be exactly the unexpected keys."""
    kwargs = {} if experts is None else {"experts_implementation": experts}
    model, info = auto.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                       output_loading_info=True, **kwargs)
    model.eval()
    assert not info["missing_keys"] and not info["mismatched_keys"], (path, info)
    if mtp_layer:
        prefix = f"model.layers.{model.config.num_hidden_layers}."
        assert info["unexpected_keys"] and all(k.startswith(prefix) for k in info["unexpected_keys"]), info
    assert model.config.get_text_config()._attn_implementation == "eager"
    return model


def make_prompts(seed, vocab, high=None):
    """high: exclusive upper bound of the ids (default vocab - 3)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab - 3 if high is None else high, (n,), generator=g,
                          dtype=torch.int64).tolist()
            for n in PROMPT_LENGTHS]


@torch.no_grad()
def greedy(model, prompt, use_cache):
    """transformers' generate for one prompt -> (12 new ids, raw logits [12, V] float32)."""
    ids = torch.tensor([prompt], dtype=torch.int64)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        num_beams=1,
        max_new_tokens=MAX_NEW_TOKENS,
        min_new_tokens=MAX_NEW_TOKENS,
        pad_token_id=PAD_ID,
        use_cache=use_cache,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
    )
    seq = out.sequences[0].tolist()
    assert seq[: len(prompt)] == prompt and len(seq) == len(prompt) + MAX_NEW_TOKENS, seq
    logits = torch.cat([t.float() for t in out.logits], dim=0)
    vocab = model.config.get_text_config().vocab_size
    assert logits.shape == (MAX_NEW_TOKENS, vocab) and len(out.scores) == MAX_NEW_TOKENS
    return seq[len(prompt):], logits


@torch.no_grad()
def plain_greedy(model, prompt):
    """Greedy decoding written out: full uncached forward each step, argmax of the last row."""
    seq = list(prompt)
    for _ in range(MAX_NEW_TOKENS):
        logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
        seq.append(int(logits.argmax()))
    return seq[len(prompt):]


def router_of(mlp):
    """The router of a sparse MoE block: mlp.gate, or gpt-oss's mlp.router; None for a dense MLP."""
    if not hasattr(mlp, "experts"):
        return None
    router = getattr(mlp, "gate", None)
    return router if router is not None else getattr(mlp, "router", None)


def routing_scores(mlp, router_logits):
    logits = router_logits.float()
    if hasattr(mlp, "router"):  # gpt-oss: top-k of the raw logits (router bias included)
        return logits
    if hasattr(mlp, "e_score_correction_bias"):
        return torch.sigmoid(logits) + mlp.e_score_correction_bias
    return torch.softmax(logits, dim=-1)


@torch.no_grad()
def min_routing_gap(model, seq):
    """min over MoE layers and positions of score[k-th] - score[(k+1)-th]; checks the router's top-k."""
    k = model.config.num_experts_per_tok
    captured, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        if router_of(layer.mlp) is not None:
            def hook(_mod, _inp, out, i=i):
                captured[i] = (out[0].detach().clone(), out[2].detach().clone())
            handles.append(router_of(layer.mlp).register_forward_hook(hook))
    try:
        model(input_ids=torch.tensor([seq]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    assert captured
    gap = float("inf")
    for i, (logits, index) in captured.items():
        if getattr(model.config, "n_group", None) is not None:  # glm4_moe, deepseek_v3*: group-limited
            bias = model.model.layers[i].mlp.gate.e_score_correction_bias
            r = group_limited_routing(model.config, logits, bias)
            assert torch.equal(r["index"].sort(-1).values, index.sort(-1).values), i
            gap = min(gap, r["expert_gap"].min().item(), r["group_gap"].min().item())
            continue
        scores = routing_scores(model.model.layers[i].mlp, logits)
        top = scores.topk(k + 1, dim=-1)
        assert torch.equal(top.indices[:, :k].sort(-1).values, index.sort(-1).values), i
        gap = min(gap, (top.values[:, k - 1] - top.values[:, k]).min().item())
    return gap


def moe_layers(model):
    """Indices of the layers min_routing_gap hooks, asserted against the config where it says."""
    layers = [i for i, layer in enumerate(model.model.layers) if router_of(layer.mlp) is not None]
    cfg = model.config
    if hasattr(cfg, "mlp_only_layers"):  # qwen3_moe, qwen3_next (Qwen3_5Moe: every layer sparse)
        step = getattr(cfg, "decoder_sparse_step", 1)
        expected = [i for i in range(cfg.num_hidden_layers)
                    if i not in cfg.mlp_only_layers and (i + 1) % step == 0]
        assert layers == expected, (layers, expected)
    if hasattr(cfg, "first_k_dense_replace"):  # glm4_moe, deepseek_v3*: the first layers are dense
        expected = list(range(cfg.first_k_dense_replace, cfg.num_hidden_layers))
        assert layers == expected, (layers, expected)
    return layers


@torch.no_grad()
def vlm_check(model, full, prompt, new, logits):
    """qwen3_5*: the full vision-language model on the same text -> problems (list of str), line."""
    problems = []
    new_f, logits_f = greedy(full, prompt, use_cache=True)
    if new_f != new or not torch.equal(logits_f, logits):
        problems.append(f"{type(full).__name__} generates {new_f} "
                        f"(max|logits diff| {(logits_f - logits).abs().max().item():.2e}), "
                        f"{type(model).__name__} {new}")
    seq = torch.tensor([prompt + new])
    a = model(input_ids=seq, use_cache=False).logits
    b = full(input_ids=seq, use_cache=False).logits
    if not torch.equal(a, b):
        problems.append(f"uncached forward: {type(full).__name__} != {type(model).__name__}, "
                        f"max|diff| {(a - b).abs().max().item():.2e}")
    return problems, f", {type(full).__name__} max|logits diff| {(logits_f - logits).abs().max().item():.1e}"


@torch.no_grad()
def twin_check(model, twin, prompt, new, logits):
    """gemma3: its text-only twin (gemma3_text's Gemma3ForCausalLM) on the same prompt -> problems
    (list of str), line.  Same ids; generate's logits within TWIN_LOGITS_TOL (not bit for bit: both
    run lm_head on the last position only (logits_to_keep=1), a [1, 64] x [64, 512] product whose
    float32 rounding depends on the two classes' tensor layouts: ~1e-6); the uncached forward of the
    whole sequence exactly equal (torch.equal), as the references of make_model_fixtures.py."""
    problems = []
    new_t, logits_t = greedy(twin, prompt, use_cache=True)
    diff = (logits_t - logits).abs().max().item()
    if new_t != new or diff > TWIN_LOGITS_TOL:
        problems.append(f"{type(twin).__name__} generates {new_t} (max|logits diff| {diff:.2e}), "
                        f"{type(model).__name__} {new}")
    seq = torch.tensor([prompt + new])
    a = model(input_ids=seq, use_cache=False).logits
    b = twin(input_ids=seq, use_cache=False).logits
    if not torch.equal(a, b):
        problems.append(f"uncached forward: {type(twin).__name__} != {type(model).__name__}, "
                        f"max|diff| {(a - b).abs().max().item():.2e}")
    return problems, f", {type(twin).__name__} max|logits diff| {diff:.1e}"


@torch.no_grad()
def window_matters(model, prompts, generated):
    """Mistral: per prompt, whether generate with sliding_window=None picks other ids than `generated`.
    gemma3*: the same with sliding_window = max_position_embeddings (Gemma 3's masks and cache need a
    number), set on every config object of the copy (gemma3: its text_config)."""
    import copy

    full = copy.deepcopy(model)
    if type(model).__name__.startswith(("Gemma3", "GptOss")):
        text = full.config.get_text_config()
        wide = text.max_position_embeddings
        configs = {id(c): c for c in [full.config, text] + [m.config for m in full.modules()
                                                             if hasattr(m, "config")]}
        for c in configs.values():
            if getattr(c, "sliding_window", None) is not None:
                c.sliding_window = wide
        return [greedy(full, p, use_cache=True)[0] != g for p, g in zip(prompts, generated)]
    full.config.sliding_window = None
    for layer in full.model.layers:
        layer.self_attn.config.sliding_window = None
    return [greedy(full, p, use_cache=True)[0] != g for p, g in zip(prompts, generated)]


def sig6(x):
    return float(f"{x:.6g}")


def evaluate(name, model, seed, moe_eager=None, full=None, twin=None):
    """Runs every check for one prompt seed; returns (record, problems, report lines).
    full: the vision-language model of a VLM fixture (vlm_check); twin: gemma3's text-only twin, the
    gemma3_text model (twin_check)."""
    text = model.config.get_text_config()
    vocab = text.vocab_size
    high = HYBRID_ID_HIGH if name in HYBRID else GEMMA3_ID_HIGH if name in GEMMA3 else None
    prompts = make_prompts(seed, vocab, high)
    specials = {PAD_ID, text.bos_token_id, text.eos_token_id,
                model.generation_config.bos_token_id, model.generation_config.eos_token_id}
    if full is not None:
        vision = [getattr(full.config, key) for key in VISION_TOKEN_KEYS]
        assert min(vision) == HYBRID_ID_HIGH, vision
        specials |= set(vision)
    if name == "gemma3":
        image = [getattr(model.config, key) for key in GEMMA3_IMAGE_KEYS]
        assert min(image) == GEMMA3_ID_HIGH, image
        specials |= set(image)
    assert not specials & {t for p in prompts for t in p}, (prompts, specials)
    rec = dict(prompts=prompts, generated=[], min_margin=[])
    if name in MOE:
        rec["min_routing_gap"] = []
    problems, lines = [], []
    for p, prompt in enumerate(prompts):
        new_c, logits_c = greedy(model, prompt, use_cache=True)
        new_u, logits_u = greedy(model, prompt, use_cache=False)
        rec["generated"].append(new_c)
        if new_c != new_u:
            problems.append(f"prompt {p}: use_cache=True {new_c} != use_cache=False {new_u}")
            rec.setdefault("generated_use_cache_false", {})[str(p)] = new_u
        top2 = logits_c.topk(2, dim=-1)
        margin = (top2.values[:, 0] - top2.values[:, 1]).min().item()
        rec["min_margin"].append(sig6(margin))
        if top2.indices[:, 0].tolist() != new_c:
            problems.append(f"prompt {p}: generated {new_c} != raw-logit argmax "
                            f"{top2.indices[:, 0].tolist()}")
        if margin < MIN_MARGIN:
            problems.append(f"prompt {p}: min margin {margin:.3e} < {MIN_MARGIN}")
        plain = plain_greedy(model, prompt)
        if plain != new_c:
            problems.append(f"prompt {p}: plain greedy loop {plain} != generate {new_c}")
        line = (f"  prompt {p} (len {len(prompt)}): min margin {margin:.4f}, "
                f"max|logits cached - uncached| {(logits_c - logits_u).abs().max().item():.2e}")
        if name in MOE:
            gap = min_routing_gap(model, prompt + new_c[:-1])
            rec["min_routing_gap"].append(sig6(gap))
            line += f", min routing gap {gap:.4f}"
            if gap < MIN_ROUTING_GAP:
                problems.append(f"prompt {p}: min routing gap {gap:.3e} < {MIN_ROUTING_GAP}")
            if moe_eager is not None:
                new_e, logits_e = greedy(moe_eager, prompt, use_cache=True)
                if new_e != new_c:
                    problems.append(f"prompt {p}: experts_implementation=eager {new_e} != {new_c}")
                diff = (logits_e - logits_c).abs().max().item()
                line += f", max|logits eager experts - {EXPERTS_IMPL}| {diff:.2e}"
        if full is not None:
            vlm_problems, vlm_line = vlm_check(model, full, prompt, new_c, logits_c)
            problems += [f"prompt {p}: {x}" for x in vlm_problems]
            line += vlm_line
        if twin is not None:
            twin_problems, twin_line = twin_check(model, twin, prompt, new_c, logits_c)
            problems += [f"prompt {p}: {x}" for x in twin_problems]
            line += twin_line
        lines.append(line)
    return rec, problems, lines


def write_json(path, obj):
    """json.dumps(indent=2), one value per line, laid out as clang-format 14 with the repository's
    .clang-format leaves it (the committed files went through it): a top-level "key": value line
    longer than COLUMN_LIMIT is broken after the colon, the value indented by 6 (deterministic)."""
    lines = []
    for line in json.dumps(obj, indent=2).split("\n"):
        m = re.fullmatch(r'(  "[^"\\]*":) (.*)', line)
        if m and len(line) > COLUMN_LIMIT:
            lines += [m.group(1), "      " + m.group(2)]
        else:
            lines.append(line)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    with open(path, encoding="utf-8") as f:
        assert json.load(f) == obj, path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--models", default=os.path.join(here, "..", "tests", "fixtures", "models"))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "generate"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--search", action="store_true",
                    help="for each fixture, try prompt seeds from its PROMPT_SEEDS value upward; "
                         "print, write nothing")
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    out_root = os.path.normpath(args.out)
    names = args.only or NAMES

    for name in names:
        path = os.path.normpath(os.path.join(args.models, name))
        moe = name in MOE
        model = load_model(path, EXPERTS_IMPL if moe else None, mtp_layer=name in MTP_LAYER)
        if moe:
            assert model.config._experts_implementation == EXPERTS_IMPL, model.config._experts_implementation
        gc = model.generation_config
        print(f"{name}: {type(model).__name__}, generation_config "
              f"{json.dumps(gc.to_diff_dict(), sort_keys=True)}")
        if moe:
            print(f"  MoE layers {moe_layers(model)}")
        moe_eager = load_model(path, "eager", mtp_layer=name in MTP_LAYER) if moe else None
        full = twin = None
        if name == "gemma3":
            assert type(model).__name__ == "Gemma3ForConditionalGeneration", type(model).__name__
        if name in TWIN:
            twin = load_model(os.path.normpath(os.path.join(args.models, TWIN[name])))
            assert type(twin).__name__ == "Gemma3ForCausalLM", type(twin).__name__
        if name in VLM:
            assert type(model).__name__ == VLM[name][0], type(model).__name__
            full = load_model(path, EXPERTS_IMPL if moe else None, AutoModelForImageTextToText)
            assert type(full).__name__ == VLM[name][1], type(full).__name__
            assert not moe or full.config.get_text_config()._experts_implementation == EXPERTS_IMPL
        if args.search:
            for seed in range(PROMPT_SEEDS[name], PROMPT_SEEDS[name] + 100):
                rec, problems, lines = evaluate(name, model, seed, moe_eager, full, twin)
                if name in SLIDING and not all(window_matters(model, rec["prompts"], rec["generated"])):
                    problems.append("sliding_window does not change the ids of every prompt")
                print(f"  seed {seed}: " + ("ok" if not problems else "; ".join(problems)))
                if not problems:
                    print("\n".join(lines))
                    break
            continue
        seed = PROMPT_SEEDS[name]
        rec, problems, lines = evaluate(name, model, seed, moe_eager, full, twin)
        print("\n".join(lines))
        if name in SLIDING:
            differs = window_matters(model, rec["prompts"], rec["generated"])
            print(f"  sliding_window {model.config.get_text_config().sliding_window}: generation without "
                  f"the window differs for prompts {[p for p, d in enumerate(differs) if d]}")
            if not all(differs):
                problems.append(f"sliding_window does not change the ids of every prompt: {differs}")
        for p in problems:
            print(f"  PROBLEM: {p}")
        obj = {
            "generator": GENERATOR,
            "fixture": name,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "prompt_seed": seed,
            "max_new_tokens": MAX_NEW_TOKENS,
            "prompts": rec["prompts"],
            "generated": rec["generated"],
            "min_margin": rec["min_margin"],
        }
        if moe:
            obj["min_routing_gap"] = rec["min_routing_gap"]
        if "generated_use_cache_false" in rec:
            obj["generated_use_cache_false"] = rec["generated_use_cache_false"]
        notes = NOTES + NOTES_EXTRA.get(name, "")
        obj["notes"] = notes if not problems else notes + "; PROBLEMS: " + "; ".join(problems)
        os.makedirs(out_root, exist_ok=True)
        out_path = os.path.join(out_root, f"{name}.json")
        write_json(out_path, obj)
        print(f"  wrote {out_path} ({os.path.getsize(out_path)} B)")
        assert not problems, f"{name}: {problems} (run with --search and update PROMPT_SEEDS)"


if __name__ == "__main__":
    sys.exit(main())
