// CPU kernels of ops/vectors.py's fused Functions: the same mathematics as their Python bodies, written as loops over
// each token's oscillators, so that a step reads its inputs and writes its outputs once instead of making one memory
// pass per scalar operation. Tokens run in parallel (at::parallel_for); a token's bound needs the sum over all its
// oscillators, so the attention step makes two passes over them (the sum, then the move).
//
//   move_*      y = normalise(x exp(w))                        the feed-forward's move
//   step_*      y = normalise(x exp(h w)), w = v ⊙ ξ(x, G)     the attention's move, h the norm bound per token
//   features_*  q = g^q ⊙ R x, k = g^k ⊙ R x                   the drifted, gated query/key features (the
//                                                              gates from softplus(z), normalised per head)
//   lift_*, heads_*                                            the states in the matmuls' and the values' layouts
//
// Layout: a state or a tangent vector is given as its components, each an evenly strided (N, n) plane (N tokens of
// n oscillators: contiguous, or one component of an interleaved (N, n, c) tensor); states and their gradients are
// stacked component-major, (c, N, n), the feed-forward step's gradient oscillator-major, (N, n, tangent), as the step
// is stored, and the features are in the heads' layout (B, H, T, ≥ c·d), read and written as they are stored.
// Kinds: "quaternion" (c = 4, tangent 3: unit quaternions moved by pure ones) and "sphere" (c = D in 2, 4, 6, 8,
// tangent D: unit vectors moved along P_x w, drifted by a rotation in each coordinate plane).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include "numbers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using kuramoto::recast;

constexpr int kMax = 8;          // most components a sphere kernel takes (an even number: 2, 4, 6 or 8)
constexpr int64_t kGrain = 16;   // tokens per parallel task

// sin a and cos a for a ≥ 0 without a library call, so that loops calling it vectorise: a = kπ/2 + r with
// |r| ≤ π/4 (π/2 split in three parts, Cody–Waite), Taylor polynomials of r to the r¹⁸ term (error < 1e-17 there),
// the quadrant k mod 4 choosing signs and roles
template <typename T>
KA_INLINE void sin_cos(T a, T& sin, T& cos) {
  // a ≥ 0: floor rounds. Not T(int(…)): GCC may fold that pair into a truncation it treats as able to throw, and a
  // loop holding one does not vectorise
  const T k = std::floor(a * T(0.63661977236758134308) + T(0.5));
  const int q = int(k);
  const T r = ((a - k * T(1.57079632673412561417)) - k * T(6.07710050630396597660e-11)) -
              k * T(2.02226624879595063154e-21);
  const T r2 = r * r;
  const T s = r * (1 + r2 * (T(-1.0 / 6) + r2 * (T(1.0 / 120) + r2 * (T(-1.0 / 5040) + r2 * (T(1.0 / 362880) +
              r2 * (T(-1.0 / 39916800) + r2 * (T(1.0 / 6227020800) + r2 * (T(-1.0 / 1307674368000) +
              r2 * T(1.0 / 355687428096000)))))))));
  const T c = 1 + r2 * (T(-0.5) + r2 * (T(1.0 / 24) + r2 * (T(-1.0 / 720) + r2 * (T(1.0 / 40320) +
              r2 * (T(-1.0 / 3628800) + r2 * (T(1.0 / 479001600) + r2 * (T(-1.0 / 87178291200) +
              r2 * (T(1.0 / 20922789888000) + r2 * T(-1.0 / 6402373705728000)))))))));
  const int quadrant = q & 3;
  sin = quadrant == 0 ? s : quadrant == 1 ? c : quadrant == 2 ? -s : -c;
  cos = quadrant == 0 ? c : quadrant == 1 ? -s : quadrant == 2 ? -c : s;
}

// (cos a, sin(a)/a, d sinc / d a²) from a², as vectors.cos_sinc_grad: Taylor series in a² below a² = 1e-2, the
// closed forms above (both computed, one selected: no branch in a vectorised loop)
template <typename T>
struct CosSinc {
  T cos, sinc, dsinc;
  CosSinc() = default;  // (a Sphere::Aux fills its own in)
  KA_INLINE explicit CosSinc(T a2) {
    const bool small = a2 < T(1e-2);
    const T big = small ? T(1) : a2, a = std::sqrt(big);
    T sin_a, cos_a;
    sin_cos(a, sin_a, cos_a);
    const T sinc_a = sin_a / a;
    cos = small ? 1 - a2 / 2 * (1 - a2 / 12 * (1 - a2 / 30 * (1 - a2 / 56))) : cos_a;
    sinc = small ? 1 - a2 / 6 * (1 - a2 / 20 * (1 - a2 / 42 * (1 - a2 / 72))) : sinc_a;
    dsinc = small ? T(-1) / 6 + a2 / 60 * (1 - a2 / 28 * (1 - a2 / 54 * (1 - a2 / 88))) : (cos_a - sinc_a) / (2 * big);
  }
};

template <typename T>
KA_INLINE T dot(const T* a, const T* b, int c) {
  T out = a[0] * b[0];
  for (int i = 1; i < c; ++i) out += a[i] * b[i];
  return out;
}

// pq of quaternions, either factor conjugated
template <typename T>
KA_INLINE void hamilton(const T* p, const T* q, T* out, bool conj_p = false, bool conj_q = false) {
  T a[4] = {p[0], conj_p ? -p[1] : p[1], conj_p ? -p[2] : p[2], conj_p ? -p[3] : p[3]};
  T b[4] = {q[0], conj_q ? -q[1] : q[1], conj_q ? -q[2] : q[2], conj_q ? -q[3] : q[3]};
  out[0] = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3];
  out[1] = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2];
  out[2] = a[0] * b[2] + a[2] * b[0] + a[3] * b[1] - a[1] * b[3];
  out[3] = a[0] * b[3] + a[3] * b[0] + a[1] * b[2] - a[2] * b[1];
}

// A kind: c components, `tangent` components of a step; per oscillator the tangent part ξ of G at x, the move
// m = x exp(s) (unnormalised) and both backwards. `Aux` is what the move and its backward both compute from (x, s)
// (cos, sinc, … of the step's length), made once when a loop needs both.
template <typename T>
struct Quaternion {
  static constexpr int c = 4, tangent = 3;
  using Aux = CosSinc<T>;  // of |s|
  KA_INLINE Aux aux(const T*, const T* s) const { return Aux(s[0] * s[0] + s[1] * s[1] + s[2] * s[2]); }
  KA_INLINE void xi(const T* q, const T* g, T* out) const {  // Im(conj(q) G)
    T m[4];
    hamilton(q, g, m, true);
    out[0] = m[1], out[1] = m[2], out[2] = m[3];
  }
  KA_INLINE void xi_backward(const T* dxi, const T* q, const T* g, T* dq, T* dg) const {  // adds to dq, writes dg
    T d[4] = {0, dxi[0], dxi[1], dxi[2]}, a[4];
    hamilton(g, d, a, false, true);  // G conj(D)
    hamilton(q, d, dg);              // q D
    for (int i = 0; i < 4; ++i) dq[i] += a[i];
  }
  KA_INLINE void move(const Aux& k, const T* q, const T* s, T* m) const {  // q exp(s)
    T e[4] = {k.cos, k.sinc * s[0], k.sinc * s[1], k.sinc * s[2]};
    hamilton(q, e, m);
  }
  KA_INLINE void move_backward(const Aux& k, const T* dm, const T* q, const T* s, T* dq, T* ds) const {  // writes both
    T e[4] = {k.cos, k.sinc * s[0], k.sinc * s[1], k.sinc * s[2]}, de[4];
    hamilton(dm, e, dq, false, true);  // dm conj(e)
    hamilton(q, dm, de, true);         // conj(q) dm
    T da2 = 2 * (k.dsinc * (de[1] * s[0] + de[2] * s[1] + de[3] * s[2]) - k.sinc / 2 * de[0]);
    for (int i = 0; i < 3; ++i) ds[i] = k.sinc * de[i + 1] + da2 * s[i];
  }
};

template <typename T, int D>
struct Sphere {
  static constexpr int c = D, tangent = D;
  struct Aux {  // ⟨s, x⟩, u = P_x s and (cos, sinc, …) of |u|
    T along, u[D];
    CosSinc<T> k;
  };
  KA_INLINE Aux aux(const T* x, const T* s) const {
    Aux a;
    a.along = dot(s, x, c);
    for (int i = 0; i < c; ++i) a.u[i] = s[i] - a.along * x[i];
    a.k = CosSinc<T>(dot(a.u, a.u, c));
    return a;
  }
  KA_INLINE void xi(const T* x, const T* g, T* out) const {  // P_x G
    T along = dot(g, x, c);
    for (int i = 0; i < c; ++i) out[i] = g[i] - along * x[i];
  }
  KA_INLINE void xi_backward(const T* dxi, const T* x, const T* g, T* dx, T* dg) const {
    T along = dot(g, x, c), dxi_x = dot(dxi, x, c);
    for (int i = 0; i < c; ++i) {
      dx[i] += -along * dxi[i] - dxi_x * g[i];
      dg[i] = dxi[i] - dxi_x * x[i];
    }
  }
  KA_INLINE void move(const Aux& a, const T* x, const T*, T* m) const {  // cos|u| x + sinc|u| u
    for (int i = 0; i < c; ++i) m[i] = a.k.cos * x[i] + a.k.sinc * a.u[i];
  }
  KA_INLINE void move_backward(const Aux& a, const T* dm, const T* x, const T* s, T* dx, T* ds) const {
    const T* u = a.u;
    T du[D];
    T da2 = 2 * (a.k.dsinc * dot(dm, u, c) - a.k.sinc / 2 * dot(dm, x, c));
    for (int i = 0; i < c; ++i) du[i] = a.k.sinc * dm[i] + da2 * u[i];
    T du_x = dot(du, x, c);
    for (int i = 0; i < c; ++i) {
      dx[i] = -a.along * du[i] - du_x * s[i] + a.k.cos * dm[i];
      ds[i] = du[i] - du_x * x[i];
    }
  }
};

// s when element j of t, counted in row-major order, sits j·s elements after the first (one evenly strided run: a
// contiguous plane, s = 1, or one component of an interleaved (…, n, c) tensor, s = c); else 0
inline int64_t even_stride(const torch::Tensor& t) {
  const int64_t s = t.dim() ? t.stride(-1) : 1;
  int64_t expect = s;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    if (t.size(d) != 1 && t.stride(d) != expect) return 0;
    expect *= t.size(d);
  }
  return s > 0 ? s : 0;
}

// The C component planes of a state, a tangent vector or a per-oscillator scalar, as pointers to (N, n) memory
// with the distance between consecutive oscillators (read in place when evenly strided, else copied once)
template <typename T, int C>
struct Planes {
  std::vector<torch::Tensor> keep;
  T* ptr[C];
  int64_t step[C];
  int64_t count = 0;  // elements in a plane
  explicit Planes(const std::vector<torch::Tensor>& parts) {
    for (int i = 0; i < C; ++i) {
      count = parts[i].numel();
      step[i] = even_stride(parts[i]);
      if (step[i]) {
        ptr[i] = parts[i].data_ptr<T>();
      } else {
        keep.push_back(parts[i].contiguous());
        ptr[i] = keep.back().data_ptr<T>(), step[i] = 1;
      }
    }
  }
  explicit Planes(const torch::Tensor& stacked) {  // (C, ...) contiguous, or one plane when C = 1
    count = stacked.numel() / C;
    for (int i = 0; i < C; ++i) ptr[i] = stacked.data_ptr<T>() + i * count, step[i] = 1;
  }
};

// The loops work on blocks of up to kLanes oscillators copied into local arrays: the compiler then knows that nothing
// aliases and vectorises the per-oscillator arithmetic across the block. A block of m oscillators computes on
// lanes(m) of them, m rounded up to whole vectors (a token's 80: 64 + 16); its padding lanes repeat
// the first one. Sums over a block's oscillators run over its m alone, so the lanes computed change no number.
constexpr int kLanes = 64;
constexpr int kVector = 16;
KA_INLINE int lanes(int m) { return (m + kVector - 1) / kVector * kVector; }

// dst[l] = src[l] for l < m. A run of whole vectors (a block of 64 or 16 lanes, a head of 16 oscillators) goes vector
// by vector, each a copy of constant length that compiles to one move or one conversion; any other length is a plain
// loop, which the compiler vectorises with a masked remainder (measured: splitting such a run into whole vectors and
// a scalar rest is slower)
template <typename To, typename From>
KA_INLINE void copy_run(To* dst, const From* src, int m) {
  if (m % kVector) {
    for (int l = 0; l < m; ++l) dst[l] = recast<To>(src[l]);
    return;
  }
  for (int l = 0; l < m; l += kVector) {
    for (int i = 0; i < kVector; ++i) dst[l + i] = recast<To>(src[l + i]);
  }
}

// the runs of a block of oscillators j0 … j0 + m − 1 of a token within its heads of d: f(first lane, head, oscillator
// within the head, length)
template <typename F>
KA_INLINE void head_runs(int64_t j0, int m, int64_t d, const F& f) {
  for (int l0 = 0, run; l0 < m; l0 += run) {
    const int64_t j = j0 + l0, h = j / d, e = j - h * d;
    run = int(std::min<int64_t>(m - l0, d - e));
    f(l0, h, e, run);
  }
}

// A load also asks for the elements kAhead oscillators further on (two tokens of ka-su2-1m-tuned's 80), unless the
// same oscillators were loaded before (a step's second pass over a token): a kernel reads up to a dozen planes at
// once, more streams than the hardware's prefetcher follows, and the loads that missed the cache were the hottest
// instructions of step_backward and features_backward
constexpr int64_t kAhead = 160;
constexpr int64_t kLine = 64;  // bytes

// kAhead in whole tokens of n oscillators (rounded up): how far the token-wise prefetches look
KA_INLINE int64_t tokens_ahead(int64_t n) { return (kAhead + n - 1) / n; }

template <typename S>
KA_INLINE void prefetch(const S* p, int64_t count) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(p + count);
  for (uintptr_t line = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(kLine - 1); line < end; line += kLine) {
    __builtin_prefetch(reinterpret_cast<const void*>(line));
  }
}

// planes stored as S (T, or bfloat16: the feed-forward's step under autocast), computed on as T
template <typename S, typename T, int C>
KA_INLINE void load(const Planes<S, C>& p, int64_t j0, int m, T (*buf)[kLanes], bool prefetching = true) {
  for (int i = 0; i < C; ++i) {
    if (prefetching && j0 + kAhead + m <= p.count) prefetch(p.ptr[i] + (j0 + kAhead) * p.step[i], (m - 1) * p.step[i] + 1);
    const int64_t s = p.step[i];
    const S* src = p.ptr[i] + j0 * s;
    if (s == 1) {
      copy_run(buf[i], src, m);
    } else {
      for (int l = 0; l < m; ++l) buf[i][l] = recast<T>(src[l * s]);
    }
    for (int l = m, L = lanes(m); l < L; ++l) buf[i][l] = recast<T>(src[0]);
  }
}

template <typename S, typename T, int C>
KA_INLINE void store(const Planes<S, C>& p, int64_t j0, int m, const T (*buf)[kLanes]) {
  for (int i = 0; i < C; ++i) {
    const int64_t s = p.step[i];
    S* dst = p.ptr[i] + j0 * s;
    if (s == 1) {
      copy_run(dst, buf[i], m);
    } else {
      for (int l = 0; l < m; ++l) dst[l * s] = recast<S>(buf[i][l]);
    }
  }
}

template <typename T, int C>
KA_INLINE void lane(const T (*buf)[kLanes], int l, T* out) {
  for (int i = 0; i < C; ++i) out[i] = buf[i][l];
}

template <typename T, int C>
KA_INLINE void set_lane(T (*buf)[kLanes], int l, const T* in) {
  for (int i = 0; i < C; ++i) buf[i][l] = in[i];
}

// A tensor in the heads' layout (B, H, T, C·d) (the attention output G, the values, their gradients), stored as S (T,
// or bfloat16 under autocast), read and written in place: component i of oscillator j = h·d + e of token b·T + t sits at ((b·H + h)·T + t)·C·d + i·d + e
template <typename S, int C>
struct Heads {
  S* ptr;
  int64_t heads, positions, d, n, tokens;
  Heads(const torch::Tensor& g, int64_t oscillators)
      : ptr(g.data_ptr<S>()), heads(g.size(1)), positions(g.size(2)), d(oscillators / g.size(1)), n(oscillators),
        tokens(g.size(0) * g.size(2)) {}
  KA_INLINE S* at(int64_t j0, int l) const {  // lane l's oscillator's first component; j0 a token's block
    const int64_t token = j0 / n, j = j0 - token * n + l, b = token / positions, t = token - b * positions;
    const int64_t h = j / d;
    return ptr + ((b * heads + h) * positions + t) * C * d + (j - h * d);
  }
};

// a block's lanes run through whole heads: each head's part of the block is read (written) as a contiguous run
template <typename T, typename S, int C>
KA_INLINE void load(const Heads<S, C>& p, int64_t j0, int m, T (*buf)[kLanes], bool prefetching = true) {
  // the same oscillators of a token whole tokens further on, so that the runs are the same
  const int64_t ahead = tokens_ahead(p.n);
  const bool fetch = prefetching && j0 / p.n + ahead < p.tokens;
  head_runs(j0 % p.n, m, p.d, [&](int l0, int64_t, int64_t, int run) {
    const S* src = p.at(j0, l0);
    for (int i = 0; i < C; ++i) copy_run(buf[i] + l0, src + i * p.d, run);
    if (fetch) {
      const S* next = p.at(j0 + ahead * p.n, l0);
      for (int i = 0; i < C; ++i) prefetch(next + i * p.d, run);
    }
  });
  for (int i = 0; i < C; ++i) {
    for (int l = m, L = lanes(m); l < L; ++l) buf[i][l] = buf[i][0];
  }
}

template <typename T, typename S, int C>
KA_INLINE void store(const Heads<S, C>& p, int64_t j0, int m, const T (*buf)[kLanes]) {
  head_runs(j0 % p.n, m, p.d, [&](int l0, int64_t, int64_t, int run) {
    S* dst = p.at(j0, l0);
    for (int i = 0; i < C; ++i) copy_run(dst + i * p.d, buf[i] + l0, run);
  });
}

// blocks [j0, j0 + m) of [lo, hi)
template <typename F>
inline void blocks(int64_t lo, int64_t hi, const F& f) {
  for (int64_t j0 = lo; j0 < hi; j0 += kLanes) f(j0, int(std::min<int64_t>(kLanes, hi - j0)));
}

template <typename T>
T norm_floor() { return std::max(T(1e-12), std::numeric_limits<T>::min()); }

// y = m/|m| of the move m = x exp(s) given its Aux; returns |m|
template <typename T, typename Kind>
KA_INLINE T normalised_move(const Kind& kind, const typename Kind::Aux& k, const T* x, const T* s, T* y) {
  T m[Kind::c];
  kind.move(k, x, s, m);
  const T len = std::sqrt(dot(m, m, Kind::c));
  for (int i = 0; i < Kind::c; ++i) y[i] = m[i] / len;
  return len;
}

// (dx, ds) of y = normalise(x exp(s)) from dy. y and |m| are made again, in the forward's operations (the same numbers),
// which costs less than writing them in the forward and reading them back here
template <typename T, typename Kind>
KA_INLINE void normalised_move_backward(const Kind& kind, const T* dy, const T* x, const T* s, T* dx, T* ds) {
  constexpr int C = Kind::c;
  const typename Kind::Aux k = kind.aux(x, s);
  T y[C], dm[C];
  const T len = normalised_move(kind, k, x, s, y);
  const T along = dot(dy, y, C);  // dm = (dy − ⟨dy, y⟩ y)/|m|
  for (int i = 0; i < C; ++i) dm[i] = (dy[i] - along * y[i]) / len;
  kind.move_backward(k, dm, x, s, dx, ds);
}

// ----------------------------------------------------------------------------------------------------------- moves
// w stored as Wt (T, or bfloat16 under autocast), read as it is
template <typename T, typename Wt, typename Kind>
torch::Tensor move_forward(const Kind& kind, const std::vector<torch::Tensor>& xs, const std::vector<torch::Tensor>& ws) {
  constexpr int C = Kind::c, K = Kind::tangent;
  const Planes<T, C> x(xs);
  const Planes<Wt, K> w(ws);
  const int64_t n = xs[0].size(-1), size = xs[0].numel();
  torch::Tensor out = torch::empty({C, size / n, n}, xs[0].options());
  const Planes<T, C> y(out);
  at::parallel_for(0, size, kGrain * n, [&](int64_t lo, int64_t hi) {
    blocks(lo, hi, [&](int64_t j0, int m) {
      T X[C][kLanes], W[K][kLanes], Y[C][kLanes];
      load(x, j0, m, X), load(w, j0, m, W);
      for (int l = 0, L = lanes(m); l < L; ++l) {
        T a[C], s[K], b[C];
        lane<T, C>(X, l, a), lane<T, K>(W, l, s);
        normalised_move(kind, kind.aux(a, s), a, s, b);
        set_lane<T, C>(Y, l, b);
      }
      store(y, j0, m, Y);
    });
  });
  return out;
}

// dw comes back as w is stored: oscillator-major (N, n, tangent), in w's dtype
template <typename T, typename Wt, typename Kind>
std::vector<torch::Tensor> move_backward(const Kind& kind, torch::Tensor grad, const std::vector<torch::Tensor>& xs,
                                         const std::vector<torch::Tensor>& ws) {
  grad = grad.contiguous();
  constexpr int C = Kind::c, K = Kind::tangent;
  const Planes<T, C> x(xs), dy(grad);
  const Planes<Wt, K> w(ws);
  const int64_t n = xs[0].size(-1), size = xs[0].numel();
  torch::Tensor dx_t = torch::empty({C, size / n, n}, xs[0].options());
  torch::Tensor dw_t = torch::empty({size / n, n, K}, ws[0].options());
  const Planes<T, C> dx(dx_t);
  const Planes<Wt, K> dw(dw_t.unbind(-1));
  at::parallel_for(0, size, kGrain * n, [&](int64_t lo, int64_t hi) {
    blocks(lo, hi, [&](int64_t j0, int m) {
      T X[C][kLanes], W[K][kLanes], DY[C][kLanes], DX[C][kLanes], DW[K][kLanes];
      load(x, j0, m, X), load(w, j0, m, W), load(dy, j0, m, DY);
      for (int l = 0, L = lanes(m); l < L; ++l) {
        T a[C], s[K], g[C], da[C], ds[K];
        lane<T, C>(X, l, a), lane<T, K>(W, l, s), lane<T, C>(DY, l, g);
        normalised_move_backward(kind, g, a, s, da, ds);
        set_lane<T, C>(DX, l, da), set_lane<T, K>(DW, l, ds);
      }
      store(dx, j0, m, DX), store(dw, j0, m, DW);
    });
  });
  return {dx_t, dw_t};
}

// ------------------------------------------------------------------------------------------------------------ steps
// normalise(x exp(h w)), w = v ⊙ ξ(x, G), h = r tanh(‖w‖)/‖w‖ over each token's n oscillators
template <typename T, typename Mt, typename Kind>
std::vector<torch::Tensor> step_forward(const Kind& kind, const std::vector<torch::Tensor>& xs, torch::Tensor mean,
                                        torch::Tensor value, double radius) {
  constexpr int C = Kind::c, K = Kind::tangent;
  value = value.contiguous(), mean = mean.contiguous();
  const Planes<T, C> x(xs);
  const Heads<Mt, C> g(mean, xs[0].size(-1));
  const Planes<T, 1> v(value);
  const int64_t n = xs[0].size(-1), tokens = xs[0].numel() / n;
  auto opts = xs[0].options();
  torch::Tensor out = torch::empty({C, tokens, n}, opts);
  torch::Tensor sq_t = torch::empty({tokens, 1}, opts), h_t = torch::empty({tokens, 1}, opts);
  const Planes<T, C> y(out);
  const T r = T(radius), floor = norm_floor<T>();
  T *sq = sq_t.data_ptr<T>(), *h = h_t.data_ptr<T>();
  at::parallel_for(0, tokens, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      T acc = 0;  // ‖w‖² over the token
      blocks(t * n, (t + 1) * n, [&](int64_t j0, int m) {
        T X[C][kLanes], G[C][kLanes], V[1][kLanes], S[kLanes];  // local to the block: nothing aliases them
        load(x, j0, m, X), load(g, j0, m, G), load(v, j0, m, V);
        for (int l = 0, L = lanes(m); l < L; ++l) {
          T a[C], b[C], xi[K];
          lane<T, C>(X, l, a), lane<T, C>(G, l, b);
          kind.xi(a, b, xi);
          T sum = 0;
          for (int i = 0; i < K; ++i) sum += (V[0][l] * xi[i]) * (V[0][l] * xi[i]);
          S[l] = sum;
        }
        for (int l = 0; l < m; ++l) acc += S[l];
      });
      const T nn = std::sqrt(std::max(acc, floor)), ht = r * (std::tanh(nn) / nn);
      sq[t] = acc, h[t] = ht;
      blocks(t * n, (t + 1) * n, [&, ht](int64_t j0, int m) {
        T X[C][kLanes], G[C][kLanes], V[1][kLanes], Y[C][kLanes];
        load(x, j0, m, X, false), load(g, j0, m, G, false), load(v, j0, m, V, false);
        for (int l = 0, L = lanes(m); l < L; ++l) {
          T a[C], b[C], xi[K], yj[C];
          lane<T, C>(X, l, a), lane<T, C>(G, l, b);
          kind.xi(a, b, xi);
          for (int i = 0; i < K; ++i) xi[i] = ht * (V[0][l] * xi[i]);
          normalised_move(kind, kind.aux(a, xi), a, xi, yj);
          set_lane<T, C>(Y, l, yj);
        }
        store(y, j0, m, Y);
      });
    }
  });
  return {out, sq_t, h_t};
}

// (dx, dG, dv, ⟨dstep, w⟩ h per token): dL/d log r is the last one's sum
template <typename T, typename Mt, typename Kind>
std::vector<torch::Tensor> step_backward(const Kind& kind, torch::Tensor grad, const std::vector<torch::Tensor>& xs,
                                         torch::Tensor mean, torch::Tensor value, double radius,
                                         torch::Tensor sq_t, torch::Tensor h_t) {
  grad = grad.contiguous(), value = value.contiguous(), mean = mean.contiguous();
  constexpr int C = Kind::c, K = Kind::tangent;
  const Planes<T, C> x(xs), dy(grad);
  const Heads<Mt, C> g(mean, xs[0].size(-1));
  torch::Tensor dmean = torch::empty_like(mean);
  const Heads<Mt, C> dgo(dmean, xs[0].size(-1));
  const Planes<T, 1> v(value);
  const int64_t n = xs[0].size(-1), tokens = xs[0].numel() / n;
  auto opts = xs[0].options();
  torch::Tensor dx_t = torch::empty({C, tokens, n}, opts);
  torch::Tensor dv_t = torch::empty({tokens, n}, opts), radius_t = torch::empty({tokens}, opts);
  const Planes<T, C> dx(dx_t);
  const Planes<T, 1> dv(dv_t);
  const T *sq = sq_t.data_ptr<T>(), *h = h_t.data_ptr<T>();
  T* per_radius = radius_t.data_ptr<T>();
  const T r = T(radius), floor = norm_floor<T>();
  at::parallel_for(0, tokens, kGrain, [&](int64_t lo, int64_t hi) {
    // what pass 1 leaves pass 2, one token at a time: dx of the move, dstep, and G as computed on (read from the heads'
    // layout once); a few KB, which stay in cache between the passes
    const torch::Tensor park = torch::empty({3, C, n}, opts);
    const Planes<T, C> park_dx(park[0]), park_ds(park[1]), park_g(park[2]);
    for (int64_t t = lo; t < hi; ++t) {
      const T ht = h[t];
      // pass 1: the move's backward; dx_move, dstep and G parked; ⟨dstep, w⟩ summed over the token
      T along = 0;
      blocks(t * n, (t + 1) * n, [&, ht](int64_t j0, int m) {
        T X[C][kLanes], G[C][kLanes], V[1][kLanes], DY[C][kLanes];
        T DX[C][kLanes], DG[C][kLanes], S[kLanes];
        load(x, j0, m, X), load(g, j0, m, G), load(v, j0, m, V), load(dy, j0, m, DY);
        for (int l = 0, L = lanes(m); l < L; ++l) {
          T a[C], b[C], xi[K], s[K], dyj[C], da[C], ds[C];
          lane<T, C>(X, l, a), lane<T, C>(G, l, b), lane<T, C>(DY, l, dyj);
          kind.xi(a, b, xi);
          for (int i = 0; i < K; ++i) s[i] = ht * (V[0][l] * xi[i]);
          normalised_move_backward(kind, dyj, a, s, da, ds);
          T sum = 0;
          for (int i = 0; i < K; ++i) sum += ds[i] * (V[0][l] * xi[i]);
          for (int i = K; i < C; ++i) ds[i] = 0;
          S[l] = sum;
          set_lane<T, C>(DX, l, da), set_lane<T, C>(DG, l, ds);
        }
        for (int l = 0; l < m; ++l) along += S[l];
        const int64_t j = j0 - t * n;
        store(park_dx, j, m, DX), store(park_ds, j, m, DG), store(park_g, j, m, G);
      });
      // the bound h = r tanh(√s)/√s: dL/ds = along · r · h'(s), zero below the floor (where s is clamped)
      const T nn = std::sqrt(std::max(sq[t], floor)), th = std::tanh(nn);
      const T slope = ((1 - th * th) / nn - th / (nn * nn)) / (2 * nn);
      const T dsq = sq[t] >= floor ? along * r * slope : T(0);
      per_radius[t] = along * ht;
      // pass 2: dw = h dstep + 2 w dL/ds, dv = ⟨dw, ξ⟩, and ξ's backward with dξ = v dw
      blocks(t * n, (t + 1) * n, [&, ht, dsq](int64_t j0, int m) {
        T X[C][kLanes], G[C][kLanes], V[1][kLanes], DX[C][kLanes], DG[C][kLanes], DV[1][kLanes];
        const int64_t j = j0 - t * n;
        load(x, j0, m, X, false), load(v, j0, m, V, false), load(park_g, j, m, G, false);
        load(park_dx, j, m, DX, false), load(park_ds, j, m, DG, false);
        for (int l = 0, L = lanes(m); l < L; ++l) {
          T a[C], b[C], xi[K], da[C], ds[C], dxi[K], dgj[C];
          lane<T, C>(X, l, a), lane<T, C>(G, l, b), lane<T, C>(DX, l, da), lane<T, C>(DG, l, ds);
          kind.xi(a, b, xi);
          T dvj = 0;
          for (int i = 0; i < K; ++i) {
            const T dw = ht * ds[i] + (V[0][l] * xi[i]) * (2 * dsq);
            dvj += dw * xi[i];
            dxi[i] = V[0][l] * dw;
          }
          kind.xi_backward(dxi, a, b, da, dgj);
          DV[0][l] = dvj;
          set_lane<T, C>(DX, l, da), set_lane<T, C>(DG, l, dgj);
        }
        store(dx, j0, m, DX), store(dgo, j0, m, DG), store(dv, j0, m, DV);
      });
    }
  });
  return {dx_t, dmean, dv_t, radius_t};
}

// ------------------------------------------------------------------------------------------ query/key features
// f = R_{t,j} x_{t,j}, the drift's rotation of each oscillator given by its parts (T, n) (SU(2): the unit quaternion
// exp(tΩ_j); the sphere: cos and sin of each coordinate plane's angle), in the same operations and order as
// vectors.py's _quaternion_rotate and _plane_rotate (so that, without contraction into FMAs, the bits are theirs);
// q = g^q ⊙ f and k = g^k ⊙ f in the heads' layout (B, T, H, c, d)
template <typename T>
struct QuaternionDrift {
  static constexpr int c = 4, parts = 4;
  KA_INLINE void rotate(const T* r, const T* x, T* f) const {
    f[0] = r[0] * x[0] - r[1] * x[1] - r[2] * x[2] - r[3] * x[3];
    const T cross[3] = {r[2] * x[3] - r[3] * x[2], r[3] * x[1] - r[1] * x[3], r[1] * x[2] - r[2] * x[1]};
    for (int i = 0; i < 3; ++i) f[i + 1] = r[0] * x[i + 1] + x[0] * r[i + 1] + cross[i];
  }
  // dx = conj(r) df; dr = df conj(x) (its sum over the batch is the rotation's gradient)
  KA_INLINE void backward(const T* r, const T* x, const T* f, const T* df, T* dx, T* dr) const {
    hamilton(r, df, dx, true);
    hamilton(df, x, dr, false, true);
  }
};

template <typename T, int D>
struct PlaneDrift {
  static constexpr int c = D, parts = D, angles = D / 2;
  KA_INLINE void rotate(const T* r, const T* x, T* f) const {
    for (int p = 0; p < D / 2; ++p) {
      const T a = x[2 * p], b = x[2 * p + 1], cos = r[2 * p], sin = r[2 * p + 1];
      f[2 * p] = a * cos - b * sin, f[2 * p + 1] = a * sin + b * cos;
    }
  }
  // dx = Rᵀ df; d angle_p = df_{2p+1} f_{2p} − df_{2p} f_{2p+1} (in dr's first D/2 slots)
  KA_INLINE void backward(const T* r, const T* x, const T* f, const T* df, T* dx, T* dr) const {
    for (int p = 0; p < D / 2; ++p) {
      const T da = df[2 * p], db = df[2 * p + 1], cos = r[2 * p], sin = r[2 * p + 1];
      dx[2 * p] = da * cos + db * sin, dx[2 * p + 1] = db * cos - da * sin;
      dr[p] = db * f[2 * p] - da * f[2 * p + 1];
    }
    for (int p = D / 2; p < D; ++p) dr[p] = 0;
  }
};

// a block's gates: m of them, the padding lanes repeating the first
template <typename T>
KA_INLINE void gate_lanes(const T* src, int m, T* out) {
  copy_run(out, src, m);
  for (int l = m, L = lanes(m); l < L; ++l) out[l] = src[0];
}

// A token's metric gates from sp = softplus(z) (2n: the query half, then the key half) and 1/mean(sp) of each head
// (2H), as fused.py's _gates_forward: g = sp · scale with scale = (1/mean) · τ_h for the query, 1/mean for the key
// (the mean is taken outside, by torch, so that the features are the Python path's to the bit)
template <typename T>
struct TokenGates {
  std::vector<T> g, scale;
  TokenGates(int64_t n, int64_t heads) : g(2 * n), scale(2 * heads) {}
  void compute(const T* sp, const T* inv_mean, const T* tau, int64_t n, int64_t heads) {
    const int64_t d = n / heads;
    for (int64_t half = 0; half < 2; ++half) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t at = half * heads + h;
        const T factor = scale[at] = half == 0 ? inv_mean[at] * tau[h] : inv_mean[at];
        const T* s = sp + half * n + h * d;
        T* out = g.data() + half * n + h * d;
        for (int64_t e = 0; e < d; ++e) out[e] = s[e] * factor;
      }
    }
  }
};

// Query or key features (B, H, T, ≥ c·d) stored as S (T, or bfloat16 under autocast), the last axis contiguous, the
// others strided as they come: component i of oscillator e of head h of token (b, t) at b·sb + h·sh + t·st + i·d + e
template <typename S>
struct Features {
  S* ptr;
  int64_t sb, sh, st, positions;
  explicit Features(const torch::Tensor& f)
      : ptr(f.data_ptr<S>()), sb(f.stride(0)), sh(f.stride(1)), st(f.stride(2)), positions(f.size(2)) {}
  KA_INLINE S* at(int64_t bt, int64_t h) const {
    const int64_t b = bt / positions;
    return ptr + b * sb + h * sh + (bt - b * positions) * st;
  }
};

// x: c planes (B·T, n); r: the rotation's parts (T, n); sp = softplus of the gate logits (B·T, 2n), 1/mean (B·T, 2H)
// and τ (H,), contiguous (``TokenGates``); the extra query and key features (H, T, width − c·d) as S. Returns q, k
// (B, H, T, width) as S: each head's c·d features, then the extra ones
template <typename T, typename S, typename Drift>
std::vector<torch::Tensor> features_forward(const Drift& drift, const std::vector<torch::Tensor>& xs,
                                            const std::vector<torch::Tensor>& rs, torch::Tensor soft,
                                            torch::Tensor inv_t, torch::Tensor tau_t, torch::Tensor extra_q,
                                            torch::Tensor extra_k, int64_t heads, int64_t positions, int64_t width) {
  constexpr int C = Drift::c, R = Drift::parts;
  const Planes<T, C> x(xs);
  const Planes<T, R> r(rs);
  soft = soft.contiguous(), inv_t = inv_t.contiguous(), tau_t = tau_t.contiguous();
  const T *sp = soft.data_ptr<T>(), *inv_mean = inv_t.data_ptr<T>(), *tau = tau_t.data_ptr<T>();
  const int64_t n = xs[0].size(-1), tokens = xs[0].numel() / n, d = n / heads;
  TORCH_CHECK(width >= C * d, "vectors: the features' width must hold c·d columns");
  const int64_t room = width - C * d;
  extra_q = extra_q.contiguous(), extra_k = extra_k.contiguous();
  TORCH_CHECK(extra_q.numel() == heads * positions * room && extra_k.numel() == extra_q.numel() &&
              extra_q.scalar_type() == c10::CppTypeToScalarType<S>::value && extra_k.scalar_type() == extra_q.scalar_type(),
              "vectors: the extra features must be (H, T, width − c·d) in the features' dtype");
  const S *eq = extra_q.data_ptr<S>(), *ek = extra_k.data_ptr<S>();
  auto opts = xs[0].options().dtype(c10::CppTypeToScalarType<S>::value);
  const int64_t batch = positions ? tokens / positions : 0;
  torch::Tensor q_t = torch::empty({batch, heads, positions, width}, opts), k_t = torch::empty_like(q_t);
  const Features<S> q(q_t), k(k_t);
  const int64_t ahead = tokens_ahead(n);
  at::parallel_for(0, tokens, kGrain, [&](int64_t lo, int64_t hi) {
    TokenGates<T> gates(n, heads);
    const T* g = gates.g.data();
    for (int64_t bt = lo; bt < hi; ++bt) {
      const int64_t t = bt % positions;
      if (bt + ahead < tokens) prefetch(sp + (bt + ahead) * 2 * n, 2 * n);
      gates.compute(sp + bt * 2 * n, inv_mean + bt * 2 * heads, tau, n, heads);
      blocks(0, n, [&, bt, t](int64_t j0, int m) {  // a block of the token's oscillators, across its heads
        T X[C][kLanes], RR[R][kLanes], GQ[kLanes], GK[kLanes], Q[C][kLanes], K[C][kLanes];
        load(x, bt * n + j0, m, X), load(r, t * n + j0, m, RR);
        gate_lanes(g + j0, m, GQ), gate_lanes(g + n + j0, m, GK);
        for (int l = 0, L = lanes(m); l < L; ++l) {
          T a[C], rr[R], f[C];
          lane<T, C>(X, l, a), lane<T, R>(RR, l, rr);
          drift.rotate(rr, a, f);
          for (int i = 0; i < C; ++i) Q[i][l] = f[i] * GQ[l], K[i][l] = f[i] * GK[l];
        }
        head_runs(j0, m, d, [&](int l0, int64_t h, int64_t e, int run) {
          S *qd = q.at(bt, h) + e, *kd = k.at(bt, h) + e;
          for (int i = 0; i < C; ++i) copy_run(qd + i * d, Q[i] + l0, run), copy_run(kd + i * d, K[i] + l0, run);
        });
      });
      for (int64_t h = 0; h < heads; ++h) {  // the extra features after each head's own, the same for every batch row
        const int64_t from = (h * positions + t) * room;
        std::copy(eq + from, eq + from + room, q.at(bt, h) + C * d), std::copy(ek + from, ek + from + room, k.at(bt, h) + C * d);
      }
    }
  });
  return {q_t, k_t};
}

// dq, dk (B, H, T, ≥ c·d) as S, the last axis contiguous (the columns after c·d are not read); sp, 1/mean and τ as the
// forward's -> (dx (c, B·T, n), dL/dsp (B·T, 2n), Σ_e dg^q_e g^q_e per token and head (B·T, H): τ's gradient times τ, dr
// (parts, B·T, n): the rotation's gradient before its sum over the batch; only when need_drift)
template <typename T, typename S, typename Drift>
std::vector<torch::Tensor> features_backward(const Drift& drift, torch::Tensor grad_q, torch::Tensor grad_k,
                                             const std::vector<torch::Tensor>& xs, const std::vector<torch::Tensor>& rs,
                                             torch::Tensor soft, torch::Tensor inv_t, torch::Tensor tau_t, int64_t heads,
                                             int64_t positions, bool need_drift) {
  constexpr int C = Drift::c, R = Drift::parts;
  if (grad_q.stride(-1) != 1) grad_q = grad_q.contiguous();
  if (grad_k.stride(-1) != 1) grad_k = grad_k.contiguous();
  soft = soft.contiguous(), inv_t = inv_t.contiguous(), tau_t = tau_t.contiguous();
  const Planes<T, C> x(xs);
  const Planes<T, R> r(rs);
  const Features<S> dq(grad_q), dk(grad_k);
  const T *sp = soft.data_ptr<T>(), *inv_mean = inv_t.data_ptr<T>(), *tau = tau_t.data_ptr<T>();
  const int64_t n = xs[0].size(-1), tokens = xs[0].numel() / n, d = n / heads;
  torch::Tensor dx_t = torch::empty({C, tokens, n}, xs[0].options()), dsp_t = torch::empty({tokens, 2 * n}, xs[0].options());
  torch::Tensor tau_dot_t = torch::empty({tokens, heads}, xs[0].options());
  torch::Tensor dr_t = torch::empty({need_drift ? R : 0, tokens, n}, xs[0].options());
  const Planes<T, C> dx(dx_t);
  T *dsp = dsp_t.data_ptr<T>(), *tau_dot = tau_dot_t.data_ptr<T>();
  T* dr = dr_t.data_ptr<T>();
  const int64_t ahead = tokens_ahead(n);
  at::parallel_for(0, tokens, kGrain, [&](int64_t lo, int64_t hi) {
    TokenGates<T> gates(n, heads);
    const T* g = gates.g.data();
    for (int64_t bt = lo; bt < hi; ++bt) {
      const int64_t t = bt % positions;
      if (bt + ahead < tokens) {
        prefetch(sp + (bt + ahead) * 2 * n, 2 * n);
        for (int64_t h = 0; h < heads; ++h) prefetch(dq.at(bt + ahead, h), C * d), prefetch(dk.at(bt + ahead, h), C * d);
      }
      gates.compute(sp + bt * 2 * n, inv_mean + bt * 2 * heads, tau, n, heads);
      T* dg = dsp + bt * 2 * n;  // dL/dg first, turned into dL/dsp once the token's is whole
      blocks(0, n, [&, bt, t](int64_t j0, int m) {  // a block of the token's oscillators, across its heads
        T X[C][kLanes], RR[R][kLanes], GQ[kLanes], GK[kLanes], DQ[C][kLanes], DK[C][kLanes];
        T DX[C][kLanes], DR[R][kLanes], DGQ[kLanes], DGK[kLanes];
        load(x, bt * n + j0, m, X), load(r, t * n + j0, m, RR);
        gate_lanes(g + j0, m, GQ), gate_lanes(g + n + j0, m, GK);
        head_runs(j0, m, d, [&](int l0, int64_t h, int64_t e, int run) {
          const S *from_q = dq.at(bt, h) + e, *from_k = dk.at(bt, h) + e;
          for (int i = 0; i < C; ++i) copy_run(DQ[i] + l0, from_q + i * d, run), copy_run(DK[i] + l0, from_k + i * d, run);
        });
        for (int i = 0; i < C; ++i) {
          for (int l = m, L = lanes(m); l < L; ++l) DQ[i][l] = DQ[i][0], DK[i][l] = DK[i][0];
        }
        for (int l = 0, L = lanes(m); l < L; ++l) {
          T a[C], rr[R], f[C], df[C], da[C], drr[R];
          lane<T, C>(X, l, a), lane<T, R>(RR, l, rr);
          drift.rotate(rr, a, f);
          T sq = 0, sk = 0;
          for (int i = 0; i < C; ++i) {
            sq += DQ[i][l] * f[i], sk += DK[i][l] * f[i];
            df[i] = GQ[l] * DQ[i][l] + GK[l] * DK[i][l];
          }
          drift.backward(rr, a, f, df, da, drr);
          DGQ[l] = sq, DGK[l] = sk;
          set_lane<T, C>(DX, l, da), set_lane<T, R>(DR, l, drr);
        }
        store(dx, bt * n + j0, m, DX);
        copy_run(dg + j0, DGQ, m), copy_run(dg + n + j0, DGK, m);
        if (need_drift) {
          for (int p = 0; p < R; ++p) copy_run(dr + (p * tokens + bt) * n + j0, DR[p], m);
        }
      });
      // g = scale · sp with scale = (τ or 1)/mean(sp):  dsp = scale dg − (Σ_e dg_e g_e / d) / mean(sp)
      for (int64_t half = 0; half < 2; ++half) {
        for (int64_t h = 0; h < heads; ++h) {
          T* row = dg + half * n + h * d;
          const T* gh = g + half * n + h * d;
          T sum = 0;
          for (int64_t e = 0; e < d; ++e) sum += row[e] * gh[e];
          const int64_t at = half * heads + h;
          if (half == 0) tau_dot[bt * heads + h] = sum;
          const T shift = sum / T(d) * inv_mean[bt * 2 * heads + at], scale = gates.scale[at];
          for (int64_t e = 0; e < d; ++e) row[e] = row[e] * scale - shift;
        }
      }
    }
  });
  return {dx_t, dsp_t, tau_dot_t, dr_t};
}

// ------------------------------------------------------------------------------------------------ dispatch by kind
// f(T{}, the kind's struct): Q<T> for quaternions, S<T, c> for the sphere's c components (2, 4, 6 or 8)
template <template <typename> class Q, template <typename, int> class S, typename T, typename F>
auto by_components(const std::string& kind, int64_t c, F&& f) {
  if (kind == "quaternion") return f(T{}, Q<T>{});
  switch (c) {
    case 2: return f(T{}, S<T, 2>{});
    case 4: return f(T{}, S<T, 4>{});
    case 6: return f(T{}, S<T, 6>{});
    default: return f(T{}, S<T, 8>{});
  }
}

template <template <typename> class Q, template <typename, int> class S, typename F>
auto by_kind(const std::string& kind, int64_t c, torch::ScalarType dtype, F&& f) {
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kDouble, "vectors: float32 or float64 only");
  TORCH_CHECK(kind == "quaternion" ? c == 4 : (kind == "sphere" && c % 2 == 0 && c >= 2 && c <= kMax),
              "vectors: unknown kind or component count");
  if (dtype == torch::kFloat) return by_components<Q, S, float>(kind, c, f);
  return by_components<Q, S, double>(kind, c, f);
}

// the features (or the feed-forward's step) in the state's dtype, or in bfloat16 under autocast (float32 states
// only)
template <typename T, typename F>
auto by_features_dtype(bool bf16, F&& f) {
  TORCH_CHECK(!bf16 || (std::is_same_v<T, float>), "vectors: bfloat16 features need float32 states");
  return bf16 ? f(at::BFloat16{}) : f(T{});
}

// ------------------------------------------------------------------------------------------------ layouts
// The values the attention averages are the states themselves in the heads' layout: c planes (B·T, n) -> (B, H, T, c·d)
// as S, and the gradient back into planes (c, B·T, n); one pass each, the runs of a head copied whole
// every token's n oscillators read from one layout and written to another, a block of lanes at a time
template <typename T, int C, typename From, typename To>
void copy_tokens(const From& src, const To& dst, int64_t tokens, int64_t n) {
  at::parallel_for(0, tokens, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      blocks(t * n, (t + 1) * n, [&](int64_t j0, int m) {
        T X[C][kLanes];
        load(src, j0, m, X), store(dst, j0, m, X);
      });
    }
  });
}

template <typename T, typename S, int C>
torch::Tensor heads_forward(const std::vector<torch::Tensor>& xs, int64_t heads, int64_t positions) {
  const Planes<T, C> x(xs);
  const int64_t n = xs[0].size(-1), tokens = xs[0].numel() / n;
  torch::Tensor out_t = torch::empty({positions ? tokens / positions : 0, heads, positions, C * (n / heads)},
                                     xs[0].options().dtype(c10::CppTypeToScalarType<S>::value));
  copy_tokens<T, C>(x, Heads<S, C>(out_t, n), tokens, n);
  return out_t;
}

template <typename T, typename S, int C>
torch::Tensor heads_backward(torch::Tensor grad, int64_t oscillators) {
  grad = grad.contiguous();
  const Heads<S, C> g(grad, oscillators);
  const int64_t tokens = g.tokens;
  torch::Tensor dx_t = torch::empty({C, tokens, oscillators}, grad.options().dtype(c10::CppTypeToScalarType<T>::value));
  copy_tokens<T, C>(g, Planes<T, C>(dx_t), tokens, oscillators);
  return dx_t;
}

// The lift the matmuls read: c planes (B·T, n) -> (B·T, n·c) oscillator-major as S, and the gradient back into planes
template <typename T, typename S, int C>
torch::Tensor lift_forward(const std::vector<torch::Tensor>& xs) {
  const Planes<T, C> x(xs);
  const int64_t n = xs[0].size(-1), tokens = xs[0].numel() / n;
  torch::Tensor out_t = torch::empty({tokens, n * C}, xs[0].options().dtype(c10::CppTypeToScalarType<S>::value));
  S* out = out_t.data_ptr<S>();
  at::parallel_for(0, tokens, kGrain, [&](int64_t lo, int64_t hi) {
    blocks(lo * n, hi * n, [&](int64_t j0, int m) {
      T X[C][kLanes];
      load(x, j0, m, X);
      S* dst = out + j0 * C;
      for (int l = 0; l < m; ++l) {
        for (int i = 0; i < C; ++i) dst[l * C + i] = recast<S>(X[i][l]);
      }
    });
  });
  return out_t;
}

template <typename T, typename S, int C>
torch::Tensor lift_backward(torch::Tensor grad, int64_t oscillators) {
  grad = grad.contiguous();
  const S* g = grad.data_ptr<S>();
  const int64_t tokens = grad.numel() / (oscillators * C);
  torch::Tensor dx_t = torch::empty({C, tokens, oscillators}, grad.options().dtype(c10::CppTypeToScalarType<T>::value));
  const Planes<T, C> dx(dx_t);
  at::parallel_for(0, tokens, kGrain, [&](int64_t lo, int64_t hi) {
    blocks(lo * oscillators, hi * oscillators, [&](int64_t j0, int m) {
      T G[C][kLanes];
      const S* src = g + j0 * C;
      for (int l = 0; l < m; ++l) {
        for (int i = 0; i < C; ++i) G[i][l] = recast<T>(src[l * C + i]);
      }
      store(dx, j0, m, G);
    });
  });
  return dx_t;
}

// f(T{}, S{}, std::integral_constant<int, c>{}) for c in 2, 4, 6, 8 and T the states' dtype, S T or bfloat16
template <typename F>
auto by_width(int64_t c, torch::ScalarType dtype, bool bf16, F&& f) {
  TORCH_CHECK(dtype == torch::kFloat || (dtype == torch::kDouble && !bf16),
              "vectors: float32 (or float64, without bfloat16) states only");
  TORCH_CHECK(c >= 2 && c <= kMax && c % 2 == 0, "vectors: 2, 4, 6 or 8 components");
  auto with = [&](auto t) {
    using T = decltype(t);
    return by_features_dtype<T>(bf16, [&](auto s) {
      switch (c) {
        case 2: return f(t, s, std::integral_constant<int, 2>{});
        case 4: return f(t, s, std::integral_constant<int, 4>{});
        case 6: return f(t, s, std::integral_constant<int, 6>{});
        default: return f(t, s, std::integral_constant<int, 8>{});
      }
    });
  };
  return dtype == torch::kFloat ? with(float{}) : with(double{});
}

torch::Tensor move_forward_any(const std::string& kind, const std::vector<torch::Tensor>& xs,
                               const std::vector<torch::Tensor>& ws) {
  return by_kind<Quaternion, Sphere>(kind, xs.size(), xs[0].scalar_type(), [&](auto t, const auto& k) {
    using T = decltype(t);
    return by_features_dtype<T>(ws[0].scalar_type() == torch::kBFloat16, [&](auto s) {
      return move_forward<T, decltype(s)>(k, xs, ws);
    });
  });
}

std::vector<torch::Tensor> move_backward_any(const std::string& kind, torch::Tensor grad,
                                             const std::vector<torch::Tensor>& xs,
                                             const std::vector<torch::Tensor>& ws) {
  return by_kind<Quaternion, Sphere>(kind, xs.size(), xs[0].scalar_type(), [&](auto t, const auto& k) {
    using T = decltype(t);
    return by_features_dtype<T>(ws[0].scalar_type() == torch::kBFloat16, [&](auto s) {
      return move_backward<T, decltype(s)>(k, grad, xs, ws);
    });
  });
}

// G in the state's dtype, or in bfloat16 (autocast's attention output), read and its gradient written as it is stored
template <typename F>
auto by_mean_dtype(const torch::Tensor& mean, torch::ScalarType state, F&& f) {
  TORCH_CHECK(mean.scalar_type() == state || mean.scalar_type() == torch::kBFloat16,
              "vectors: the attention output must be in the state's dtype or bfloat16");
  TORCH_CHECK(mean.dim() == 4, "vectors: the attention output must be (B, H, T, c·d)");
  return mean.scalar_type() == torch::kBFloat16 ? f(at::BFloat16{}) : f(nullptr);
}

std::vector<torch::Tensor> step_forward_any(const std::string& kind, const std::vector<torch::Tensor>& xs,
                                            torch::Tensor mean, torch::Tensor value, double radius) {
  return by_kind<Quaternion, Sphere>(kind, xs.size(), xs[0].scalar_type(), [&](auto t, const auto& k) {
    using T = decltype(t);
    return by_mean_dtype(mean, xs[0].scalar_type(), [&](auto s) {
      using Mt = std::conditional_t<std::is_same_v<decltype(s), at::BFloat16>, at::BFloat16, T>;
      return step_forward<T, Mt>(k, xs, mean, value, radius);
    });
  });
}

std::vector<torch::Tensor> step_backward_any(const std::string& kind, torch::Tensor grad,
                                             const std::vector<torch::Tensor>& xs, torch::Tensor mean,
                                             torch::Tensor value, double radius, torch::Tensor sq, torch::Tensor h) {
  return by_kind<Quaternion, Sphere>(kind, xs.size(), xs[0].scalar_type(), [&](auto t, const auto& k) {
    using T = decltype(t);
    return by_mean_dtype(mean, xs[0].scalar_type(), [&](auto s) {
      using Mt = std::conditional_t<std::is_same_v<decltype(s), at::BFloat16>, at::BFloat16, T>;
      return step_backward<T, Mt>(k, grad, xs, mean, value, radius, sq, h);
    });
  });
}

// sp (N, 2n), 1/mean (N, 2H) and τ (H,) in the state's dtype, n a multiple of H
void check_gates(const torch::Tensor& soft, const torch::Tensor& inv_mean, const torch::Tensor& tau,
                 const torch::Tensor& x, int64_t heads) {
  const int64_t n = x.size(-1);
  TORCH_CHECK(heads > 0 && n % heads == 0, "vectors: the oscillators must split evenly into the heads");
  for (const auto* t : {&soft, &inv_mean, &tau}) {
    TORCH_CHECK(t->scalar_type() == x.scalar_type(), "vectors: the gates' inputs must be in the state's dtype");
  }
  TORCH_CHECK(soft.numel() == 2 * x.numel() && inv_mean.numel() == 2 * heads * (x.numel() / n) && tau.numel() == heads,
              "vectors: the gates' inputs must be sp (N, 2n), 1/mean (N, 2H) and τ (H,)");
}

std::vector<torch::Tensor> features_forward_any(const std::string& kind, const std::vector<torch::Tensor>& xs,
                                                const std::vector<torch::Tensor>& rs, torch::Tensor soft,
                                                torch::Tensor inv_mean, torch::Tensor tau, torch::Tensor extra_q,
                                                torch::Tensor extra_k, int64_t heads, int64_t positions, bool bf16,
                                                int64_t width) {
  check_gates(soft, inv_mean, tau, xs[0], heads);
  return by_kind<QuaternionDrift, PlaneDrift>(kind, xs.size(), xs[0].scalar_type(), [&](auto t, const auto& k) {
    using T = decltype(t);
    return by_features_dtype<T>(bf16, [&](auto s) {
      return features_forward<T, decltype(s)>(k, xs, rs, soft, inv_mean, tau, extra_q, extra_k, heads, positions,
                                             width);
    });
  });
}

std::vector<torch::Tensor> features_backward_any(const std::string& kind, torch::Tensor grad_q, torch::Tensor grad_k,
                                                 const std::vector<torch::Tensor>& xs,
                                                 const std::vector<torch::Tensor>& rs, torch::Tensor soft,
                                                 torch::Tensor inv_mean, torch::Tensor tau, int64_t heads,
                                                 int64_t positions, bool need_drift) {
  check_gates(soft, inv_mean, tau, xs[0], heads);
  const bool bf16 = grad_q.scalar_type() == torch::kBFloat16;
  TORCH_CHECK(grad_k.scalar_type() == grad_q.scalar_type() && grad_q.dim() == 4,
              "vectors: the features' gradients must be (B, H, T, ·) of one dtype");
  return by_kind<QuaternionDrift, PlaneDrift>(kind, xs.size(), xs[0].scalar_type(), [&](auto t, const auto& k) {
    using T = decltype(t);
    if (!bf16) TORCH_CHECK(grad_q.scalar_type() == xs[0].scalar_type(), "vectors: gradients in the state's dtype");
    return by_features_dtype<T>(bf16, [&](auto s) {
      return features_backward<T, decltype(s)>(k, grad_q, grad_k, xs, rs, soft, inv_mean, tau, heads, positions,
                                                 need_drift);
    });
  });
}

torch::Tensor lift_forward_any(const std::vector<torch::Tensor>& xs, bool bf16) {
  TORCH_CHECK(xs[0].dim() >= 1 && xs[0].size(-1) > 0, "vectors: the planes must be (…, n) with n ≥ 1");
  return by_width(xs.size(), xs[0].scalar_type(), bf16, [&](auto t, auto s, auto c) {
    return lift_forward<decltype(t), decltype(s), decltype(c)::value>(xs);
  });
}

torch::Tensor lift_backward_any(torch::Tensor grad, int64_t oscillators, torch::ScalarType dtype) {
  TORCH_CHECK(oscillators > 0 && grad.dim() >= 1 && grad.size(-1) % oscillators == 0,
              "vectors: the lift's gradient must be (…, n·c) with n ≥ 1");
  return by_width(grad.size(-1) / oscillators, dtype, grad.scalar_type() == torch::kBFloat16, [&](auto t, auto s, auto c) {
    return lift_backward<decltype(t), decltype(s), decltype(c)::value>(grad, oscillators);
  });
}

torch::Tensor heads_forward_any(const std::vector<torch::Tensor>& xs, int64_t heads, int64_t positions, bool bf16) {
  const int64_t n = xs[0].dim() ? xs[0].size(-1) : 0, tokens = n ? xs[0].numel() / n : 0;
  TORCH_CHECK(heads > 0 && n > 0 && n % heads == 0, "vectors: the oscillators must split evenly into the heads");
  TORCH_CHECK(positions > 0 ? tokens % positions == 0 : tokens == 0, "vectors: the tokens must be B rows of T positions");
  return by_width(xs.size(), xs[0].scalar_type(), bf16, [&](auto t, auto s, auto c) {
    return heads_forward<decltype(t), decltype(s), decltype(c)::value>(xs, heads, positions);
  });
}

torch::Tensor heads_backward_any(torch::Tensor grad, int64_t oscillators, torch::ScalarType dtype) {
  TORCH_CHECK(grad.dim() == 4 && grad.size(1) > 0 && oscillators > 0 && oscillators % grad.size(1) == 0 &&
              grad.size(-1) % (oscillators / grad.size(1)) == 0,
              "vectors: the gradient must be (B, H, T, c·d) with n oscillators splitting evenly into the H heads");
  const int64_t c = grad.size(-1) / (oscillators / grad.size(1));
  return by_width(c, dtype, grad.scalar_type() == torch::kBFloat16, [&](auto t, auto s, auto cc) {
    return heads_backward<decltype(t), decltype(s), decltype(cc)::value>(grad, oscillators);
  });
}

}  // namespace

namespace kuramoto {
void register_torus(pybind11::module_& m);  // torus.cpp: built into this module
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("move_forward", &move_forward_any, "normalise(move(x, w)): out (c, N, n)");
  m.def("move_backward", &move_backward_any, "(dx (c, N, n), dw (N, n, tangent) as w)");
  m.def("step_forward", &step_forward_any, "G (B, H, T, c·d) -> (out (c, N, n), ‖w‖² (N, 1), h (N, 1))");
  m.def("step_backward", &step_backward_any, "(dx (c, N, n), dG as G, dv (N, n), ⟨dstep, w⟩ h (N,))");
  m.def("lift_forward", &lift_forward_any, "c planes (N, n) -> (N, n·c)");
  m.def("lift_backward", &lift_backward_any, "(…, n·c) -> (c, N, n)");
  m.def("heads_forward", &heads_forward_any, "c planes (N, n) -> (B, H, T, c·d)");
  m.def("heads_backward", &heads_backward_any, "(B, H, T, c·d) -> (c, N, n)");
  m.def("features_forward", &features_forward_any, "(q, k (B, H, T, width))");
  m.def("features_backward", &features_backward_any,
        "(dx (c, N, n), dL/dsp (N, 2n), Σ dg^q g^q (N, H), dr (parts, N, n))");
  kuramoto::register_torus(m);
}
