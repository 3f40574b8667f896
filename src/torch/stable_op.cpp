// kvattn_stable::fwd, the optional torch op of the Python eager path (docs/DESIGN.md, "Python host path"):
// built against torch's stable ABI only (torch/csrc/stable, the C shim), so one build serves every torch
// >= 2.10. It reads each tensor's pointer, sizes and strides through the shim, fills kvattn_fwd_params,
// allocates out, lse and the workspace through the shim (aoti_torch_empty_strided) and calls the C ABI, which
// it finds in the libkvattn.so that Python already loaded (kvattn_stable::init(path)). It serves the common,
// valid call only: anything unusual (a device mismatch, > 5 dims, a dtype the ABI lacks, a failed call)
// throws, and python/kvattn/_stable.py then runs the ctypes path, whose KvattnError names the argument.
// Build: tools/build_torch_op.sh (g++ against the installed torch's headers; no libtorch link needed at
// build time beyond its shim symbols, resolved when torch loads the library).
#include <dlfcn.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvattn/kvattn.h"

namespace {

using torch::stable::Tensor;

// The C ABI entry points, from the library Python loaded.
struct Abi {
  // aoti_torch_get_current_cuda_stream lives in libtorch_cuda: looked up, so that the op also loads
  // into a CPU-only torch (CUDA tensors then take the ctypes path).
  AOTITorchError (*current_cuda_stream)(int32_t, void**) = nullptr;
  void (*params_init)(kvattn_fwd_params*) = nullptr;
  kvattn_status (*fwd_sized)(const kvattn_fwd_params*, size_t*) = nullptr;
  kvattn_status (*fwd)(const kvattn_fwd_params*) = nullptr;
  kvattn_fwd_params defaults{};
};
std::atomic<const Abi*> g_abi{nullptr};

void fail(const std::string& what) {
  throw std::runtime_error("kvattn_stable: " + what);
}

template <class F>
F symbol(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == nullptr) fail(std::string("libkvattn.so lacks ") + name);
  return reinterpret_cast<F>(f);
}

// The library at `path` (already loaded by ctypes: dlopen returns that copy). Returns the ABI version.
int64_t init(std::string path) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) fail("cannot load " + path);
  auto* abi = new Abi;  // lives as long as the process, like the library
  abi->params_init = symbol<void (*)(kvattn_fwd_params*)>(lib, "kvattn_fwd_params_init");
  abi->fwd_sized = symbol<kvattn_status (*)(const kvattn_fwd_params*, size_t*)>(lib, "kvattn_fwd_sized");
  abi->fwd = symbol<kvattn_status (*)(const kvattn_fwd_params*)>(lib, "kvattn_fwd");
  abi->params_init(&abi->defaults);
  void* stream_fn = dlsym(RTLD_DEFAULT, "aoti_torch_get_current_cuda_stream");
  if (stream_fn == nullptr) {
    if (void* torch_cuda = dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD)) {
      stream_fn = dlsym(torch_cuda, "aoti_torch_get_current_cuda_stream");
    }
  }
  abi->current_cuda_stream = reinterpret_cast<AOTITorchError (*)(int32_t, void**)>(stream_fn);
  if (abi->defaults.struct_size != sizeof(kvattn_fwd_params)) fail("kvattn_fwd_params size differs");
  g_abi.store(abi, std::memory_order_release);
  return KVATTN_ABI_VERSION;
}

kvattn_dtype dtype_code(int32_t t) {
  if (t == aoti_torch_dtype_bfloat16()) return KVATTN_DTYPE_BF16;
  if (t == aoti_torch_dtype_float16()) return KVATTN_DTYPE_F16;
  if (t == aoti_torch_dtype_float32()) return KVATTN_DTYPE_F32;
  if (t == aoti_torch_dtype_int32()) return KVATTN_DTYPE_I32;
  if (t == aoti_torch_dtype_int64()) return KVATTN_DTYPE_I64;
  if (t == aoti_torch_dtype_float8_e4m3fn()) return KVATTN_DTYPE_FP8_E4M3;
  fail("dtype without a kvattn code");
  return KVATTN_DTYPE_NONE;
}

int64_t g_empty_element = 0;  // where a zero-element tensor points (present, never dereferenced)

// An uninitialized contiguous tensor on the device of the call (aoti_torch_empty_strided: no dispatcher
// round trip through a boxed stack).
Tensor empty(const std::vector<int64_t>& shape, int32_t dtype, int32_t device_type, int32_t device_index) {
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    step *= shape[i] > 0 ? shape[i] : 1;
  }
  AtenTensorHandle h = nullptr;
  if (aoti_torch_empty_strided(static_cast<int64_t>(shape.size()), shape.data(), strides.data(), dtype,
                               device_type, device_index, &h)) {
    fail("allocating an output");
  }
  return Tensor(h);
}

// Describes the tensors of one call; all must be on the first one's device.
struct Describer {
  int32_t device_type = -1, device_index = -1;

  void operator()(const Tensor& x, kvattn_tensor* t) {
    AtenTensorHandle h = x.get();
    int32_t type = 0, index = 0, dtype = 0;
    int64_t ndim = 0;
    int64_t *sizes = nullptr, *strides = nullptr;
    void* data = nullptr;
    if (aoti_torch_get_device_type(h, &type) || aoti_torch_get_device_index(h, &index) ||
        aoti_torch_get_dtype(h, &dtype) || aoti_torch_get_dim(h, &ndim) || aoti_torch_get_sizes(h, &sizes) ||
        aoti_torch_get_strides(h, &strides) || aoti_torch_get_data_ptr(h, &data)) {
      fail("reading a tensor");
    }
    if (device_type < 0) {
      device_type = type;
      device_index = index;
    } else if (type != device_type || index != device_index) {
      fail("tensors on different devices");
    }
    if (ndim > KVATTN_MAX_DIMS) fail("too many dims");
    t->data = data != nullptr ? data : &g_empty_element;
    t->dtype = dtype_code(dtype);
    t->ndim = static_cast<int32_t>(ndim);
    bool empty = false;
    for (int64_t i = 0; i < ndim; ++i) {
      t->shape[i] = sizes[i];
      t->strides[i] = strides[i];
      empty = empty || sizes[i] == 0;
    }
    // Strides that address no element are free: made contiguous, as the Python binding does.
    if (empty) {
      int64_t step = 1;
      for (int64_t i = ndim - 1; i >= 0; --i) {
        t->strides[i] = step;
        step *= sizes[i] > 0 ? sizes[i] : 1;
      }
    } else if (ndim > 0 && sizes[ndim - 1] == 1) {
      t->strides[ndim - 1] = 1;
    }
  }
};

// The tensors' positions (the order of python/kvattn/_stable.py's TENSORS; the bits of the mask).
enum : int {
  kQ,
  kKCache,
  kVCache,
  kK,
  kV,
  kQv,
  kRotaryCos,
  kRotarySin,
  kRotarySeqlens,
  kCacheSeqlens,
  kCacheBatchIdx,
  kCacheLeftpad,
  kPageTable,
  kCuSeqlensQ,
  kSequsedQ,
  kCuSeqlensKNew,
  kCuSeqlensK,
  kAlibiSlopes,
  kSinks,
  kQDescale,
  kKDescale,
  kVDescale,
  kKvIndptr,
  kKvIndices,
  kTensors
};

kvattn_tensor kvattn_fwd_params::*const kTensorFields[kTensors] = {
    &kvattn_fwd_params::q,
    &kvattn_fwd_params::k_cache,
    &kvattn_fwd_params::v_cache,
    &kvattn_fwd_params::k,
    &kvattn_fwd_params::v,
    &kvattn_fwd_params::qv,
    &kvattn_fwd_params::rotary_cos,
    &kvattn_fwd_params::rotary_sin,
    &kvattn_fwd_params::rotary_seqlens,
    &kvattn_fwd_params::cache_seqlens,
    &kvattn_fwd_params::cache_batch_idx,
    &kvattn_fwd_params::cache_leftpad,
    &kvattn_fwd_params::page_table,
    &kvattn_fwd_params::cu_seqlens_q,
    &kvattn_fwd_params::seqused_q,
    &kvattn_fwd_params::cu_seqlens_k_new,
    &kvattn_fwd_params::cu_seqlens_k,
    &kvattn_fwd_params::alibi_slopes,
    &kvattn_fwd_params::sinks,
    &kvattn_fwd_params::q_descale,
    &kvattn_fwd_params::k_descale,
    &kvattn_fwd_params::v_descale,
    &kvattn_fwd_params::kv_indptr,
    &kvattn_fwd_params::kv_indices,
};

// The ints after the mask, in the order of _stable.py's INTS; the two floats come as their bits.
enum : int { kMask, kCacheSeqlensValue, kFirstOption, kSoftmaxScale = kFirstOption + 10, kSoftcap, kInts };
constexpr int kOut = kTensors;  // the mask's bit of `out`

double from_bits(int64_t bits) {
  double x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

std::atomic<size_t> g_workspace_hint[64];  // per CUDA device: the bytes its last call needed

// Out (and lse when asked) of flash_attn_with_kvcache; `out` given: written in place and returned.
// `present` holds the tensors given, in kTensorFields order then out; bit i of ints[kMask] says whether
// tensor i is among them (one list of the present tensors and one of ints: each argument of a boxed call,
// and each list entry, costs the Python caller about 0.1-0.5 us).
std::vector<Tensor> run(const std::vector<Tensor>& present, const std::vector<int64_t>& ints, bool want_lse) {
  const Abi* abi = g_abi.load(std::memory_order_acquire);
  if (abi == nullptr) fail("init() was not called");
  if (ints.size() != kInts) fail("expected 14 ints");
  const uint64_t mask = static_cast<uint64_t>(ints[kMask]);
  if ((mask & 7) != 7) fail("q, k_cache and v_cache are required");
  if (static_cast<size_t>(__builtin_popcountll(mask)) != present.size() || (mask >> (kOut + 1)) != 0) {
    fail("tensor mask and list differ");
  }
  kvattn_fwd_params p = abi->defaults;
  Describer describe;
  size_t next = 0;
  for (int i = 0; i < kTensors; ++i) {
    if (mask >> i & 1) describe(present[next++], &(p.*kTensorFields[i]));
  }
  p.cache_seqlens_value = ints[kCacheSeqlensValue];
  p.max_seqlen_q = ints[kFirstOption];
  p.causal = static_cast<int32_t>(ints[kFirstOption + 1]);
  p.window_left = static_cast<int32_t>(ints[kFirstOption + 2]);
  p.window_right = static_cast<int32_t>(ints[kFirstOption + 3]);
  p.attention_chunk = static_cast<int32_t>(ints[kFirstOption + 4]);
  p.rotary_interleaved = static_cast<int32_t>(ints[kFirstOption + 5]);
  p.num_splits = static_cast<int32_t>(ints[kFirstOption + 6]);
  p.pack_gqa = static_cast<int32_t>(ints[kFirstOption + 7]);
  p.sm_margin = static_cast<int32_t>(ints[kFirstOption + 8]);
  p.deterministic = static_cast<int32_t>(ints[kFirstOption + 9]);
  p.softmax_scale = from_bits(ints[kSoftmaxScale]);
  p.softcap = from_bits(ints[kSoftcap]);
  const kvattn_tensor& qd = p.q;
  const int32_t dev_type = describe.device_type, dev_index = describe.device_index;
  std::optional<Tensor> out;
  if (mask >> kOut & 1) {
    out = present[next];
  } else {
    std::vector<int64_t> shape(qd.shape, qd.shape + qd.ndim);
    if (shape.empty() || p.v_cache.ndim == 0) fail("q or v_cache without dims");
    shape.back() = p.v_cache.shape[p.v_cache.ndim - 1];
    int32_t dtype = 0;
    if (qd.dtype == KVATTN_DTYPE_FP8_E4M3 || aoti_torch_get_dtype(present[kQ].get(), &dtype)) {
      dtype = aoti_torch_dtype_bfloat16();  // fp8 q: bf16 out
    }
    out = empty(shape, dtype, dev_type, dev_index);
  }
  describe(*out, &p.out);
  std::vector<Tensor> result{*out};
  if (want_lse) {
    std::vector<int64_t> shape;
    const bool varlen_q = mask >> kCuSeqlensQ & 1;
    if (varlen_q && qd.ndim == 3) {
      shape = {qd.shape[1], qd.shape[0]};
    } else if (!varlen_q && qd.ndim == 4) {
      shape = {qd.shape[0], qd.shape[2], qd.shape[1]};
    } else {
      fail("q's rank");
    }
    result.push_back(empty(shape, aoti_torch_dtype_float32(), dev_type, dev_index));
    describe(result.back(), &p.lse);
  }
  p.device_id = describe.device_index < 0 ? 0 : describe.device_index;
  if (describe.device_type == aoti_torch_device_type_cuda()) {
    p.device_type = KVATTN_DEVICE_CUDA;
    if (abi->current_cuda_stream == nullptr || abi->current_cuda_stream(p.device_id, &p.stream)) {
      fail("no current CUDA stream");
    }
  } else if (describe.device_type == aoti_torch_device_type_cpu()) {
    p.device_type = KVATTN_DEVICE_CPU;
    p.device_id = 0;
    if (abi->fwd(&p) != KVATTN_OK) fail("kvattn_fwd failed");
    return result;
  } else {
    fail("device neither CPU nor CUDA");
  }
  // The workspace: as large as this device's last call needed; a second call when that was too small.
  std::atomic<size_t>* hint = p.device_id < 64 ? &g_workspace_hint[p.device_id] : nullptr;
  size_t guess = hint ? hint->load(std::memory_order_relaxed) : 0, needed = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::optional<Tensor> workspace;
    p.workspace = nullptr;
    p.workspace_bytes = guess;
    if (guess > 0) {
      workspace = empty({static_cast<int64_t>(guess + 256)}, aoti_torch_dtype_uint8(), dev_type, dev_index);
      const auto base = reinterpret_cast<uintptr_t>(workspace->data_ptr());
      p.workspace = reinterpret_cast<void*>(base + (-base) % 256);
    }
    const kvattn_status status = abi->fwd_sized(&p, &needed);
    if (status == KVATTN_OK) return result;
    if (needed <= guess || attempt == 1) break;
    guess = needed;
    if (hint) hint->store(needed, std::memory_order_relaxed);
  }
  fail("kvattn_fwd_sized failed");
  return result;
}

// Two ops, so that the common call returns a Tensor, not a list of one (0.4 us less in Python).
Tensor fwd(std::vector<Tensor> present, std::vector<int64_t> ints) {
  return run(present, ints, false)[0];
}

std::vector<Tensor> fwd_lse(std::vector<Tensor> present, std::vector<int64_t> ints) {
  return run(present, ints, true);
}

}  // namespace

STABLE_TORCH_LIBRARY(kvattn_stable, m) {
  m.def("init(str path) -> int");
  m.def("fwd(Tensor[] present, int[] ints) -> Tensor");
  m.def("fwd_lse(Tensor[] present, int[] ints) -> Tensor[]");
}

STABLE_TORCH_LIBRARY_IMPL(kvattn_stable, CompositeExplicitAutograd, m) {
  m.impl("init", TORCH_BOX(&init));
  m.impl("fwd", TORCH_BOX(&fwd));
  m.impl("fwd_lse", TORCH_BOX(&fwd_lse));
}
