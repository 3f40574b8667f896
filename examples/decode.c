/* A decode loop through the C ABI, on the CPU backend: a contiguous fp32 KV cache, each step appends one
 * token's key and value (k, v) and attends over the cache, checked against a plain C computation.
 * Then the latency of a tiny call. Build (from the repository root, after building libkvattn.so in build/):
 *   cc -std=c11 -Iinclude examples/decode.c -Lbuild -lkvattn -Wl,-rpath,$PWD/build -lm -o decode && ./decode
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <kvattn/kvattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B = 2, HQ = 8, HK = 2, D = 64, CAPACITY = 64, PROMPT = 20, STEPS = 12 };

/* A row-major (n0, n1, n2, n3) fp32 tensor descriptor. */
static kvattn_tensor tensor4(float* data, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
  kvattn_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = KVATTN_DTYPE_F32;
  t.ndim = 4;
  t.shape[0] = n0, t.shape[1] = n1, t.shape[2] = n2, t.shape[3] = n3;
  t.strides[3] = 1, t.strides[2] = n3, t.strides[1] = n2 * n3, t.strides[0] = n1 * n2 * n3;
  return t;
}

static float uniform(void) {
  return (float)rand() / (float)RAND_MAX * 2.f - 1.f;
}

/* out(i, h) of one query token over the first len slots of row i: softmax(q k^T / sqrt(D)) v, in double. */
static void reference(const float* q, const float* k_cache, const float* v_cache, int i, int h, int len,
                      double* out) {
  const int kv_head = h / (HQ / HK);
  double max = -INFINITY, sum = 0.0, scores[CAPACITY];
  for (int s = 0; s < len; ++s) {
    const float* k = k_cache + ((size_t)(i * CAPACITY + s) * HK + kv_head) * D;
    double dot = 0.0;
    for (int c = 0; c < D; ++c) dot += (double)q[(i * HQ + h) * D + c] * k[c];
    scores[s] = dot / sqrt((double)D);
    if (scores[s] > max) max = scores[s];
  }
  for (int c = 0; c < D; ++c) out[c] = 0.0;
  for (int s = 0; s < len; ++s) {
    const double p = exp(scores[s] - max);
    const float* v = v_cache + ((size_t)(i * CAPACITY + s) * HK + kv_head) * D;
    sum += p;
    for (int c = 0; c < D; ++c) out[c] += p * v[c];
  }
  for (int c = 0; c < D; ++c) out[c] /= sum;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

int main(void) {
  float* k_cache = calloc((size_t)B * CAPACITY * HK * D, sizeof(float));
  float* v_cache = calloc((size_t)B * CAPACITY * HK * D, sizeof(float));
  float q[B * HQ * D], k_new[B * HK * D], v_new[B * HK * D], out[B * HQ * D];
  int32_t seqlens[B] = {PROMPT, PROMPT - 7}; /* tokens already in each row of the cache */
  for (size_t e = 0; e < (size_t)B * CAPACITY * HK * D; ++e) k_cache[e] = uniform(), v_cache[e] = uniform();

  kvattn_fwd_params p;
  kvattn_fwd_params_init(&p);
  p.device_type = KVATTN_DEVICE_CPU;
  p.q = tensor4(q, B, 1, HQ, D);
  p.k_cache = tensor4(k_cache, B, CAPACITY, HK, D);
  p.v_cache = tensor4(v_cache, B, CAPACITY, HK, D);
  p.k = tensor4(k_new, B, 1, HK, D);
  p.v = tensor4(v_new, B, 1, HK, D);
  p.out = tensor4(out, B, 1, HQ, D);
  p.cache_seqlens.data = seqlens;
  p.cache_seqlens.dtype = KVATTN_DTYPE_I32;
  p.cache_seqlens.ndim = 1;
  p.cache_seqlens.shape[0] = B;
  p.cache_seqlens.strides[0] = 1;
  p.causal = 1;

  double worst = 0.0;
  for (int step = 0; step < STEPS; ++step) {
    for (int e = 0; e < B * HQ * D; ++e) q[e] = uniform();
    for (int e = 0; e < B * HK * D; ++e) k_new[e] = uniform(), v_new[e] = uniform();
    if (kvattn_fwd(&p) != KVATTN_OK) {
      fprintf(stderr, "kvattn_fwd: %s\n", kvattn_last_error());
      return 1;
    }
    /* The new token went to slot seqlens[i] and was attended to: check every row and head. */
    for (int i = 0; i < B; ++i) {
      for (int h = 0; h < HQ; ++h) {
        double ref[D];
        reference(q, k_cache, v_cache, i, h, seqlens[i] + 1, ref);
        for (int c = 0; c < D; ++c) {
          const double err = fabs(out[(i * HQ + h) * D + c] - ref[c]);
          if (!(err <= worst)) worst = err; /* a NaN lands here too */
        }
      }
      seqlens[i] += 1;
    }
  }
  printf("decode.c: %d steps of b=%d, hq=%d, hk=%d, d=%d: max |out - reference| = %.2e\n", STEPS, B, HQ, HK,
         D, worst);
  if (!(worst < 2e-5)) {
    fprintf(stderr, "decode.c: error above fp32's tolerance (2e-5)\n");
    return 1;
  }

  /* A tiny call (no append, 1 head, 16 keys): its latency through the C ABI. */
  kvattn_fwd_params tiny = p;
  tiny.k.data = NULL, tiny.v.data = NULL, tiny.cache_seqlens.data = NULL;
  tiny.q = tensor4(q, 1, 1, 1, D);
  tiny.out = tensor4(out, 1, 1, 1, D);
  tiny.k_cache = tensor4(k_cache, 1, 16, 1, D);
  tiny.v_cache = tensor4(v_cache, 1, 16, 1, D);
  const int calls = 2000;
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const double t0 = now_us();
    for (int n = 0; n < calls; ++n) {
      if (kvattn_fwd(&tiny) != KVATTN_OK) {
        fprintf(stderr, "kvattn_fwd (tiny): %s\n", kvattn_last_error());
        return 1;
      }
    }
    const double per_call = (now_us() - t0) / calls;
    if (per_call < best) best = per_call;
  }
  printf("decode.c: a tiny call (1 head, d=%d, 16 keys) takes %.1f us (best of 5 rounds of %d calls)\n", D,
         best, calls);
  free(k_cache);
  free(v_cache);
  return 0;
}
