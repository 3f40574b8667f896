// kvattn_combine's arguments -> CombineProblem: n partials (O, LSE) over rows indexed by "..." (1 to 3
// dims), merged with the rule of CONTRACT.md step 7.
#include <string>
#include <vector>

#include "api/checks.hpp"
#include "api/extent.hpp"
#include "api/validate.hpp"

namespace kvattn {
namespace {

constexpr int32_t kMaxRowDims = 3;
const char* const kRowSymbols[kMaxRowDims] = {"r0", "r1", "r2"};

void check_combine(const kvattn_combine_params& a, CombineProblem& p) {
  expect_device(a.device_type, a.device_id);
  for (const auto& [name, t] : {std::pair<const char*, const kvattn_tensor&>{"out_partials", a.out_partials},
                                {"lse_partials", a.lse_partials},
                                {"sinks", a.sinks},
                                {"out", a.out},
                                {"lse", a.lse}}) {
    // LSE tensors have no channel dim: any strides (FA3 passes lse_partial transposed).
    const bool lse_like = std::string(name) == "lse_partials" || std::string(name) == "lse";
    expect_well_formed(name, t, lse_like);
  }
  expect_given("out_partials", a.out_partials);
  expect_given("lse_partials", a.lse_partials);
  expect_given("out", a.out);

  // out_partials (n, r..., dv) fp32 with 1 to 3 row dims r...
  const kvattn_tensor& op = a.out_partials;
  if (op.ndim < 2 + 1 || op.ndim > 2 + kMaxRowDims) {
    invalid("out_partials: expected 3 to 5 dims (n, ..., dv) with 1 to 3 dims in \"...\", got " +
            std::to_string(op.ndim) + " dims, shape " + shape_str(op));
  }
  expect_dtype("out_partials", op, kF32);
  const int32_t rank = op.ndim - 2;
  const int64_t n = op.shape[0], dv = op.shape[op.ndim - 1];
  expect_dim_at_least("out_partials", op, op.ndim - 1, "dv", 1);
  std::vector<Dim> rows;
  for (int32_t j = 0; j < rank; ++j) rows.push_back({op.shape[1 + j], kRowSymbols[j]});

  // lse_partials (n, r...) fp32; out (r..., dv) f32/f16/bf16; lse (r...) fp32; sinks (r_last,) fp32.
  std::vector<Dim> lp_dims{{n, "n"}};
  lp_dims.insert(lp_dims.end(), rows.begin(), rows.end());
  expect_shape("lse_partials", a.lse_partials, lp_dims);
  expect_dtype("lse_partials", a.lse_partials, kF32);
  std::vector<Dim> out_dims = rows;
  out_dims.push_back({dv, "dv"});
  expect_shape("out", a.out, out_dims);
  expect_dtype_in("out", a.out, {kF32, KVATTN_DTYPE_F16, KVATTN_DTYPE_BF16});
  if (given(a.lse)) {
    expect_shape("lse", a.lse, rows);
    expect_dtype("lse", a.lse, kF32);
  }
  if (given(a.sinks)) {
    expect_shape("sinks", a.sinks, {{rows.back().size, kRowSymbols[rank - 1]}});
    expect_dtype("sinks", a.sinks, kF32);
  }

  expect_disjoint_outputs(
      {{"out", &a.out}, {"lse", &a.lse}},
      {{"out_partials", &a.out_partials}, {"lse_partials", &a.lse_partials}, {"sinks", &a.sinks}});

  p.device_type = a.device_type;
  p.device_id = a.device_id;
  p.stream = a.stream;
  p.num_splits = to_int32("out_partials: n", n);
  p.head_dim_v = to_int32("out_partials: dv", dv);
  p.out_partials = static_cast<const float*>(op.data);
  p.op_split_stride = op.strides[0];
  p.lse_partials = static_cast<const float*>(a.lse_partials.data);
  p.lp_split_stride = a.lse_partials.strides[0];
  p.sinks = static_cast<const float*>(a.sinks.data);
  p.out = a.out.data;
  p.out_dtype = static_cast<DType>(a.out.dtype);
  p.lse = static_cast<float*>(a.lse.data);
  // "..." is padded in front with size-1 dims of stride 0 up to 3 dims.
  const int32_t pad = kMaxRowDims - rank;
  for (int32_t j = 0; j < rank; ++j) {
    p.row_shape[pad + j] = op.shape[1 + j];
    p.op_row_strides[pad + j] = op.strides[1 + j];
    p.lp_row_strides[pad + j] = a.lse_partials.strides[1 + j];
    p.out_row_strides[pad + j] = a.out.strides[j];
    if (given(a.lse)) p.lse_row_strides[pad + j] = a.lse.strides[j];
  }
}

}  // namespace

kvattn_status validate_combine(const kvattn_combine_params& args, CombineProblem* problem) {
  CombineProblem p;
  const kvattn_status status = run_checks([&] { check_combine(args, p); });
  if (status == KVATTN_OK) *problem = p;
  return status;
}

}  // namespace kvattn
