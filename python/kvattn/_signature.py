"""FlashAttention-3's Python signatures, written once: every argument's name, position, default, kind and
documentation. The public functions (their signatures and docstrings), the normalization of their
arguments and the torch.library op schema are all derived from these tables.

An argument's kind says how it is normalized (_args.py) and what it becomes in the op schema:
  tensor    a required array (numpy or torch)               -> Tensor name
  cache     a required array written in place by an append  -> Tensor(a!) name
  opt       an optional array                               -> Tensor? name
  seqlens   an int or a (b,) array (cache_seqlens)          -> Tensor? name, int name_value (-1: absent)
  int       anything operator.index takes, int32 range      -> int name
  opt_int   None or an int (int64 range)                    -> int? name
  float     a real number                                   -> float name
  scale     None or a real number > 0 (softmax_scale)       -> float? name
  bool      a bool (numpy bool, 0-d bool array or tensor)   -> bool name
  opt_bool  None or a bool                                  -> bool? name
  window    a length-2 sequence of ints or None (-1)        -> int window_left, int window_right
  metadata  None or get_scheduler_metadata's array          -> Tensor? name
  alias     another name of the argument `target`           -> (folded into the target)
  lse_flag  return lse too (a bool)                         -> (the op always returns lse)
  out       an optional output array, written               -> (the fwd_out op: Tensor(c!) out)
"""
import inspect
import linecache
import textwrap
from typing import NamedTuple

REQUIRED = inspect.Parameter.empty


class Arg(NamedTuple):
    name: str
    kind: str
    default: object
    doc: str  # shape, dtype and meaning; the default is added from `default`
    keyword_only: bool = False
    target: str = None  # alias: the argument it is another name of


def _kw(name, kind, default, doc, target=None):
    return Arg(name, kind, default, doc, True, target)


# flash_attn_with_kvcache: FlashAttention-3's arguments in its order, then kvattn's keyword-only ones.
FWD = (
    Arg("q", "tensor", REQUIRED, "(b, sq, hq, d), or (total_q, hq, d) with cu_seqlens_q; fp16, bf16 or fp8 "
        "e4m3 (fp32 on the CPU backend); last dim contiguous, other strides free"),
    Arg("k_cache", "cache", REQUIRED, "contiguous (b_cache, s_cache, hk, d) with b_cache >= b; paged "
        "(num_pages, page_size, hk, d) with page_table; packed (total_k, hk, d) with cu_seqlens_k. q's dtype "
        "(or fp8 e4m3); any strides with the head dim contiguous (NHD or HND); k is appended in place"),
    Arg("v_cache", "cache", REQUIRED, "contiguous (b_cache, s_cache, hk, dv); paged (num_pages, page_size, "
        "hk, dv); packed (total_k, hk, dv): as k_cache with dv, the head dim of v and out"),
    Arg("k", "opt", None, "new keys (b, s_new, hk, d), or (total_new, hk, d) with cu_seqlens_k_new, the "
        "cache's dtype: rotated (with rotary_cos) and written at slot cache_seqlens[i] + j of sequence i, "
        "then attended to"),
    Arg("v", "opt", None, "new values (b, s_new, hk, dv), or (total_new, hk, dv) with cu_seqlens_k_new"),
    Arg("qv", "opt", None, "(b, sq, hq, dv) or (total_q, hq, dv), q's dtype: MLA-style extra query, "
        "scores add qv . v"),
    Arg("rotary_cos", "opt", None, "(seqlen_ro, rotary_dim / 2), fp32 or q's dtype; rotary_dim even, <= d"),
    Arg("rotary_sin", "opt", None, "(seqlen_ro, rotary_dim / 2), as rotary_cos"),
    Arg("cache_seqlens", "seqlens", None, "int, or (b,) int32: tokens already in the cache (an absolute slot "
        "index, left padding included); None: the full capacity"),
    Arg("cache_batch_idx", "opt", None, "(b,) int32: the cache row (or page-table row) of sequence i; "
        "None: i"),
    Arg("cache_leftpad", "opt", None, "(b,) int32: the first valid slot of sequence i; None: 0"),
    Arg("page_table", "opt", None, "(b_pt, pages_per_row) int32: slot s of a row is in page "
        "page_table[row, s // page_size]; any page size >= 1"),
    Arg("cu_seqlens_q", "opt", None, "(b + 1,) int32: varlen q (with max_seqlen_q)"),
    Arg("cu_seqlens_k_new", "opt", None, "(b + 1,) int32: varlen k, v"),
    Arg("max_seqlen_q", "opt_int", None, "int: the longest query sequence; required with cu_seqlens_q, else "
        "sq if given"),
    Arg("rotary_seqlens", "opt", None, "(b,) int32: base rotary position of sequence i; None: cache_seqlens. "
        "Ignored without rotary_cos/rotary_sin"),
    Arg("q_descale", "opt", None, "(b, hk) fp32: the scale of fp8 q"),
    Arg("k_descale", "opt", None, "(b, hk) fp32: the scale of an fp8 k cache (and of fp8 k)"),
    Arg("v_descale", "opt", None, "(b, hk) fp32: the scale of an fp8 v cache (and of fp8 v)"),
    Arg("softmax_scale", "scale", None, "float > 0: the scale of q . k; None: 1/sqrt(d) "
        "(1/sqrt(d + dv) with qv)"),
    Arg("causal", "bool", False, "bool: key position kp is visible iff kp <= qp (bottom-right aligned)"),
    Arg("window_size", "window", (-1, -1), "(left, right), any length-2 sequence of ints: "
        "qp - left <= kp <= qp + right; -1 (or None) is unbounded"),
    Arg("attention_chunk", "int", 0, "int: > 0 keeps keys in the query's chunk, kp // c == qp // c"),
    Arg("softcap", "float", 0.0, "float: > 0 maps scores x to softcap * tanh(x / softcap)"),
    Arg("rotary_interleaved", "bool", True, "bool: True rotates pairs (2m, 2m+1) (GPT-J), False (m, m + "
        "rotary_dim/2) (GPT-NeoX)"),
    Arg("scheduler_metadata", "metadata", None, "what get_scheduler_metadata returned (or a copy of it): "
        "a hint, never read"),
    Arg("num_splits", "int", 0, "int: split-KV count, 0 chooses, 1 none, n at most n (speed only)"),
    Arg("pack_gqa", "opt_bool", None, "bool or None (choose): pack a GQA group's heads (speed only)"),
    Arg("sm_margin", "int", 0, "int: SMs to leave free (speed only)"),
    Arg("return_softmax_lse", "lse_flag", False, "bool: also return lse, fp32 (b, hq, sq), or (hq, total_q) "
        "with cu_seqlens_q"),
    _kw("sinks", "opt", None, "(hq,) fp32 (fp16/bf16 are widened to an fp32 copy): a learnable sink logit "
        "per query head"),
    _kw("alibi_slopes", "opt", None, "(hq,) or (b, hq) fp32: scores subtract slope * |qp - kp|"),
    _kw("seqused_q", "opt", None, "(b,) int32: only the first seqused_q[i] query tokens of sequence i count; "
        "the others get out 0, lse -inf"),
    _kw("out", "out", None, "as q with dv, q's dtype (bf16 for fp8 q): written and returned"),
    _kw("block_table", "alias", None, "another name of page_table", "page_table"),
    _kw("s_aux", "alias", None, "another name of sinks", "sinks"),
    _kw("learnable_sink", "alias", None, "another name of sinks", "sinks"),
    _kw("cu_seqlens_k", "opt", None, "(b + 1,) int32: packed varlen cache, sequence i owns rows "
        "[cu_seqlens_k[i], cu_seqlens_k[i+1]) of k_cache, v_cache"),
    _kw("deterministic", "bool", False, "bool: split decisions independent of the rest of the batch"),
    _kw("kv_indptr", "opt", None, "(b_pt + 1,) int32, with kv_indices: a ragged page index in place of "
        "page_table (FlashInfer's paged_kv_indptr): row r owns pages kv_indices[kv_indptr[r]:kv_indptr[r+1]], "
        "slot s in page kv_indices[kv_indptr[r] + s // page_size]; rows as page_table's (cache_batch_idx, "
        "else i). k_cache paged (num_pages, page_size, hk, d), or a slot pool (num_slots, hk, d) = page size "
        "1 (kv_indices are per-token slots). A kvattn extension, not in FA3"),
    _kw("kv_indices", "opt", None, "(nnz,) int32, with kv_indptr: page ids (slot ids for a slot pool)"),
)


def _options(qv_shape):
    """The arguments flash_attn_varlen_func and flash_attn_func share, in FA3's order (softmax_scale to
    sm_margin); qv_shape is qv's shape in the function's layout."""
    return (
        Arg("softmax_scale", "scale", None, "float > 0; None: 1/sqrt(d) (1/sqrt(d + dv) with qv)",
            target="softmax_scale"),
        Arg("causal", "bool", False, "bool: bottom-right aligned causal mask", target="causal"),
        Arg("qv", "opt", None, qv_shape + ", q's dtype", target="qv"),
        Arg("q_descale", "opt", None, "(b, hk) fp32", target="q_descale"),
        Arg("k_descale", "opt", None, "(b, hk) fp32", target="k_descale"),
        Arg("v_descale", "opt", None, "(b, hk) fp32", target="v_descale"),
        Arg("window_size", "window", (-1, -1), "(left, right); -1 is unbounded", target="window_size"),
        Arg("attention_chunk", "int", 0, "int: > 0 keeps keys in the query's chunk", target="attention_chunk"),
        Arg("softcap", "float", 0.0, "float: > 0 caps scores with tanh", target="softcap"),
        Arg("num_splits", "int", 1, "int: split-KV count, 0 chooses (speed only)", target="num_splits"),
        Arg("pack_gqa", "opt_bool", None, "bool or None (speed only)", target="pack_gqa"),
        Arg("deterministic", "bool", False, "bool: split decisions independent of the batch",
            target="deterministic"),
        Arg("sm_margin", "int", 0, "int: SMs to leave free (speed only)", target="sm_margin"),
    )


# flash_attn_varlen_func: FlashAttention-3's arguments; `to` is the flash_attn_with_kvcache argument each
# becomes (None: checked only).
VARLEN = (
    Arg("q", "tensor", REQUIRED, "(total_q, hq, d); fp16, bf16 or fp8 e4m3 (fp32 on the CPU backend)", target="q"),
    Arg("k", "tensor", REQUIRED, "(total_k, hk, d), q's dtype: sequence i owns rows [cu_seqlens_k[i], "
        "cu_seqlens_k[i+1])", target="k_cache"),
    Arg("v", "tensor", REQUIRED, "(total_k, hk, dv), as k", target="v_cache"),
    Arg("cu_seqlens_q", "opt", REQUIRED, "(b + 1,) int32", target="cu_seqlens_q"),
    Arg("cu_seqlens_k", "opt", REQUIRED, "(b + 1,) int32", target="cu_seqlens_k"),
    Arg("max_seqlen_q", "opt_int", REQUIRED, "int: the longest query sequence", target="max_seqlen_q"),
    Arg("max_seqlen_k", "opt_int", REQUIRED, "int: the longest key sequence (checked to be an int only: "
        "kvattn reads each length from cu_seqlens_k / seqused_k)"),
    Arg("seqused_q", "opt", None, "(b,) int32: query tokens used per sequence", target="seqused_q"),
    Arg("seqused_k", "opt", None, "(b,) int32: keys used per sequence; None: all its rows",
        target="cache_seqlens"),
    *_options("(total_q, hq, dv)"),
    Arg("return_attn_probs", "lse_flag", False, "bool: also return lse, fp32 (hq, total_q)",
        target="return_softmax_lse"),
    _kw("sinks", "opt", None, "(hq,) fp32: a sink logit per query head", "sinks"),
    _kw("alibi_slopes", "opt", None, "(hq,) or (b, hq) fp32", "alibi_slopes"),
    _kw("out", "out", None, "(total_q, hq, dv): written and returned", "out"),
    _kw("scheduler_metadata", "metadata", None, "what get_scheduler_metadata returned: a hint, never read",
        "scheduler_metadata"),
    _kw("block_table", "opt", None, "(b, pages_per_row) int32: k, v are paged (num_pages, page_size, hk, d) "
        "and seqused_k gives the lengths (vLLM's form; then cu_seqlens_k must be None)", "page_table"),
)

# flash_attn_func: FlashAttention-3's dense forward.
DENSE = (
    Arg("q", "tensor", REQUIRED, "(b, sq, hq, d); fp16, bf16 or fp8 e4m3 (fp32 on the CPU backend)", target="q"),
    Arg("k", "tensor", REQUIRED, "(b, sk, hk, d), q's dtype", target="k_cache"),
    Arg("v", "tensor", REQUIRED, "(b, sk, hk, dv), q's dtype", target="v_cache"),
    *_options("(b, sq, hq, dv)"),
    Arg("return_attn_probs", "lse_flag", False, "bool: also return lse, fp32 (b, hq, sq)",
        target="return_softmax_lse"),
    _kw("sinks", "opt", None, "(hq,) fp32: a sink logit per query head", "sinks"),
    _kw("alibi_slopes", "opt", None, "(hq,) or (b, hq) fp32", "alibi_slopes"),
    _kw("out", "out", None, "(b, sq, hq, dv): written and returned", "out"),
)

# get_scheduler_metadata: FlashAttention-3's static description of a flash_attn_with_kvcache call.
METADATA = (
    Arg("batch_size", "int", REQUIRED, "int: b"),
    Arg("max_seqlen_q", "int", REQUIRED, "int: sq, or the longest query sequence with cu_seqlens_q"),
    Arg("max_seqlen_k", "int", REQUIRED, "int: the cache capacity per sequence (s_cache, or pages_per_row * "
        "page_size)"),
    Arg("num_heads_q", "int", REQUIRED, "int: hq"),
    Arg("num_heads_kv", "int", REQUIRED, "int: hk"),
    Arg("headdim", "int", REQUIRED, "int: d"),
    Arg("cache_seqlens", "tensor", REQUIRED, "(b,) int32: its device is the result's"),
    Arg("qkv_dtype", "dtype", "bfloat16", "the dtype of q and the cache: a torch or numpy dtype or its name"),
    Arg("headdim_v", "opt_int", None, "int: dv; None: d"),
    Arg("cu_seqlens_q", "opt", None, "(b + 1,) int32: varlen q"),
    Arg("cu_seqlens_k_new", "opt", None, "(b + 1,) int32: varlen k, v"),
    Arg("cache_leftpad", "opt", None, "(b,) int32"),
    Arg("page_size", "opt_int", None, "int: the page size of a paged cache; None: contiguous"),
    Arg("max_seqlen_k_new", "int", 0, "int: new tokens per sequence (k, v)"),
    Arg("causal", "bool", False, "bool"),
    Arg("window_size", "window", (-1, -1), "(left, right)"),
    Arg("attention_chunk", "int", 0, "int"),
    Arg("has_softcap", "bool", False, "bool"),
    Arg("num_splits", "int", 0, "int"),
    Arg("pack_gqa", "opt_bool", None, "bool or None"),
    Arg("sm_margin", "int", 0, "int"),
)

# ---------------------------------------------------------------- derived: the op schema

_SCHEMA = {
    "tensor": "Tensor {n}", "opt": "Tensor? {n}", "seqlens": "Tensor? {n}, int {n}_value",
    "int": "int {n}", "opt_int": "int? {n}", "float": "float {n}", "scale": "float? {n}", "bool": "bool {n}",
    "opt_bool": "bool? {n}", "window": "int window_left, int window_right", "metadata": "Tensor? {n}",
}
_MUTATED = {"k_cache": "a", "v_cache": "b", "out": "c"}  # alias sets of the arguments an op writes

# The torch op's arguments, in schema order (every FWD argument but aliases, the lse flag and out). They
# are also kvattn_fwd_params's field names, so the op's implementation fills the struct by name.
OP_ARGS = tuple(a for a in FWD if a.kind not in ("alias", "lse_flag", "out"))


def op_schema(with_out):
    """The schema of kvattn::fwd (returns (out, lse)) or, `with_out`, kvattn::fwd_out (writes out, returns lse)."""
    parts = []
    for a in OP_ARGS:
        if a.kind == "cache":
            parts.append(f"Tensor({_MUTATED[a.name]}!) {a.name}")
        else:
            parts.append(_SCHEMA[a.kind].format(n=a.name))
    if with_out:
        parts.append(f"Tensor({_MUTATED['out']}!) out")
    return "(" + ", ".join(parts) + ") -> " + ("Tensor" if with_out else "(Tensor, Tensor)")


def op_arg_names():
    """The op's argument names in schema order, seqlens and window expanded as op_schema does."""
    names = []
    for a in OP_ARGS:
        if a.kind == "seqlens":
            names += [a.name, a.name + "_value"]
        elif a.kind == "window":
            names += ["window_left", "window_right"]
        else:
            names.append(a.name)
    return tuple(names)


# ---------------------------------------------------------------- derived: functions and docstrings


def _default_text(a):
    if a.default is REQUIRED:
        return "required"
    if a.kind == "alias":
        return f"alias of {a.target}"
    return f"default {a.default!r}"


def docstring(head, args, returns):
    """`head`, then one entry per argument (its documentation and default), then `returns`."""
    lines = [head.strip(), "", "Arguments:"]
    for a in args:
        lines += textwrap.wrap(f"{a.name}: {a.doc}. ({_default_text(a)})", 108, initial_indent="    ",
                               subsequent_indent="        ", break_on_hyphens=False)
    lines += ["", "Returns:"] + textwrap.wrap(returns.strip(), 108, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines) + "\n"


def argument_doc(fn, name):
    """The docstring entry of argument `name` of a function made by make_function."""
    lines = (fn.__doc__ or "").splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"    {name}: "):
            entry = [line[len(f"    {name}: "):]]
            for more in lines[i + 1:]:
                if not more.startswith("        "):
                    break
                entry.append(more.strip())
            return " ".join(entry)
    return None


_made = 0


def make_function(name, args, body, doc, prologue=None):
    """A function `name` with the signature `args` (names, positions, defaults) that calls
    `body(values)` with the tuple of its argument values in `args` order. Generated source, so that the
    signature is a real one (inspect, help(), tracebacks and torch.compile see it).

    `prologue(defaults)`, if given, returns (source lines, names they use) that run first (a fast path that
    may return): `defaults` maps each argument with a default to the global name holding it."""
    global _made
    params, values, seen_kw = [], [], False
    env = {"_body": body}
    for i, a in enumerate(args):
        if a.keyword_only and not seen_kw:
            params.append("*")
            seen_kw = True
        if a.default is REQUIRED:
            params.append(a.name)
        else:
            env[f"_d{i}"] = a.default
            params.append(f"{a.name}=_d{i}")
        values.append(a.name)
    lines = []
    if prologue is not None:
        lines, names = prologue({a.name: f"_d{i}" for i, a in enumerate(args) if a.default is not REQUIRED})
        env.update(names)
    source = "".join(f"{line}\n" for line in [f"def {name}({', '.join(params)}):"] + [
        "    " + line for line in lines] + [f"    return _body(({', '.join(values)},))"])
    _made += 1
    filename = f"<kvattn generated {name} {_made}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), env)
    fn = env[name]
    fn.__doc__ = doc
    fn.__module__ = "kvattn"
    fn.__qualname__ = name
    return fn
