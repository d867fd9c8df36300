// solvers._native: SuiteSparse KLU factorizations for solvers (sv.KLU) and XLA FFI handlers for
// adjoints.jax, over one thread-safe table of factor objects.
//
// Python owns every object: analyze() and factor() return integer handles whose Python holders
// (solvers/_engines/klu.py) free them with free_symbolic() / free_factor(). A numeric factor
// holds its symbolic analysis (shared_ptr), so a symbolic handle may be freed while factors made
// from it live. The XLA side never owns anything: adjoints.jax maps the int32 key of its live
// store to a factor handle with alias(key, handle); the FFI solve looks the key up under the
// table's lock, takes a shared reference for the duration of the call and solves; a key whose
// factor is gone (or a non-finite right-hand side or result) goes to the Python fallback that
// adjoints.jax registered (set_fallback), which answers exactly as the Python callback does.
//
// KLU factors A (CSC, built from the CSR pattern once per analysis) as P R^-1 A Q = L U + F.
// One factor serves A x = b (klu_solve), A^T x = b (klu_tsolve) and A^H x = b (klu_z_tsolve
// with conj_solve); a solve uses the factor's own workspace (Numeric->Xwork), so solves with
// one factor are serialised by its mutex (solves with different factors run in parallel).
// KLU computes in double precision; callers convert single precision.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cholmod.h>
#include <klu.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef LINOPS_WITH_XLA_FFI
#include "xla/ffi/api/ffi.h"
#endif

namespace {

// ----- objects and the table --------------------------------------------------------------------
struct Symbolic {
  int n = 0, nnz = 0;
  std::vector<int> Ap, Ai;      // CSC of A
  std::vector<int64_t> perm;    // CSC position of CSR entry k: csc[perm[k]] = csr[k]
  klu_symbolic* sym = nullptr;
  klu_common common;
  ~Symbolic() {
    if (sym) klu_free_symbolic(&sym, &common);
  }
};

// A KLU numeric factorization (sym, num), or a copy of a real CHOLMOD factor (L) that
// adopt_cholmod() took from scikit-sparse's, solved with cholmod_solve2 on workspace kept here
struct Factor {
  int n = 0;
  std::shared_ptr<Symbolic> sym;
  klu_numeric* num = nullptr;
  bool cplx = false;
  klu_common common;
  cholmod_factor* L = nullptr;
  cholmod_common cc;
  cholmod_dense *Xw = nullptr, *Yw = nullptr, *Ew = nullptr;
  std::mutex mutex;             // solves write the workspace (Numeric->Xwork / Xw, Yw, Ew)
  ~Factor() {
    if (num) {
      if (cplx) klu_z_free_numeric(&num, &common);
      else klu_free_numeric(&num, &common);
    }
    if (L) {
      cholmod_free_dense(&Xw, &cc);
      cholmod_free_dense(&Yw, &cc);
      cholmod_free_dense(&Ew, &cc);
      cholmod_free_factor(&L, &cc);
      cholmod_finish(&cc);
    }
  }
};

std::mutex g_lock;
int64_t g_next = 1;
std::unordered_map<int64_t, std::shared_ptr<Symbolic>> g_symbolic;
std::unordered_map<int64_t, std::shared_ptr<Factor>> g_factor;
std::unordered_map<int32_t, int64_t> g_alias;                 // live-store key -> factor handle
std::unordered_map<int64_t, std::vector<int32_t>> g_aliases_of;
std::atomic<int64_t> g_forward{0}, g_transpose{0}, g_fallbacks{0}, g_native_solves{0};
std::atomic<int64_t> g_loop_factorizations{0};   // made by the FFI factorize (loop slots)
std::atomic<int64_t> g_loop_reuses{0};           // ... and found again by their values

std::shared_ptr<Factor> find_factor(int64_t id) {
  std::lock_guard<std::mutex> g(g_lock);
  auto it = g_factor.find(id);
  return it == g_factor.end() ? nullptr : it->second;
}

std::shared_ptr<Factor> find_klu(int64_t id) {   // pivots, logdet, info: KLU factors only
  auto f = find_factor(id);
  return f && f->sym ? f : nullptr;
}

std::shared_ptr<Factor> find_alias(int32_t key) {
  std::lock_guard<std::mutex> g(g_lock);
  auto a = g_alias.find(key);
  if (a == g_alias.end()) return nullptr;
  auto it = g_factor.find(a->second);
  return it == g_factor.end() ? nullptr : it->second;
}

void klu_init(klu_common* c) {
  klu_defaults(c);
  c->halt_if_singular = 1;
}

// ----- solves on one factor (the GIL may be released) --------------------------------------------
// X: n x k column-major, real (k columns) or complex interleaved; trans 0 N, 1 T, 2 H
int solve_inplace(Factor& f, double* X, int k, int trans) {
  std::lock_guard<std::mutex> g(f.mutex);
  if (f.L) {   // real symmetric: A = A^T = A^H, one solve for every trans
    cholmod_dense B;
    std::memset(&B, 0, sizeof B);
    B.nrow = B.d = static_cast<size_t>(f.n);
    B.ncol = static_cast<size_t>(k);
    B.nzmax = B.nrow * B.ncol;
    B.x = X;
    B.xtype = CHOLMOD_REAL;
    B.dtype = CHOLMOD_DOUBLE;
    if (!cholmod_solve2(CHOLMOD_A, f.L, &B, nullptr, &f.Xw, nullptr, &f.Yw, &f.Ew, &f.cc))
      return 0;
    std::memcpy(X, f.Xw->x, sizeof(double) * B.nzmax);
    return 1;
  }
  Symbolic& s = *f.sym;
  int ok;
  if (f.cplx) {
    if (trans == 0) ok = klu_z_solve(s.sym, f.num, s.n, k, X, &f.common);
    else ok = klu_z_tsolve(s.sym, f.num, s.n, k, X, trans == 2 ? 1 : 0, &f.common);
  } else {
    if (trans == 0) ok = klu_solve(s.sym, f.num, s.n, k, X, &f.common);
    else ok = klu_tsolve(s.sym, f.num, s.n, k, X, &f.common);
  }
  return ok;
}

int permutation_parity(const int* p, int n) {
  std::vector<char> seen(n, 0);
  int cycles = 0;
  for (int i = 0; i < n; ++i) {
    if (seen[i]) continue;
    ++cycles;
    for (int j = i; !seen[j]; j = p[j]) seen[j] = 1;
  }
  return ((n - cycles) % 2) ? -1 : 1;
}

// ----- Python helpers ----------------------------------------------------------------------------
struct View {
  Py_buffer b;
  bool held = false;
  ~View() {
    if (held) PyBuffer_Release(&b);
  }
};

bool get_view(PyObject* obj, View& v, int flags, const char* what) {
  if (PyObject_GetBuffer(obj, &v.b, flags | PyBUF_FORMAT) != 0) {
    PyErr_Format(PyExc_TypeError, "%s: expected a contiguous buffer", what);
    return false;
  }
  v.held = true;
  return true;
}

// 0 real double, 1 complex double, -1 other
int kind_of(const Py_buffer& b) {
  const char* f = b.format ? b.format : "B";
  if (*f == '<' || *f == '=' || *f == '@') ++f;
  if (std::strcmp(f, "d") == 0 && b.itemsize == 8) return 0;
  if (std::strcmp(f, "Zd") == 0 && b.itemsize == 16) return 1;
  return -1;
}

bool is_int32(const Py_buffer& b) {
  const char* f = b.format ? b.format : "B";
  if (*f == '<' || *f == '=' || *f == '@') ++f;
  return b.itemsize == 4 && (std::strcmp(f, "i") == 0 || std::strcmp(f, "l") == 0);
}

int64_t new_id() { return g_next++; }  // under g_lock

PyObject* py_analyze(PyObject*, PyObject* args) {
  int n, ordering;
  PyObject *pptr, *pind;
  if (!PyArg_ParseTuple(args, "iOOi", &n, &pptr, &pind, &ordering)) return nullptr;
  View vp, vi;
  if (!get_view(pptr, vp, PyBUF_C_CONTIGUOUS, "indptr") ||
      !get_view(pind, vi, PyBUF_C_CONTIGUOUS, "indices"))
    return nullptr;
  if (!is_int32(vp.b) || !is_int32(vi.b)) {
    PyErr_SetString(PyExc_TypeError, "indptr and indices must be int32");
    return nullptr;
  }
  const int* ptr = static_cast<const int*>(vp.b.buf);
  const int* ind = static_cast<const int*>(vi.b.buf);
  if (n < 1 || vp.b.len / 4 != n + 1) {
    PyErr_Format(PyExc_ValueError, "analyze: indptr of length %zd for n=%d", vp.b.len / 4, n);
    return nullptr;
  }
  int nnz = ptr[n];
  if (ptr[0] != 0 || nnz < 0 || vi.b.len / 4 != nnz) {
    PyErr_Format(PyExc_ValueError, "analyze: indptr[n]=%d but %zd indices", nnz, vi.b.len / 4);
    return nullptr;
  }
  auto s = std::make_shared<Symbolic>();
  s->n = n;
  s->nnz = nnz;
  s->Ap.assign(n + 1, 0);
  s->Ai.resize(nnz);
  s->perm.resize(nnz);
  for (int r = 0; r < n; ++r) {
    if (ptr[r + 1] < ptr[r]) {
      PyErr_Format(PyExc_ValueError, "analyze: indptr decreases at row %d", r);
      return nullptr;
    }
    for (int k = ptr[r]; k < ptr[r + 1]; ++k) {
      int c = ind[k];
      if (c < 0 || c >= n) {
        PyErr_Format(PyExc_ValueError, "analyze: column index %d out of range [0, %d)", c, n);
        return nullptr;
      }
      s->Ap[c + 1]++;
    }
  }
  for (int c = 0; c < n; ++c) s->Ap[c + 1] += s->Ap[c];
  std::vector<int> next(s->Ap.begin(), s->Ap.end() - 1);
  for (int r = 0; r < n; ++r)
    for (int k = ptr[r]; k < ptr[r + 1]; ++k) {
      int pos = next[ind[k]]++;
      s->Ai[pos] = r;
      s->perm[k] = pos;
    }
  klu_init(&s->common);
  s->common.ordering = ordering;
  Py_BEGIN_ALLOW_THREADS
  s->sym = klu_analyze(n, s->Ap.data(), s->Ai.data(), &s->common);
  Py_END_ALLOW_THREADS
  if (!s->sym) {
    PyErr_Format(PyExc_RuntimeError, "klu_analyze failed (KLU status %d)", s->common.status);
    return nullptr;
  }
  int64_t id;
  {
    std::lock_guard<std::mutex> g(g_lock);
    id = new_id();
    g_symbolic[id] = s;
  }
  return PyLong_FromLongLong(id);
}

PyObject* py_symbolic_info(PyObject*, PyObject* args) {
  long long id;
  if (!PyArg_ParseTuple(args, "L", &id)) return nullptr;
  std::shared_ptr<Symbolic> s;
  {
    std::lock_guard<std::mutex> g(g_lock);
    auto it = g_symbolic.find(id);
    if (it != g_symbolic.end()) s = it->second;
  }
  if (!s) {
    PyErr_Format(PyExc_KeyError, "no KLU symbolic analysis %lld", id);
    return nullptr;
  }
  return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:d,s:d,s:d}", "n", s->n, "nnz", s->nnz,
                       "nblocks", s->sym->nblocks, "maxblock", s->sym->maxblock,
                       "structural_rank", s->sym->structural_rank, "lnz", s->sym->lnz, "unz",
                       s->sym->unz, "est_flops", s->sym->est_flops);
}

PyObject* py_free_symbolic(PyObject*, PyObject* args) {
  long long id;
  if (!PyArg_ParseTuple(args, "L", &id)) return nullptr;
  std::shared_ptr<Symbolic> dead;
  {
    std::lock_guard<std::mutex> g(g_lock);
    auto it = g_symbolic.find(id);
    if (it != g_symbolic.end()) {
      dead = it->second;
      g_symbolic.erase(it);
    }
  }
  Py_BEGIN_ALLOW_THREADS
  dead.reset();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// klu_factor of CSR-ordered values ``src`` (nnz doubles, or nnz interleaved complex) on the
// analysis ``s``: the factor, or nullptr with KLU's status, numerical rank and singular column
std::shared_ptr<Factor> make_klu_factor(const std::shared_ptr<Symbolic>& s, const double* src,
                                        bool cplx, double tol, int* status, int* rank,
                                        int* col) {
  auto f = std::make_shared<Factor>();
  f->sym = s;
  f->n = s->n;
  f->cplx = cplx;
  klu_init(&f->common);
  if (tol > 0) f->common.tol = tol;
  const int w = cplx ? 2 : 1;
  std::vector<double> Ax(static_cast<size_t>(s->nnz) * w);
  for (int k = 0; k < s->nnz; ++k)
    for (int c = 0; c < w; ++c) Ax[s->perm[k] * w + c] = src[k * w + c];
  if (cplx) f->num = klu_z_factor(s->Ap.data(), s->Ai.data(), Ax.data(), s->sym, &f->common);
  else f->num = klu_factor(s->Ap.data(), s->Ai.data(), Ax.data(), s->sym, &f->common);
  *status = f->common.status;
  *rank = f->common.numerical_rank;
  *col = f->common.singular_col;
  return f->num ? f : nullptr;
}

// |R[k] U[k, k]|, the pivots before KLU's row scaling (what solvers' pivot_check reads)
double pivot_abs(const Factor& f, int k) {
  const double* d = static_cast<const double*>(f.num->Udiag);
  const double r = f.num->Rs ? f.num->Rs[f.num->Pnum[k]] : 1.0;
  return f.cplx ? std::hypot(d[2 * k] * r, d[2 * k + 1] * r) : std::fabs(d[k] * r);
}

// solvers' pivot_check passes: max|pivot| finite and min|pivot| > rtol max|pivot|
bool pivots_pass(const Factor& f, double rtol) {
  const int n = f.sym->n;
  if (n == 0) return true;
  double dmin = INFINITY, dmax = 0.0;
  for (int k = 0; k < n; ++k) {
    const double a = pivot_abs(f, k);
    if (std::isnan(a)) return false;
    dmin = std::min(dmin, a);
    dmax = std::max(dmax, a);
  }
  return std::isfinite(dmax) && !(dmin <= rtol * dmax);
}

PyObject* py_factor(PyObject*, PyObject* args) {
  long long sid;
  PyObject* pval;
  double tol = -1.0;   // KLU's partial-pivoting tolerance (its default 0.001 where <= 0)
  if (!PyArg_ParseTuple(args, "LO|d", &sid, &pval, &tol)) return nullptr;
  std::shared_ptr<Symbolic> s;
  {
    std::lock_guard<std::mutex> g(g_lock);
    auto it = g_symbolic.find(sid);
    if (it != g_symbolic.end()) s = it->second;
  }
  if (!s) {
    PyErr_Format(PyExc_KeyError, "no KLU symbolic analysis %lld", sid);
    return nullptr;
  }
  View vv;
  if (!get_view(pval, vv, PyBUF_C_CONTIGUOUS, "values")) return nullptr;
  int kind = kind_of(vv.b);
  if (kind < 0 || vv.b.len / vv.b.itemsize != s->nnz) {
    PyErr_Format(PyExc_TypeError, "factor: values must be %d float64 or complex128 numbers",
                 s->nnz);
    return nullptr;
  }
  int status = 0, rank = -1, col = -1;
  std::shared_ptr<Factor> f;
  Py_BEGIN_ALLOW_THREADS
  f = make_klu_factor(s, static_cast<const double*>(vv.b.buf), kind == 1, tol, &status, &rank,
                      &col);
  Py_END_ALLOW_THREADS
  if (!f) return Py_BuildValue("(Liii)", 0LL, status, rank, col);
  int64_t id;
  {
    std::lock_guard<std::mutex> g(g_lock);
    id = new_id();
    g_factor[id] = f;
  }
  return Py_BuildValue("(Liii)", (long long)id, status, rank, col);
}

// A native copy of a real, double-precision CHOLMOD factor (a cholmod_factor* of the
// CHOLMOD this extension links, e.g. scikit-sparse's): its handle, or 0 for a factor it does
// not take (complex, single, 64-bit indices); the caller keeps the original alive during the copy
PyObject* py_adopt_cholmod(PyObject*, PyObject* args) {
  unsigned long long addr;
  if (!PyArg_ParseTuple(args, "K", &addr)) return nullptr;
  const cholmod_factor* src = reinterpret_cast<const cholmod_factor*>(addr);
  if (!src || src->itype != CHOLMOD_INT || src->xtype != CHOLMOD_REAL ||
      src->dtype != CHOLMOD_DOUBLE || src->minor != src->n)
    return PyLong_FromLongLong(0);
  auto f = std::make_shared<Factor>();
  cholmod_start(&f->cc);
  f->cc.print = 0;
  Py_BEGIN_ALLOW_THREADS
  f->L = cholmod_copy_factor(const_cast<cholmod_factor*>(src), &f->cc);
  // a supernodal factor becomes a simplicial LL' one (same entries, O(nnz(L)) once): a loop
  // step solves one right-hand side, where cholmod_solve2's supernodal dense triangular solves
  // per supernode lost to KLU's column sweeps (1.6 vs 1.4 ms per forward solve at n = 10 000)
  if (f->L && f->L->is_super &&
      !cholmod_change_factor(CHOLMOD_REAL, 1, 0, 1, 1, f->L, &f->cc)) {
    cholmod_free_factor(&f->L, &f->cc);
    f->L = nullptr;
  }
  Py_END_ALLOW_THREADS
  if (!f->L) {
    cholmod_finish(&f->cc);
    f->L = nullptr;
    return PyLong_FromLongLong(0);
  }
  f->n = static_cast<int>(f->L->n);
  int64_t id;
  {
    std::lock_guard<std::mutex> g(g_lock);
    id = new_id();
    g_factor[id] = f;
  }
  return PyLong_FromLongLong(id);
}

PyObject* py_free_factor(PyObject*, PyObject* args) {
  long long id;
  if (!PyArg_ParseTuple(args, "L", &id)) return nullptr;
  std::shared_ptr<Factor> dead;
  {
    std::lock_guard<std::mutex> g(g_lock);
    auto it = g_factor.find(id);
    if (it != g_factor.end()) {
      dead = it->second;
      g_factor.erase(it);
    }
    auto a = g_aliases_of.find(id);
    if (a != g_aliases_of.end()) {
      for (int32_t key : a->second) {
        auto k = g_alias.find(key);
        if (k != g_alias.end() && k->second == id) g_alias.erase(k);
      }
      g_aliases_of.erase(a);
    }
  }
  Py_BEGIN_ALLOW_THREADS
  dead.reset();   // a solve running now holds its own reference; the last one frees
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyObject* py_solve(PyObject*, PyObject* args) {
  long long id;
  PyObject* px;
  int trans;
  if (!PyArg_ParseTuple(args, "LOi", &id, &px, &trans)) return nullptr;
  auto f = find_factor(id);
  if (!f) {
    PyErr_Format(PyExc_KeyError, "no KLU factor %lld (freed)", id);
    return nullptr;
  }
  View vx;
  if (!get_view(px, vx, PyBUF_F_CONTIGUOUS | PyBUF_WRITABLE, "X")) return nullptr;
  int kind = kind_of(vx.b);
  int n = f->n;
  Py_ssize_t count = vx.b.len / vx.b.itemsize;
  if (kind != (f->cplx ? 1 : 0) || count % n != 0 || trans < 0 || trans > 2) {
    PyErr_Format(PyExc_TypeError, "solve: X must be a writable Fortran-ordered %s array with "
                 "%d rows", f->cplx ? "complex128" : "float64", n);
    return nullptr;
  }
  int k = static_cast<int>(count / n);
  int ok = 1;
  if (k > 0) {
    Py_BEGIN_ALLOW_THREADS
    ok = solve_inplace(*f, static_cast<double*>(vx.b.buf), k, trans);
    Py_END_ALLOW_THREADS
  }
  if (!ok) {
    PyErr_Format(PyExc_RuntimeError, "klu_solve failed (KLU status %d)", f->common.status);
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* py_pivots(PyObject*, PyObject* args) {
  long long id;
  PyObject* po;
  if (!PyArg_ParseTuple(args, "LO", &id, &po)) return nullptr;
  auto f = find_klu(id);
  if (!f) {
    PyErr_Format(PyExc_KeyError, "no KLU factor %lld (freed)", id);
    return nullptr;
  }
  View vo;
  if (!get_view(po, vo, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, "out")) return nullptr;
  int w = f->cplx ? 2 : 1;
  if (kind_of(vo.b) != (f->cplx ? 1 : 0) || vo.b.len != (Py_ssize_t)f->sym->n * 8 * w) {
    PyErr_SetString(PyExc_TypeError, "pivots: out must match the factor's n and kind");
    return nullptr;
  }
  // the pivots of P A Q = (R L R^-1)(R U) before KLU's row scaling: R[k] U[k, k] with R[k] the
  // scale factor of the k-th pivot row, so that the singularity rule sees A's own magnitudes
  const double* d = static_cast<const double*>(f->num->Udiag);
  double* out = static_cast<double*>(vo.b.buf);
  for (int k = 0; k < f->sym->n; ++k) {
    double r = f->num->Rs ? f->num->Rs[f->num->Pnum[k]] : 1.0;
    for (int c = 0; c < w; ++c) out[k * w + c] = d[k * w + c] * r;
  }
  Py_RETURN_NONE;
}

// (sign real, sign imaginary, log|det A|): det A = prod(Rs) sign(P) sign(Q) prod(diag U)
PyObject* py_logdet(PyObject*, PyObject* args) {
  long long id;
  if (!PyArg_ParseTuple(args, "L", &id)) return nullptr;
  auto f = find_klu(id);
  if (!f) {
    PyErr_Format(PyExc_KeyError, "no KLU factor %lld (freed)", id);
    return nullptr;
  }
  int n = f->n;
  double logabs = 0.0, phase = 0.0;
  int sign = permutation_parity(f->num->Pnum, n) * permutation_parity(f->sym->sym->Q, n);
  bool zero = false;
  const double* d = static_cast<const double*>(f->num->Udiag);
  for (int i = 0; i < n; ++i) {
    if (f->cplx) {
      double a = std::hypot(d[2 * i], d[2 * i + 1]);
      if (a == 0) zero = true;
      logabs += std::log(a);
      phase += std::atan2(d[2 * i + 1], d[2 * i]);
    } else {
      double a = std::fabs(d[i]);
      if (a == 0) zero = true;
      logabs += std::log(a);
      if (d[i] < 0) sign = -sign;
    }
    if (f->num->Rs) logabs += std::log(f->num->Rs[i]);
  }
  if (zero) return Py_BuildValue("(ddd)", 0.0, 0.0, -INFINITY);
  if (f->cplx) return Py_BuildValue("(ddd)", sign * std::cos(phase), sign * std::sin(phase), logabs);
  return Py_BuildValue("(ddd)", (double)sign, 0.0, logabs);
}

PyObject* py_factor_info(PyObject*, PyObject* args) {
  long long id;
  if (!PyArg_ParseTuple(args, "L", &id)) return nullptr;
  auto f = find_klu(id);
  if (!f) {
    PyErr_Format(PyExc_KeyError, "no KLU factor %lld (freed)", id);
    return nullptr;
  }
  return Py_BuildValue("{s:i,s:i,s:i,s:i,s:O}", "n", f->sym->n, "lnz", f->num->lnz, "unz",
                       f->num->unz, "nblocks", f->num->nblocks, "complex",
                       f->cplx ? Py_True : Py_False);
}

PyObject* py_alias(PyObject*, PyObject* args) {
  int key;
  long long id;
  if (!PyArg_ParseTuple(args, "iL", &key, &id)) return nullptr;
  std::lock_guard<std::mutex> g(g_lock);
  if (g_factor.find(id) == g_factor.end()) {
    PyErr_Format(PyExc_KeyError, "no KLU factor %lld (freed)", id);
    return nullptr;
  }
  auto old = g_alias.find(key);
  if (old != g_alias.end()) {
    auto& v = g_aliases_of[old->second];
    for (auto it = v.begin(); it != v.end(); ++it)
      if (*it == key) {
        v.erase(it);
        break;
      }
  }
  g_alias[key] = id;
  g_aliases_of[id].push_back(key);
  Py_RETURN_NONE;
}

PyObject* py_unalias(PyObject*, PyObject* args) {
  int key;
  if (!PyArg_ParseTuple(args, "i", &key)) return nullptr;
  std::lock_guard<std::mutex> g(g_lock);
  auto a = g_alias.find(key);
  if (a != g_alias.end()) {
    auto& v = g_aliases_of[a->second];
    for (auto it = v.begin(); it != v.end(); ++it)
      if (*it == key) {
        v.erase(it);
        break;
      }
    if (v.empty()) g_aliases_of.erase(a->second);
    g_alias.erase(a);
  }
  Py_RETURN_NONE;
}

// ----- loop slots: factorizations made by the FFI factorize inside a compiled loop -----------
// adjoints.jax lowers a KLU factorization in a loop body (its site's consumers all native solves
// of the same module, its Factorization never flattened) to the FFI factorize below, one slot
// per lowered operation. Its keys are negative (the live store's are positive) and name
// factors of this table only. When a slot's factorizations die (the policy the live store
// applies to a factorize in a loop, without Python):
// * the slot's previous keys when it factorizes again in the same run, if no cotangent solve
//   of the module will come back for them (pending == 0: the pin moves on);
// * otherwise (pending = the module's cotangent solves of the site) one pending use per
//   cotangent solve operation, released when that operation moves on to another key;
// * everything the slot made in an earlier run, when another run (XLA's RunId) factorizes here
//   or enters the live store (enter_run: the runs before it are over), and everything at
//   free_slot (the compiled module was dropped).
// A consumer that finds a key gone falls back to Python, which refactorizes from the values it
// was handed (a miss): never a wrong factor, only a slower one.
struct Slot {
  std::shared_ptr<Symbolic> sym;
  double tol = 1.0;          // KLU's pivoting tolerance
  double rtol = 0.0;         // pivot_check's threshold
  int pending = 0;           // cotangent solve operations of the site in the module
  bool has_run = false;
  int64_t run = 0;
  std::vector<int32_t> last;   // keys of the slot's last call, one per batch member
  std::vector<std::shared_ptr<const std::vector<double>>> last_vals;   // their values (double)
  std::vector<int32_t> made;   // keys it made in the current run (some may be freed already)
  size_t prune_at = 4096;      // forget freed keys of ``made`` once it is this long
};
// the most factorizations of other slots a factorize compares its values with
constexpr size_t kSharedMax = 16;
struct LoopKey {
  int64_t factor = 0, slot = 0;
  int pending = 0;
};
std::unordered_map<int64_t, Slot> g_slots;                     // under g_lock
std::unordered_map<int32_t, LoopKey> g_loop_keys;              // under g_lock
std::unordered_map<int64_t, std::vector<int32_t>> g_last_used; // cotangent consumer -> keys
int32_t g_next_loop_key = -1;                                  // under g_lock

// drop loop key ``key`` (its alias and factor; only if slot ``of`` made it, where of != 0); the
// factor goes to ``dead`` (freed after the lock is let go)
void drop_loop_key(int32_t key, std::vector<std::shared_ptr<Factor>>& dead, int64_t of = 0) {
  auto it = g_loop_keys.find(key);
  if (it == g_loop_keys.end() || (of && it->second.slot != of)) return;
  const int64_t fid = it->second.factor;
  g_loop_keys.erase(it);
  g_alias.erase(key);
  g_aliases_of.erase(fid);
  auto f = g_factor.find(fid);
  if (f != g_factor.end()) {
    dead.push_back(std::move(f->second));
    g_factor.erase(f);
  }
}

// forget what slot ``id`` made (its factors to ``dead``): its run is over
void clear_slot(int64_t id, Slot& sl, std::vector<std::shared_ptr<Factor>>& dead) {
  for (int32_t k : sl.made) drop_loop_key(k, dead, id);
  for (int32_t k : sl.last) drop_loop_key(k, dead, id);
  sl.made.clear();
  sl.last.clear();
  sl.last_vals.clear();
  sl.prune_at = 4096;
  sl.has_run = false;
}

// Runs: a factorize of run ``run`` (or the live store's callbacks, through enter_run) means
// the runs before it have ended, as the live store assumes: what every slot made in another
// run is freed (a compiled module JAX keeps in its caches but never runs again must not keep
// its last factorization for ever). A run still going on meanwhile (two computations at once)
// finds its keys gone and falls back to Python: a miss, never a wrong factor.
int64_t g_run_seen = 0;        // under g_lock
bool g_run_known = false;      // under g_lock
void enter_run(int64_t run, bool all, std::vector<std::shared_ptr<Factor>>& dead) {
  if (!all && g_run_known && g_run_seen == run) return;
  for (auto& [id, sl] : g_slots)
    if (sl.has_run && (all || sl.run != run)) clear_slot(id, sl, dead);
  g_run_seen = run;
  g_run_known = !all;
}

// peak_live of adjoints.jax.stats(): the most factorizations alive at once, the loop slots'
// and the live store's (its size, told by Python) together; since the last drain
std::atomic<int64_t> g_store_live{0};
int64_t g_peak_live = 0;       // under g_lock
void note_peak() {             // under g_lock
  g_peak_live = std::max<int64_t>(g_peak_live, (int64_t)g_loop_keys.size() + g_store_live);
}

int32_t new_loop_key() {   // under g_lock: a negative key not in use
  for (;;) {
    int32_t k = g_next_loop_key;
    g_next_loop_key = k <= -2147483647 ? -1 : k - 1;
    if (g_loop_keys.find(k) == g_loop_keys.end()) return k;
  }
}

// a cotangent consumer ``fid`` used ``keys`` (unique, negative ones only): one pending use of
// each key it used before and does not use now is released
void moved_on(int64_t fid, std::vector<int32_t> keys, std::vector<std::shared_ptr<Factor>>& dead) {
  std::sort(keys.begin(), keys.end());
  auto& prev = g_last_used[fid];
  for (int32_t k : prev) {
    if (std::binary_search(keys.begin(), keys.end(), k)) continue;
    auto it = g_loop_keys.find(k);
    if (it != g_loop_keys.end() && --it->second.pending <= 0) drop_loop_key(k, dead);
  }
  prev = std::move(keys);
}

PyObject* py_make_slot(PyObject*, PyObject* args) {
  long long sid;
  double tol, rtol;
  if (!PyArg_ParseTuple(args, "Ldd", &sid, &tol, &rtol)) return nullptr;
  std::lock_guard<std::mutex> g(g_lock);
  auto it = g_symbolic.find(sid);
  if (it == g_symbolic.end()) {
    PyErr_Format(PyExc_KeyError, "no KLU symbolic analysis %lld", sid);
    return nullptr;
  }
  int64_t id = new_id();
  Slot& sl = g_slots[id];
  sl.sym = it->second;
  sl.tol = tol;
  sl.rtol = rtol;
  return PyLong_FromLongLong(id);
}

PyObject* py_slot_pending(PyObject*, PyObject* args) {
  long long id;
  int delta;
  if (!PyArg_ParseTuple(args, "Li", &id, &delta)) return nullptr;
  std::lock_guard<std::mutex> g(g_lock);
  auto it = g_slots.find(id);
  if (it != g_slots.end()) it->second.pending += delta;
  Py_RETURN_NONE;
}

PyObject* py_free_slot(PyObject*, PyObject* args) {
  long long id;
  if (!PyArg_ParseTuple(args, "L", &id)) return nullptr;
  std::vector<std::shared_ptr<Factor>> dead;
  {
    std::lock_guard<std::mutex> g(g_lock);
    auto it = g_slots.find(id);
    if (it != g_slots.end()) {
      clear_slot(id, it->second, dead);
      g_slots.erase(it);
    }
  }
  Py_BEGIN_ALLOW_THREADS
  dead.clear();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// enter_run(run): the live store serves a callback of run ``run`` (another run than the last
// one's); enter_run(None): every run is over (adjoints.jax's settle)
PyObject* py_enter_run(PyObject*, PyObject* arg) {
  const bool all = arg == Py_None;
  const long long run = all ? 0 : PyLong_AsLongLong(arg);
  if (!all && PyErr_Occurred()) return nullptr;
  std::vector<std::shared_ptr<Factor>> dead;
  {
    std::lock_guard<std::mutex> g(g_lock);
    enter_run(run, all, dead);
  }
  Py_BEGIN_ALLOW_THREADS
  dead.clear();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyObject* py_set_store_live(PyObject*, PyObject* arg) {
  const long long n = PyLong_AsLongLong(arg);
  if (PyErr_Occurred()) return nullptr;
  std::lock_guard<std::mutex> g(g_lock);
  g_store_live = n;
  note_peak();
  Py_RETURN_NONE;
}

PyObject* py_forget_consumer(PyObject*, PyObject* args) {
  long long fid;
  if (!PyArg_ParseTuple(args, "L", &fid)) return nullptr;
  std::lock_guard<std::mutex> g(g_lock);
  g_last_used.erase(fid);
  Py_RETURN_NONE;
}

// ----- patterns for the SDDMM handler ------------------------------------------------------------
// rows/cols of a sparsity pattern, copied (int32) and owned here: a compiled computation that is
// still running after its Python executable was dropped (JAX dispatches asynchronously) must
// still find its pattern, so an entry is never freed; the Python side registers each pattern
// (by content) once per process, under a byte cap (adjoints.jax._native.PATTERN_BYTES_MAX)
struct PatternData {
  std::vector<int32_t> rows, cols;
  int64_t nrows = 0, ncols = 0;
};
std::map<int64_t, std::shared_ptr<const PatternData>> g_pattern;  // under g_lock

PyObject* py_register_pattern(PyObject*, PyObject* args) {
  PyObject *r, *c;
  long long nrows, ncols;
  if (!PyArg_ParseTuple(args, "OOLL", &r, &c, &nrows, &ncols)) return nullptr;
  View vr, vc;
  if (!get_view(r, vr, PyBUF_C_CONTIGUOUS, "register_pattern rows") ||
      !get_view(c, vc, PyBUF_C_CONTIGUOUS, "register_pattern cols"))
    return nullptr;
  if (!is_int32(vr.b) || !is_int32(vc.b) || vr.b.len != vc.b.len) {
    PyErr_Format(PyExc_TypeError,
                 "register_pattern: rows and cols must be int32 arrays of one length "
                 "(got %zd and %zd bytes)", vr.b.len, vc.b.len);
    return nullptr;
  }
  auto d = std::make_shared<PatternData>();
  const int32_t* rp = static_cast<const int32_t*>(vr.b.buf);
  const int32_t* cp = static_cast<const int32_t*>(vc.b.buf);
  const size_t nnz = static_cast<size_t>(vr.b.len / 4);
  for (size_t e = 0; e < nnz; ++e)
    if (rp[e] < 0 || rp[e] >= nrows || cp[e] < 0 || cp[e] >= ncols) {
      PyErr_Format(PyExc_ValueError, "register_pattern: entry %zu (%d, %d) outside %lld x %lld",
                   e, rp[e], cp[e], nrows, ncols);
      return nullptr;
    }
  d->rows.assign(rp, rp + nnz);
  d->cols.assign(cp, cp + nnz);
  d->nrows = nrows;
  d->ncols = ncols;
  int64_t id;
  {
    std::lock_guard<std::mutex> g(g_lock);
    id = new_id();
    g_pattern[id] = std::move(d);
  }
  return PyLong_FromLongLong(id);
}

PyObject* py_counts(PyObject*, PyObject*) {
  size_t nf, ns, na, np_, nl, nsl;
  {
    std::lock_guard<std::mutex> g(g_lock);
    nf = g_factor.size();
    ns = g_symbolic.size();
    na = g_alias.size();
    np_ = g_pattern.size();
    nl = g_loop_keys.size();
    nsl = g_slots.size();
  }
  return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n,s:L,s:L,s:L,s:L,s:L,s:L}", "factors",
                       (Py_ssize_t)nf, "symbolic",
                       (Py_ssize_t)ns, "aliases", (Py_ssize_t)na, "patterns", (Py_ssize_t)np_,
                       "loop_factors", (Py_ssize_t)nl, "slots", (Py_ssize_t)nsl,
                       "factorizations", (long long)g_loop_factorizations.load(),
                       "reuses", (long long)g_loop_reuses.load(),
                       "forward_solves",
                       (long long)g_forward.load(), "transpose_solves",
                       (long long)g_transpose.load(), "fallbacks", (long long)g_fallbacks.load(),
                       "native_calls", (long long)g_native_solves.load());
}

// the counters since the last drain, zeroed in the same atomic step (no solve is lost)
PyObject* py_drain_counts(PyObject*, PyObject*) {
  long long f = g_forward.exchange(0), t = g_transpose.exchange(0);
  long long b = g_fallbacks.exchange(0), c = g_native_solves.exchange(0);
  long long m = g_loop_factorizations.exchange(0), r = g_loop_reuses.exchange(0);
  long long peak;
  {
    std::lock_guard<std::mutex> g(g_lock);
    peak = g_peak_live;
    g_peak_live = 0;
    note_peak();   // what is alive now starts the next peak
  }
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "forward_solves", f, "transpose_solves",
                       t, "fallbacks", b, "native_calls", c, "factorizations", m, "reuses", r,
                       "peak_live", peak);
}

// ----- XLA FFI ------------------------------------------------------------------------------------
// The fallback adjoints.jax registers: answers one call as the Python callback would (misses,
// non-finite input, errors). bufs: keys, values, b, x.
struct LxBuf {
  void* data;
  int64_t rank;
  const int64_t* dims;
  int32_t dtype;
};
// fallback(id, buffers, number of buffers, message, its capacity, XLA error code) -> 0 or 1
typedef int32_t (*fallback_fn)(int64_t, const LxBuf*, int64_t, char*, int64_t, int32_t*);
std::atomic<fallback_fn> g_fallback{nullptr};

PyObject* py_set_fallback(PyObject*, PyObject* args) {
  unsigned long long addr;
  if (!PyArg_ParseTuple(args, "K", &addr)) return nullptr;
  g_fallback = reinterpret_cast<fallback_fn>(addr);
  Py_RETURN_NONE;
}

#ifdef LINOPS_WITH_XLA_FFI
namespace ffi = xla::ffi;

template <typename T>
bool all_finite(const T* p, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}

bool finite_buffer(const ffi::AnyBuffer& b) {
  size_t m = b.element_count();
  switch (b.element_type()) {
    case ffi::DataType::F32: return all_finite(static_cast<const float*>(b.untyped_data()), m);
    case ffi::DataType::F64: return all_finite(static_cast<const double*>(b.untyped_data()), m);
    case ffi::DataType::C64: return all_finite(static_cast<const float*>(b.untyped_data()), 2 * m);
    case ffi::DataType::C128:
      return all_finite(static_cast<const double*>(b.untyped_data()), 2 * m);
    default: return false;
  }
}

// element i (of a row-major buffer) as a complex double
inline std::complex<double> load(const void* p, ffi::DataType t, size_t i) {
  switch (t) {
    case ffi::DataType::F32: return static_cast<const float*>(p)[i];
    case ffi::DataType::F64: return static_cast<const double*>(p)[i];
    case ffi::DataType::C64: {
      const float* q = static_cast<const float*>(p) + 2 * i;
      return {q[0], q[1]};
    }
    default: {
      const double* q = static_cast<const double*>(p) + 2 * i;
      return {q[0], q[1]};
    }
  }
}

inline void store(void* p, ffi::DataType t, size_t i, std::complex<double> v) {
  switch (t) {
    case ffi::DataType::F32: static_cast<float*>(p)[i] = static_cast<float>(v.real()); break;
    case ffi::DataType::F64: static_cast<double*>(p)[i] = v.real(); break;
    case ffi::DataType::C64: {
      float* q = static_cast<float*>(p) + 2 * i;
      q[0] = static_cast<float>(v.real());
      q[1] = static_cast<float>(v.imag());
      break;
    }
    default: {
      double* q = static_cast<double*>(p) + 2 * i;
      q[0] = v.real();
      q[1] = v.imag();
    }
  }
}

bool is_complex(ffi::DataType t) { return t == ffi::DataType::C64 || t == ffi::DataType::C128; }

LxBuf lx(const ffi::AnyBuffer& b) {
  auto d = b.dimensions();
  return {b.untyped_data(), (int64_t)d.size(), d.begin(), (int32_t)b.element_type()};
}

// one call answered by the Python function registered under ``fid`` (its buffers in order:
// the operands, then the result it writes)
ffi::Error call_fallback(int64_t fid, const LxBuf* bufs, int64_t nbufs) {
  g_fallbacks++;
  fallback_fn fn = g_fallback.load();
  if (!fn)
    return ffi::Error(ffi::ErrorCode::kInternal,
                      "adjoints.jax native call: no Python fallback registered");
  std::vector<char> msg(8192, 0);
  int32_t errc = 9;
  int32_t st = fn(fid, bufs, nbufs, msg.data(), (int64_t)msg.size() - 1, &errc);
  if (st == 0) return ffi::Error::Success();
  return ffi::Error(static_cast<ffi::ErrorCode>(errc), std::string(msg.data()));
}

ffi::Error call_fallback(int64_t fid, ffi::Buffer<ffi::S32>& keys, ffi::AnyBuffer& values,
                         ffi::AnyBuffer& b, ffi::AnyBuffer x) {
  auto kd = keys.dimensions();
  LxBuf bufs[4] = {
      {keys.untyped_data(), (int64_t)kd.size(), kd.begin(), (int32_t)ffi::DataType::S32},
      lx(values), lx(b), lx(x)};
  return call_fallback(fid, bufs, 4);
}

// x = op(A)^-1 b for the factor each key names; the nbatch leading axes of keys, values and b
// broadcast (size 1 or the batch size); right-hand sides that share a key are one KLU call
// a cotangent solve of a site whose factorizations a loop slot made moved on to ``used``
void release_moved_on(int64_t fid, std::vector<int32_t> used) {
  used.erase(std::remove_if(used.begin(), used.end(), [](int32_t k) { return k >= 0; }),
             used.end());
  std::vector<std::shared_ptr<Factor>> dead;
  {
    std::lock_guard<std::mutex> g(g_lock);
    moved_on(fid, std::move(used), dead);
  }
  dead.clear();
}

ffi::Error KluSolveImpl(ffi::Buffer<ffi::S32> keys, ffi::AnyBuffer values, ffi::AnyBuffer b,
                        ffi::Result<ffi::AnyBuffer> xres, int64_t trans, int64_t nbatch,
                        int64_t fallback, int64_t release) {
  ffi::AnyBuffer x = *xres;
  auto kd = keys.dimensions();
  auto bd = b.dimensions();
  auto xd = x.dimensions();
  const int nb = static_cast<int>(nbatch);
  const ffi::DataType bt = b.element_type(), xt = x.element_type();
  if ((int64_t)bd.size() <= nb || (int64_t)kd.size() != nb + 1 || (int64_t)xd.size() != (int64_t)bd.size())
    return call_fallback(fallback, keys, values, b, x);
  const int64_t n = bd[nb];
  const int64_t k = (int64_t)bd.size() > nb + 1 ? bd[nb + 1] : 1;
  const int64_t core = n * k;
  const int32_t* kv = keys.typed_data();
  // the common case, a step of a loop: one key, one real right-hand side column in double
  // precision: solved in place in x, without a workspace
  if (nb == 0 && k == 1 && bt == ffi::DataType::F64 && xt == ffi::DataType::F64) {
    auto f = kv[0] ? find_alias(kv[0]) : nullptr;
    if (!f || f->cplx || f->n != n) return call_fallback(fallback, keys, values, b, x);
    const double* bp = static_cast<const double*>(b.untyped_data());
    double* xp = static_cast<double*>(x.untyped_data());
    bool finite = true;
    for (int64_t i = 0; i < n; ++i) {
      finite &= std::isfinite(bp[i]);
      xp[i] = bp[i];
    }
    if (!finite || !solve_inplace(*f, xp, 1, static_cast<int>(trans)) || !all_finite(xp, n))
      return call_fallback(fallback, keys, values, b, x);
    (trans == 0 ? g_forward : g_transpose)++;
    g_native_solves++;
    f.reset();
    if (release) release_moved_on(fallback, {kv[0]});
    return ffi::Error::Success();
  }
  int64_t L = 1;
  for (int a = 0; a < nb; ++a) L *= xd[a];
  // the key and the right-hand side of every batch member (broadcast strides)
  std::vector<int64_t> kidx(L), bidx(L);
  {
    std::vector<int64_t> ks(nb + 1, 1), bs(nb + 1, 1);
    for (int a = nb - 1; a >= 0; --a) {
      ks[a] = ks[a + 1] * kd[a];
      bs[a] = bs[a + 1] * bd[a];
    }
    for (int64_t l = 0; l < L; ++l) {
      int64_t rem = l, ki = 0, bi = 0;
      for (int a = nb - 1; a >= 0; --a) {
        int64_t i = rem % xd[a];
        rem /= xd[a];
        if (kd[a] != 1) ki += i * ks[a + 1];
        if (bd[a] != 1) bi += i * bs[a + 1];
      }
      kidx[l] = ki;
      bidx[l] = bi;
    }
  }
  std::map<int32_t, std::vector<int64_t>> groups;
  for (int64_t l = 0; l < L; ++l) groups[kv[kidx[l]]].push_back(l);
  std::vector<std::pair<std::shared_ptr<Factor>, const std::vector<int64_t>*>> work;
  for (auto& g : groups) {
    auto f = g.first ? find_alias(g.first) : nullptr;
    if (!f || f->n != n) return call_fallback(fallback, keys, values, b, x);
    work.emplace_back(std::move(f), &g.second);
  }
  if (!finite_buffer(b)) return call_fallback(fallback, keys, values, b, x);
  const void* bp = b.untyped_data();
  void* xp = x.untyped_data();
  const bool cb = is_complex(bt);
  thread_local std::vector<double> W;
  for (auto& item : work) {
    Factor& f = *item.first;
    const auto& members = *item.second;
    const int64_t m = static_cast<int64_t>(members.size());
    // columns: member-major, then b's columns; a real factor solves a complex b as (re, im)
    const int64_t cols = m * k * ((cb && !f.cplx) ? 2 : 1);
    const int w = f.cplx ? 2 : 1;
    W.resize(static_cast<size_t>(n * cols * w));
    for (int64_t mi = 0; mi < m; ++mi) {
      const int64_t base = bidx[members[mi]] * core;
      for (int64_t j = 0; j < k; ++j)
        for (int64_t i = 0; i < n; ++i) {
          std::complex<double> v = load(bp, bt, base + i * k + j);
          if (f.cplx) {
            double* q = &W[2 * (i + n * (mi * k + j))];
            q[0] = v.real();
            q[1] = v.imag();
          } else if (cb) {
            W[i + n * (2 * (mi * k + j))] = v.real();
            W[i + n * (2 * (mi * k + j) + 1)] = v.imag();
          } else {
            W[i + n * (mi * k + j)] = v.real();
          }
        }
    }
    if (!solve_inplace(f, W.data(), static_cast<int>(cols), static_cast<int>(trans)))
      return call_fallback(fallback, keys, values, b, x);
    if (!all_finite(W.data(), W.size())) return call_fallback(fallback, keys, values, b, x);
    for (int64_t mi = 0; mi < m; ++mi) {
      const int64_t base = members[mi] * core;
      for (int64_t j = 0; j < k; ++j)
        for (int64_t i = 0; i < n; ++i) {
          std::complex<double> v;
          if (f.cplx) {
            const double* q = &W[2 * (i + n * (mi * k + j))];
            v = {q[0], q[1]};
          } else if (cb) {
            v = {W[i + n * (2 * (mi * k + j))], W[i + n * (2 * (mi * k + j) + 1)]};
          } else {
            v = W[i + n * (mi * k + j)];
          }
          store(xp, xt, base + i * k + j, v);
        }
    }
    (trans == 0 ? g_forward : g_transpose)++;
  }
  g_native_solves++;
  if (release) {
    std::vector<int32_t> used;
    for (auto& grp : groups) used.push_back(grp.first);
    work.clear();
    release_moved_on(fallback, std::move(used));
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(LinopsKluSolve, KluSolveImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("trans")
                                  .Attr<int64_t>("nbatch")
                                  .Attr<int64_t>("fallback")
                                  .Attr<int64_t>("release"));

// keys[l] = a loop key of the KLU factorization of values[l] (the leading axes of values are a
// batch; the last one holds the pattern's nnz values in CSR order) on the slot's analysis: the
// slot's last key for that member where the values are the same bit for bit (a matrix built
// anew but unchanged at every step: reused, as the live store finds a factorization by its
// values), else a new factorization with the checks solvers' KLU init makes (finite values, a
// factor, pivot_check). The slot's lifetime policy: see "loop slots". Anything else is
// answered by the Python fallback (values, keys): the named error, or a factorization of the
// live store.
ffi::Error KluFactorizeImpl(ffi::RunId run, ffi::AnyBuffer values,
                            ffi::Result<ffi::Buffer<ffi::S32>> kres, int64_t slot,
                            int64_t fallback) {
  auto kb = *kres;
  int32_t* out = kb.typed_data();
  LxBuf bufs[2] = {lx(values), {kb.untyped_data(), (int64_t)kb.dimensions().size(),
                                kb.dimensions().begin(), (int32_t)ffi::DataType::S32}};
  std::shared_ptr<Symbolic> sym;
  double tol = 1.0, rtol = 0.0;
  int pending = 0;
  std::vector<int32_t> last;
  std::vector<std::shared_ptr<const std::vector<double>>> last_vals;
  std::vector<std::shared_ptr<Factor>> dead;
  // the last factorizations of the other slots of this analysis (and tolerances), with their
  // values: a loop whose matrix another loop of the program factorized (the value's, the
  // gradient's and the Hessian-vector product's loops over one matrix) shares that factor
  std::vector<std::pair<std::shared_ptr<const std::vector<double>>, std::shared_ptr<Factor>>>
      others;
  bool gone = false;
  {
    std::lock_guard<std::mutex> g(g_lock);
    auto it = g_slots.find(slot);
    gone = it == g_slots.end();   // Python is called after the lock is let go
    if (!gone) {
      Slot& sl = it->second;
      enter_run(run.run_id, false, dead);   // earlier runs' factorizations: done with
      if (!sl.has_run || sl.run != run.run_id) {
        clear_slot(slot, sl, dead);
        sl.has_run = true;
        sl.run = run.run_id;
      }
      for (auto& [oid, o] : g_slots) {
        if (oid == slot || o.sym != sl.sym || o.tol != sl.tol || o.rtol != sl.rtol) continue;
        for (size_t m = 0; m < o.last.size() && m < o.last_vals.size(); ++m) {
          auto k = g_loop_keys.find(o.last[m]);
          if (k == g_loop_keys.end() || !o.last_vals[m] || others.size() >= kSharedMax) continue;
          auto f = g_factor.find(k->second.factor);
          if (f != g_factor.end()) others.emplace_back(o.last_vals[m], f->second);
        }
      }
      sym = sl.sym;
      tol = sl.tol;
      rtol = sl.rtol;
      pending = sl.pending;
      last = sl.last;
      last_vals = sl.last_vals;
    }
  }
  if (gone) return call_fallback(fallback, bufs, 2);
  dead.clear();
  const ffi::DataType t = values.element_type();
  const bool cplx = is_complex(t);
  const int w = cplx ? 2 : 1;
  const int64_t nnz = sym->nnz;
  const int64_t count = static_cast<int64_t>(values.element_count());
  if (nnz <= 0 || count % nnz != 0 || static_cast<int64_t>(kb.element_count()) != count / nnz ||
      !(t == ffi::DataType::F32 || t == ffi::DataType::F64 || cplx))
    return call_fallback(fallback, bufs, 2);
  const int64_t members = count / nnz;
  const bool same_shape = static_cast<int64_t>(last.size()) == members;
  std::vector<std::shared_ptr<Factor>> made(members);     // null: the member reuses its key
  int64_t shared = 0;                                      // made[l] another slot's factor
  std::vector<std::shared_ptr<const std::vector<double>>> vals(members);
  const void* src = values.untyped_data();
  for (int64_t l = 0; l < members; ++l) {
    auto v = std::make_shared<std::vector<double>>(static_cast<size_t>(nnz) * w);
    bool finite = true;
    for (int64_t e = 0; e < nnz; ++e) {
      const std::complex<double> z = load(src, t, l * nnz + e);
      (*v)[e * w] = z.real();
      if (cplx) (*v)[e * w + 1] = z.imag();
      finite &= std::isfinite(z.real()) && std::isfinite(z.imag());
    }
    vals[l] = v;
    if (!finite) return call_fallback(fallback, bufs, 2);
    if (same_shape && last_vals[l] && *last_vals[l] == *v) continue;   // reused below
    for (auto& [ov, of] : others)
      if (of->cplx == cplx && *ov == *v) {   // another slot's factorization of these values
        made[l] = of;
        ++shared;
        break;
      }
    if (made[l]) continue;
    int status = 0, rank = -1, col = -1;
    auto f = make_klu_factor(sym, v->data(), cplx, tol, &status, &rank, &col);
    if (!f || !pivots_pass(*f, rtol)) return call_fallback(fallback, bufs, 2);
    made[l] = std::move(f);
  }
  int64_t reused = 0;
  bool refused = false;   // the slot is gone, or a key to reuse was released meanwhile (a
  {                       // cotangent solve of another run): rare; Python factorizes, after
    std::lock_guard<std::mutex> g(g_lock);   // the lock is let go, and nothing is inserted
    auto it = g_slots.find(slot);
    refused = it == g_slots.end();
    for (int64_t l = 0; l < members && !refused; ++l) {
      if (made[l]) continue;   // the same values as the member's last key: alive?
      auto k = g_loop_keys.find(last[l]);
      refused = k == g_loop_keys.end() || k->second.slot != slot;
    }
    if (!refused) {
      Slot& sl = it->second;
      std::vector<int32_t> keys(members);
      for (int64_t l = 0; l < members; ++l) {
        if (!made[l]) {
          keys[l] = last[l];
          ++reused;
          continue;
        }
        const int64_t id = new_id();
        g_factor[id] = std::move(made[l]);
        const int32_t key = new_loop_key();
        g_alias[key] = id;
        g_aliases_of[id] = {key};
        g_loop_keys[key] = LoopKey{id, slot, pending};
        if (pending > 0) sl.made.push_back(key);
        keys[l] = key;
      }
      note_peak();
      // the pin moves: nothing comes back for the previous keys this call did not keep
      if (pending == 0)
        for (int32_t k : sl.last)
          if (std::find(keys.begin(), keys.end(), k) == keys.end()) drop_loop_key(k, dead, slot);
      sl.last = keys;
      sl.last_vals = vals;
      std::copy(keys.begin(), keys.end(), out);
      if (sl.made.size() >= sl.prune_at) {   // keys the cotangent solves released: forget them
        sl.made.erase(std::remove_if(sl.made.begin(), sl.made.end(), [&](int32_t k) {
                        auto e = g_loop_keys.find(k);
                        return e == g_loop_keys.end() || e->second.slot != slot;
                      }), sl.made.end());
        // amortized: the next pass once as many more were made (a forward loop of a gradient
        // keeps every key alive: a pass at every step was quadratic in the steps)
        sl.prune_at = std::max<size_t>(4096, 2 * sl.made.size());
      }
    }
  }
  if (refused) {
    made.clear();
    others.clear();
    return call_fallback(fallback, bufs, 2);
  }
  dead.clear();
  others.clear();
  g_loop_factorizations += members - reused - shared;
  g_loop_reuses += reused + shared;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(LinopsKluFactorize, KluFactorizeImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::RunId>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("slot")
                                  .Attr<int64_t>("fallback"));
// out[e] = sum_j U[rows[e], j] V[cols[e], j] on a registered pattern (no conjugation): the
// values' cotangent of a solve or product, run inside a compiled loop without Python. U and V
// are (n,) or (n, k) row-major, both float64 or both complex128 (the lowering checks).
template <typename T>
void sddmm_kernel(const PatternData& p, const T* U, const T* V, T* out, int64_t k) {
  const int64_t nnz = static_cast<int64_t>(p.rows.size());
  for (int64_t e = 0; e < nnz; ++e) {
    const T* u = U + static_cast<int64_t>(p.rows[e]) * k;
    const T* v = V + static_cast<int64_t>(p.cols[e]) * k;
    T acc = T(0);
    for (int64_t j = 0; j < k; ++j) acc += u[j] * v[j];
    out[e] = acc;
  }
}

ffi::Error SddmmImpl(ffi::AnyBuffer U, ffi::AnyBuffer V, ffi::Result<ffi::AnyBuffer> res,
                     int64_t pattern) {
  std::shared_ptr<const PatternData> held;
  {
    std::lock_guard<std::mutex> g(g_lock);
    auto it = g_pattern.find(pattern);
    if (it == g_pattern.end())
      return ffi::Error(ffi::ErrorCode::kInternal,
                        "adjoints.jax native SDDMM: no pattern registered under this id");
    held = it->second;
  }
  const PatternData& p = *held;
  ffi::AnyBuffer out = *res;
  auto ud = U.dimensions();
  auto vd = V.dimensions();
  const int64_t k = ud.size() == 2 ? ud[1] : 1;
  const int64_t vk = vd.size() == 2 ? vd[1] : 1;
  const ffi::DataType t = U.element_type();
  if (ud.size() < 1 || ud.size() > 2 || vd.size() != ud.size() || k != vk ||
      ud[0] != p.nrows || vd[0] != p.ncols || V.element_type() != t || out.element_type() != t ||
      out.element_count() != p.rows.size())
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "adjoints.jax native SDDMM: operands do not match the pattern");
  if (t == ffi::DataType::F64) {
    sddmm_kernel(p, static_cast<const double*>(U.untyped_data()),
                 static_cast<const double*>(V.untyped_data()),
                 static_cast<double*>(out.untyped_data()), k);
  } else if (t == ffi::DataType::C128) {
    using Z = std::complex<double>;
    sddmm_kernel(p, static_cast<const Z*>(U.untyped_data()), static_cast<const Z*>(V.untyped_data()),
                 static_cast<Z*>(out.untyped_data()), k);
  } else {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                      "adjoints.jax native SDDMM: float64 or complex128 operands only");
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(LinopsSddmm, SddmmImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("pattern"));
#endif

PyObject* py_ffi_handlers(PyObject*, PyObject*) {
  PyObject* d = PyDict_New();
#ifdef LINOPS_WITH_XLA_FFI
  PyObject* cap = PyCapsule_New(reinterpret_cast<void*>(&LinopsKluSolve), nullptr, nullptr);
  PyDict_SetItemString(d, "linops_klu_solve", cap);
  Py_DECREF(cap);
  cap = PyCapsule_New(reinterpret_cast<void*>(&LinopsKluFactorize), nullptr, nullptr);
  PyDict_SetItemString(d, "linops_klu_factorize", cap);
  Py_DECREF(cap);
  cap = PyCapsule_New(reinterpret_cast<void*>(&LinopsSddmm), nullptr, nullptr);
  PyDict_SetItemString(d, "linops_sddmm", cap);
  Py_DECREF(cap);
#endif
  return d;
}

PyObject* py_versions(PyObject*, PyObject*) {
#ifdef LINOPS_WITH_XLA_FFI
  int ffi_major = XLA_FFI_API_MAJOR, ffi_minor = XLA_FFI_API_MINOR;
#else
  int ffi_major = -1, ffi_minor = -1;
#endif
  return Py_BuildValue("{s:(iii),s:(ii)}", "klu", KLU_MAIN_VERSION, KLU_SUB_VERSION,
                       KLU_SUBSUB_VERSION, "xla_ffi", ffi_major, ffi_minor);
}

PyMethodDef methods[] = {
    {"analyze", py_analyze, METH_VARARGS, "analyze(n, indptr, indices, ordering) -> handle"},
    {"symbolic_info", py_symbolic_info, METH_VARARGS, "symbolic_info(handle) -> dict"},
    {"free_symbolic", py_free_symbolic, METH_VARARGS, "free_symbolic(handle)"},
    {"factor", py_factor, METH_VARARGS,
     "factor(symbolic, values[, tol]) -> (handle or 0, status, numerical_rank, singular_col)"},
    {"free_factor", py_free_factor, METH_VARARGS, "free_factor(handle)"},
    {"adopt_cholmod", py_adopt_cholmod, METH_VARARGS,
     "adopt_cholmod(address) -> handle (0: not taken): a native copy of a real CHOLMOD factor"},
    {"solve", py_solve, METH_VARARGS, "solve(handle, X, trans) in place (0 N, 1 T, 2 H)"},
    {"pivots", py_pivots, METH_VARARGS, "pivots(handle, out): the pivots R[k] U[k, k] (unscaled)"},
    {"logdet", py_logdet, METH_VARARGS, "logdet(handle) -> (sign.real, sign.imag, log|det|)"},
    {"factor_info", py_factor_info, METH_VARARGS, "factor_info(handle) -> dict"},
    {"alias", py_alias, METH_VARARGS, "alias(key, handle)"},
    {"unalias", py_unalias, METH_VARARGS, "unalias(key)"},
    {"counts", py_counts, METH_NOARGS, "counts() -> dict"},
    {"enter_run", py_enter_run, METH_O,
     "enter_run(run or None): free what loop slots made in other runs (None: in every run)"},
    {"set_store_live", py_set_store_live, METH_O,
     "set_store_live(n): the live store's size, for peak_live"},
    {"drain_counts", py_drain_counts, METH_NOARGS, "drain_counts() -> the counters, zeroed"},
    {"set_fallback", py_set_fallback, METH_VARARGS, "set_fallback(address)"},
    {"register_pattern", py_register_pattern, METH_VARARGS,
     "register_pattern(rows, cols, nrows, ncols) -> id (int32 arrays, copied; kept for the process)"},
    {"make_slot", py_make_slot, METH_VARARGS,
     "make_slot(symbolic, tol, rtol) -> id: a loop slot for the FFI factorize"},
    {"slot_pending", py_slot_pending, METH_VARARGS,
     "slot_pending(id, delta): the slot's cotangent consumers"},
    {"free_slot", py_free_slot, METH_VARARGS, "free_slot(id): the slot and its factors"},
    {"forget_consumer", py_forget_consumer, METH_VARARGS,
     "forget_consumer(fallback id): a dropped consumer's last keys"},
    {"ffi_handlers", py_ffi_handlers, METH_NOARGS, "ffi_handlers() -> {name: capsule}"},
    {"versions", py_versions, METH_NOARGS, "versions() -> dict"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "solvers._native",
                      "SuiteSparse KLU factors and XLA FFI handlers (see native/linops_native.cpp)",
                      -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
