"""`paged|kvattn`: transformers' continuous batching (generate_batch) over its PagedAttentionCache, with kvattn
appending into the slot pool and attending through the ragged index (no K/V gathered), against greedy
generate() with eager attention and the same weights.

Tiny random-weight models from configs: Llama (GQA), Qwen3, Mistral (sliding window 16: every step on the
ragged index), Gemma2 (softcap, sliding window 5) and GPT-OSS (sinks, sliding window 5); with window 5 the
prompt chunks wrap the ring buffer, so those layer steps take the read-then-write path (counted). Small
blocks (4 slots) and a small token budget (8) make prompts span scattered blocks and prefill in chunks.

CPU: fp32, head_dim 16, tokens must be equal. CUDA (the H200): bf16, head_dim 128 (a developer build's
shape), with and without CUDA graphs; the eager reference runs the same bf16 weights in fp32, and tokens
must agree up to the first step where the reference's top-2 logit margin is below the bf16 tolerance.
"""
import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (tools/deps.sh torch)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (requirements-torch.txt)")

import kvattn  # noqa: E402
from kvattn.integrations import transformers as kt  # noqa: E402

PROMPTS = [[5, 7, 9, 11, 13, 2, 3], [8, 1], [4, 4, 6, 10, 12, 14, 1, 2, 3, 4, 5, 6], [3]]
NEW_TOKENS = 8
BF16_MARGIN = 0.5  # top-2 logit gap (fp32 reference) below which bf16 rounding may pick either token


def _configs(head_dim):
    common = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=head_dim, max_position_embeddings=256, initializer_range=0.2)
    c = {
        "llama_gqa": transformers.LlamaConfig(**common),
        "qwen3": transformers.Qwen3Config(**common),
        "mistral_sliding16": transformers.MistralConfig(**common, sliding_window=16),
        "gemma2_softcap_sliding5": transformers.Gemma2Config(
            **common, sliding_window=5, attn_logit_softcapping=2.0, final_logit_softcapping=None,
            query_pre_attn_scalar=head_dim // 2),
    }
    if hasattr(transformers, "GptOssConfig"):
        c["gptoss_sinks_sliding5"] = transformers.GptOssConfig(
            **common, sliding_window=5, num_local_experts=4, num_experts_per_tok=2)
    return c


NAMES = sorted(_configs(16))
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not (torch.cuda.is_available() and kvattn.has_backend("cuda")), reason="needs a GPU and a CUDA build"))]
PATHS = []  # "ragged" or "gathered", one per kvattn call of paged_attention


@pytest.fixture(autouse=True)
def registered(monkeypatch, request):
    kt.register()
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    assert ALL_ATTENTION_FUNCTIONS["paged|kvattn"] is kt.paged_attention
    inner = kt.flash_attn_with_kvcache

    def recorded(*args, **kwargs):
        PATHS.append("ragged" if kwargs.get("kv_indptr") is not None else "gathered")
        return inner(*args, **kwargs)

    monkeypatch.setattr(kt, "flash_attn_with_kvcache", recorded)
    # transformers sizes the cache from the accelerator's free memory; on the CPU it has none to read, and a
    # CPU case on a GPU machine must not size (or place) its cache by the GPU's
    import transformers.generation.continuous_batching.cache as cb_cache
    callspec = getattr(request.node, "callspec", None)
    device = callspec.params.get("device", "cpu") if callspec else "cpu"
    if device == "cpu" or not torch.cuda.is_available():
        monkeypatch.setattr(cb_cache, "get_device_and_memory_breakdown",
                            lambda: (torch.device("cpu"), 1 << 30, 0, 0))
    yield


def _models(name, device):
    """(eager reference in fp32, kvattn model): the same weights (bf16-rounded on CUDA)."""
    head_dim, dtype = (16, torch.float32) if device == "cpu" else (128, torch.bfloat16)
    cfg = _configs(head_dim)[name]
    torch.manual_seed(NAMES.index(name))
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="kvattn")
    if name.startswith("gptoss"):  # sinks start at zero: make them matter
        with torch.no_grad():
            for layer in ours.model.layers:
                layer.self_attn.sinks.normal_(0.0, 2.0)
    ours = ours.to(device=device, dtype=dtype).eval()
    eager = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager")
    eager.load_state_dict({k: v.float() for k, v in ours.state_dict().items()})
    return eager.to(device).eval(), ours


def _reference(eager, prompt, device):
    """Greedy tokens and, per step, the gap between the two largest logits."""
    out = eager.generate(torch.tensor([prompt], device=device), max_new_tokens=NEW_TOKENS, do_sample=False,
                         pad_token_id=0, eos_token_id=None, output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt):].tolist()
    top2 = torch.stack(out.logits)[:, 0].float().topk(2, dim=-1).values
    return tokens, (top2[:, 0] - top2[:, 1]).tolist()


@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_generate_batch_matches_eager(name, device, graphs):
    if graphs and device == "cpu":
        pytest.skip("CUDA graphs need CUDA")
    from transformers import ContinuousBatchingConfig, GenerationConfig

    eager, ours = _models(name, device)
    gen = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
    cb = ContinuousBatchingConfig(block_size=4, num_blocks=64, max_batch_tokens=8, use_cuda_graph=graphs,
                                  max_blocks_per_request=0)
    PATHS.clear()
    with torch.no_grad():
        results = ours.generate_batch(PROMPTS, generation_config=gen, continuous_batching_config=cb,
                                      progress_bar=False)
    assert ours.config._attn_implementation == "kvattn"  # restored after the batch
    assert PATHS, "no layer went through paged|kvattn"
    # Under CUDA graphs transformers pads max_seqlen_k to >= 1024, so sliding layers take the read-then-write
    # path there; full-attention layers always take the ragged index. (Only captures call Python.)
    only_sliding = name.startswith("mistral")
    assert ("ragged" in PATHS) != (graphs and only_sliding), PATHS
    sliding5 = name.endswith("sliding5")
    if not sliding5 and not graphs:
        assert set(PATHS) == {"ragged"}, f"{PATHS.count('gathered')} of {len(PATHS)} calls gathered K/V"
    if sliding5:
        assert "gathered" in PATHS  # the 12-token prompt's chunks wrap the ring of 5
    by_prompt = {tuple(r.prompt_ids): r.generated_tokens for r in results.values()}
    for prompt in PROMPTS:
        want, margins = _reference(eager, prompt, device)
        got = by_prompt[tuple(prompt)]
        assert len(got) == NEW_TOKENS
        for step, (w, g) in enumerate(zip(want, got)):
            if w == g:
                continue
            near_tie = device != "cpu" and margins[step] < BF16_MARGIN
            assert near_tie, (f"prompt {prompt}: step {step} gave {g}, eager {w} (top-2 margin {margins[step]:.3f}); "
                              f"kvattn {got}, eager {want}")
            break  # past a near tie the two runs continue different sequences


def test_paged_attention_refuses_a_plain_forward():
    """Called without transformers' paged cache (a standard forward): an error naming what it needs."""
    cfg = _configs(16)["llama_gqa"]
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="paged|kvattn")
    with pytest.raises(kvattn.KvattnError, match="PagedAttentionCache"):
        with torch.no_grad():
            model(torch.tensor([[1, 2, 3]]))
