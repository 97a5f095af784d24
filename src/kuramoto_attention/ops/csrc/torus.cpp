// CPU kernels of the torus's gated query and key (ops/fused.py: query_key) around their cosines and sines: the
// products with the gates, cast and written in the heads' layout, and the backward of those products. Each replaces a
// dozen PyTorch operators (a pass over memory each, two of them strided copies) with one pass. The cosines, sines and
// gates stay PyTorch's own operators, so that every number is the Python body's to the bit: each output element is
// the same roundings of the same operands. The build does not contract a·b + c into a fused multiply-add
// (-ffp-contract=off), but torch's AVX2 and AVX-512 kernels are compiled with contraction, and their addcmul rounds
// once: built for those (KURAMOTO_FMA, native.py), the kernel calls std::fma where the Python body calls addcmul
// (the test compares the two to the bit).
//
//   features_forward   q_{h,(i,e)} = cast(ψ_i(φ + β)_j g^q_j),  k_{h,(i,e)} = cast(ψ_i(φ)_j g^k_j)
//                      (j = h·d + e, ψ = (cos, sin), i = 0, 1)
//   features_backward  dg^q_j = dc_j cos_j + ds_j sin_j,  dφ^q_j = (ds_j cos_j − dc_j sin_j) g^q_j  (with φ + β for
//                      the query); the same for the key; dφ = dφ^q + dφ^k
//
// Layout: cos, sin (B·T, k) rows, k = H·d; the gates g (B·T, 2, k) (the query's, then the key's); q and k
// (B, T, H, 2d), the attention's view of them being (B, H, T, 2d); their gradients (B, H, T, 2d) with any strides
// but the last.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include "numbers.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using kuramoto::recast;

constexpr int64_t kGrain = 16;  // tokens per parallel task

struct Shape {
  int64_t tokens, positions, heads, d, k;
};

Shape shape_of(const torch::Tensor& cos, const torch::Tensor& gates, int64_t heads, int64_t positions) {
  TORCH_CHECK(cos.dim() == 2 && heads > 0 && cos.size(1) % heads == 0, "torus: cos must be (B·T, k), k = H·d");
  TORCH_CHECK(positions > 0 && cos.size(0) % positions == 0, "torus: the tokens must be B rows of T positions");
  TORCH_CHECK(gates.dim() == 3 && gates.size(0) == cos.size(0) && gates.size(1) == 2 && gates.size(2) == cos.size(1),
              "torus: the gates must be (B·T, 2, k)");
  return {cos.size(0), positions, heads, cos.size(1) / heads, cos.size(1)};
}

template <typename T, typename S>
void features_forward(const Shape& n, const T* cq, const T* sq, const T* c, const T* s, const T* g, S* q, S* key) {
  at::parallel_for(0, n.tokens, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t row = t * n.k;
      const T *gq = g + 2 * row, *gk = gq + n.k;
      for (int64_t h = 0; h < n.heads; ++h) {
        const int64_t j0 = h * n.d;
        S *qc = q + 2 * row + 2 * j0, *qs = qc + n.d, *kc = key + 2 * row + 2 * j0, *ks = kc + n.d;
        for (int64_t e = 0; e < n.d; ++e) {
          const int64_t j = j0 + e;
          qc[e] = recast<S>(cq[row + j] * gq[j]);
          qs[e] = recast<S>(sq[row + j] * gq[j]);
          kc[e] = recast<S>(c[row + j] * gk[j]);
          ks[e] = recast<S>(s[row + j] * gk[j]);
        }
      }
    }
  });
}

// a·b + c as torch's addcmul computes it on this CPU
template <typename T>
KA_INLINE T multiply_add(T a, T b, T c) {
#ifdef KURAMOTO_FMA
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// one of q, k: dg and dφ of its part; grad points at (b, h, t)'s row of 2d
template <typename T, typename S>
KA_INLINE void product_backward(const S* grad, int64_t d, const T* c, const T* s, const T* g, T* dg, T* dphi) {
  for (int64_t e = 0; e < d; ++e) {
    const T dc = recast<T>(grad[e]), ds = recast<T>(grad[d + e]);
    // dc cos + ds sin and ds cos − dc sin, each a mul and an addcmul in the Python body
    dg[e] = multiply_add(ds, s[e], dc * c[e]);
    dphi[e] = multiply_add(-dc, s[e], ds * c[e]) * g[e];
  }
}

template <typename T, typename S>
void features_backward(const Shape& n, const torch::Tensor& grad_q, const torch::Tensor& grad_k, const T* c,
                       const T* s, const T* cq, const T* sq, const T* g, T* dg, T* dphi, T* dphi_q) {
  const S *pq = grad_q.data_ptr<S>(), *pk = grad_k.data_ptr<S>();
  const int64_t qb = grad_q.stride(0), qh = grad_q.stride(1), qt = grad_q.stride(2);
  const int64_t kb = grad_k.stride(0), kh = grad_k.stride(1), kt = grad_k.stride(2);
  at::parallel_for(0, n.tokens, kGrain, [&](int64_t lo, int64_t hi) {
    std::vector<T> buffer(dphi_q ? 0 : n.d);  // the query's dφ where it is not an output
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t b = t / n.positions, p = t - b * n.positions, row = t * n.k;
      for (int64_t h = 0; h < n.heads; ++h) {
        const int64_t j = row + h * n.d, jg = 2 * row + h * n.d;
        T* phi_q = dphi_q ? dphi_q + j : buffer.data();
        product_backward(pq + b * qb + h * qh + p * qt, n.d, cq + j, sq + j,
                         g + jg, dg + jg, phi_q);
        product_backward(pk + b * kb + h * kh + p * kt, n.d, c + j, s + j,
                         g + jg + n.k, dg + jg + n.k, dphi + j);
        for (int64_t e = 0; e < n.d; ++e) dphi[j + e] = phi_q[e] + dphi[j + e];
      }
    }
  });
}

// float32 or float64 rows; features (and their gradients) in the rows' dtype or bfloat16
template <typename F>
auto by_dtype(const torch::Tensor& rows, torch::ScalarType features, F&& f) {
  const auto dtype = rows.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kDouble, "torus: the rows must be float32 or float64");
  TORCH_CHECK(features == dtype || (features == torch::kBFloat16 && dtype == torch::kFloat),
              "torus: the features must be in the rows' dtype, or bfloat16 with float32 rows");
  if (dtype == torch::kDouble) return f(double{}, double{});
  return features == torch::kBFloat16 ? f(float{}, at::BFloat16{}) : f(float{}, float{});
}

void check_rows(const std::vector<torch::Tensor>& rows) {
  for (const auto& r : rows) {
    TORCH_CHECK(r.is_contiguous() && r.device().is_cpu() && r.scalar_type() == rows[0].scalar_type(),
                "torus: the rows must be contiguous CPU tensors of one dtype");
  }
}

std::vector<torch::Tensor> features_forward_any(torch::Tensor cos_q, torch::Tensor sin_q, torch::Tensor cos,
                                                torch::Tensor sin, torch::Tensor gates, int64_t heads,
                                                int64_t positions, torch::ScalarType dtype) {
  check_rows({cos_q, sin_q, cos, sin, gates});
  const Shape n = shape_of(cos, gates, heads, positions);
  auto opts = cos.options().dtype(dtype);
  const int64_t batch = n.tokens / n.positions;
  torch::Tensor q = torch::empty({batch, n.positions, n.heads, 2 * n.d}, opts), key = torch::empty_like(q);
  by_dtype(cos, dtype, [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    features_forward<T, S>(n, cos_q.data_ptr<T>(), sin_q.data_ptr<T>(), cos.data_ptr<T>(), sin.data_ptr<T>(),
                           gates.data_ptr<T>(), q.data_ptr<S>(), key.data_ptr<S>());
    return 0;
  });
  return {q, key};
}

std::vector<torch::Tensor> features_backward_any(torch::Tensor grad_q, torch::Tensor grad_k, torch::Tensor cos,
                                                 torch::Tensor sin, torch::Tensor cos_q, torch::Tensor sin_q,
                                                 torch::Tensor gates, bool need_query) {
  check_rows({cos, sin, cos_q, sin_q, gates});
  TORCH_CHECK(grad_q.dim() == 4 && grad_q.sizes() == grad_k.sizes() && grad_q.scalar_type() == grad_k.scalar_type(),
              "torus: the features' gradients must be (B, H, T, 2d) of one dtype");
  TORCH_CHECK(grad_q.stride(-1) == 1 && grad_k.stride(-1) == 1, "torus: the gradients' rows must be contiguous");
  const Shape n = shape_of(cos, gates, grad_q.size(1), grad_q.size(2));
  TORCH_CHECK(grad_q.size(0) * grad_q.size(2) == n.tokens && grad_q.size(3) == 2 * n.d,
              "torus: the gradients must be (B, H, T, 2d) for the rows' B·T tokens");
  torch::Tensor dg = torch::empty_like(gates), dphi = torch::empty_like(cos);
  torch::Tensor dphi_q = need_query ? torch::empty_like(cos) : cos.new_empty({0});
  by_dtype(cos, grad_q.scalar_type(), [&](auto t, auto s) {
    using T = decltype(t);
    features_backward<T, decltype(s)>(n, grad_q, grad_k, cos.data_ptr<T>(), sin.data_ptr<T>(), cos_q.data_ptr<T>(),
                                      sin_q.data_ptr<T>(), gates.data_ptr<T>(), dg.data_ptr<T>(), dphi.data_ptr<T>(),
                                      need_query ? dphi_q.data_ptr<T>() : nullptr);
    return 0;
  });
  return {dg, dphi, dphi_q};
}

}  // namespace

namespace kuramoto {

void register_torus(pybind11::module_& m) {
  m.def("torus_features_forward", &features_forward_any,
        "(cos_q, sin_q, cos, sin (B·T, k), gates (B·T, 2, k), H, T, dtype) -> (q, k (B, T, H, 2d))");
  m.def("torus_features_backward", &features_backward_any,
        "(dq, dk (B, H, T, 2d), cos, sin, cos_q, sin_q, gates, need_query) -> (dg as gates, dφ, the query's dφ)");
}

}  // namespace kuramoto
