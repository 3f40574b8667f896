// cpu_combine: merge n split partials per row with the rule of step 7 (cpu/merge.hpp), in double.
#include <vector>

#include "api/backend.hpp"
#include "api/status.hpp"
#include "cpu/merge.hpp"
#include "cpu/numeric.hpp"
#include "cpu/parallel.hpp"

namespace kvattn {

kvattn_status cpu_combine(const CombineProblem& p) {
  if (!cpu::is_cpu_storage_dtype(p.out_dtype)) return cpu::unsupported_dtype("out", p.out_dtype);
  const int n = p.num_splits;
  const int dv = p.head_dim_v;
  const int64_t num_rows = p.row_shape[0] * p.row_shape[1] * p.row_shape[2];
  if (!cpu::pool_config_error().empty()) return fail(KVATTN_ERROR_INVALID_ARGUMENT, cpu::pool_config_error());
  // A row is n * dv multiply-adds: threads only for many rows.
  const int threads = num_rows * n * dv >= (int64_t(1) << 18) ? cpu::pool_size() : 1;
  cpu::parallel_for(num_rows, threads, [&](int64_t row) {
    // Row index -> multi-index (r0, r1, r2) over the "..." dims; r2 is the head axis.
    const int64_t r[3] = {row / (p.row_shape[1] * p.row_shape[2]), (row / p.row_shape[2]) % p.row_shape[1],
                          row % p.row_shape[2]};
    auto offset = [&](const int64_t* strides) {
      return r[0] * strides[0] + r[1] * strides[1] + r[2] * strides[2];
    };

    std::vector<double> lse_parts(n);              // (n)
    std::vector<double> o_parts(int64_t(n) * dv);  // (n, dv)
    std::vector<double> o(dv);                     // (dv)
    const int64_t op_row = offset(p.op_row_strides);
    const int64_t lp_row = offset(p.lp_row_strides);
    for (int j = 0; j < n; ++j) {
      lse_parts[j] = p.lse_partials[j * p.lp_split_stride + lp_row];
      cpu::load_row(DType::f32, p.out_partials, j * p.op_split_stride + op_row, dv,
                    &o_parts[int64_t(j) * dv]);
    }
    const double sink = p.sinks ? double(p.sinks[r[2]]) : 0.0;
    const double lse =
        cpu::merge_partials(n, dv, lse_parts.data(), o_parts.data(), p.sinks ? &sink : nullptr, o.data());
    cpu::store_row(p.out_dtype, p.out, offset(p.out_row_strides), dv, o.data());
    if (p.lse) p.lse[offset(p.lse_row_strides)] = float(lse);
  });
  return KVATTN_OK;
}

}  // namespace kvattn
