//go:build cuda

// goddp's small cgo binding of cublasLt: one column-major matmul D = alpha·op(A)·op(B) + beta·D
// with f32 compute and an epilogue (Plan), its algorithm from cublasLt's heuristic under a
// workspace limit (Handle.Algo), and the matmul on a stream (Handle.Matmul). All of its cgo is
// this one file; scripts/cudastub/cublaslt.go.txt mirrors its API for the type-check on machines
// without CUDA. Run on H100s since session 11 (Algos, GODDP_LT_TUNE's, not yet).
//
// Descriptors are made and destroyed around each call (host work of a few microseconds; the
// caller caches the algorithm per Plan shape, which is what costs). Device addresses travel as
// uint64; every call must run on an OS thread whose current context is the device's.

package cublaslt

/*
#cgo LDFLAGS: -lcublasLt
#include <cublasLt.h>
#include <string.h>

typedef struct {
	int epi;                  // cublasLtEpilogue_t
	int ta, tb;               // op(A), op(B) transposed
	int m, n, k;              // D is m×n, op(A) m×k, op(B) k×n
	int adt, bdt, ddt;        // tensor.DType codes: 0 f32, 1 f16, 3 bf16
	long long lda, ldb, ldd;
	int biasdt;               // tensor.DType code of the bias (gradient), -1: cublasLt's default (D's)
	unsigned long long bias, aux;
	long long auxld;
	unsigned int alignA, alignB, alignD; // bytes the addresses of A, B and D are aligned to (≤ 256)
} goddp_lt;

typedef struct {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, d;
} goddp_lt_descs;

static cudaDataType goddp_lt_dt(int dt) { return dt == 1 ? CUDA_R_16F : dt == 3 ? CUDA_R_16BF : CUDA_R_32F; }

static void goddp_lt_free(goddp_lt_descs *s) {
	if (s->a) cublasLtMatrixLayoutDestroy(s->a);
	if (s->b) cublasLtMatrixLayoutDestroy(s->b);
	if (s->d) cublasLtMatrixLayoutDestroy(s->d);
	if (s->op) cublasLtMatmulDescDestroy(s->op);
}

// goddp_lt_make describes p: the operation with its transposes and epilogue attributes, and the
// layouts of A and B as stored (m×k or k×m, k×n or n×k) and of D (m×n, also C: beta reads D).
static cublasStatus_t goddp_lt_make(const goddp_lt *p, goddp_lt_descs *s) {
	cublasStatus_t st;
	cublasOperation_t ta = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasLtEpilogue_t epi = (cublasLtEpilogue_t)p->epi;
	memset(s, 0, sizeof *s);
	if ((st = cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) != CUBLAS_STATUS_SUCCESS) return st;
	if ((st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) != CUBLAS_STATUS_SUCCESS) return st;
	if ((st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) != CUBLAS_STATUS_SUCCESS) return st;
	if ((st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)) != CUBLAS_STATUS_SUCCESS) return st;
	if (p->bias) {
		void *bias = (void *)p->bias;
		if ((st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias)) != CUBLAS_STATUS_SUCCESS) return st;
	}
	if (p->biasdt >= 0) {
		int32_t bt = (int32_t)goddp_lt_dt(p->biasdt);
		if ((st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt)) != CUBLAS_STATUS_SUCCESS) return st;
	}
	if (p->aux) {
		void *aux = (void *)p->aux;
		int64_t ld = p->auxld;
		if ((st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux)) != CUBLAS_STATUS_SUCCESS) return st;
		if ((st = cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld)) != CUBLAS_STATUS_SUCCESS) return st;
	}
	if ((st = cublasLtMatrixLayoutCreate(&s->a, goddp_lt_dt(p->adt), p->ta ? p->k : p->m, p->ta ? p->m : p->k, p->lda)) != CUBLAS_STATUS_SUCCESS) return st;
	if ((st = cublasLtMatrixLayoutCreate(&s->b, goddp_lt_dt(p->bdt), p->tb ? p->n : p->k, p->tb ? p->k : p->n, p->ldb)) != CUBLAS_STATUS_SUCCESS) return st;
	return cublasLtMatrixLayoutCreate(&s->d, goddp_lt_dt(p->ddt), p->m, p->n, p->ldd);
}

// goddp_lt_algos: up to max (≤ 16) of cublasLt's ranked algorithms for p within wsb bytes of
// workspace, best-ranked first, into algos (*found of them; 0 when there is none: an unsupported
// case, which the caller composes instead). A failure to describe p (descriptor, attribute or
// preference calls) is an error.
static cublasStatus_t goddp_lt_algos(cublasLtHandle_t h, const goddp_lt *p, size_t wsb, int max, cublasLtMatmulAlgo_t *algos, int *found) {
	goddp_lt_descs s;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res[16];
	int n = 0;
	cublasStatus_t st = goddp_lt_make(p, &s);
	*found = 0;
	if (max > 16) max = 16;
	if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
	uint32_t al[4] = {p->alignA, p->alignB, p->alignD, p->alignD};
	cublasLtMatmulPreferenceAttributes_t an[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
		st = cublasLtMatmulPreferenceSetAttribute(pref, an[i], &al[i], sizeof al[i]);
	if (st == CUBLAS_STATUS_SUCCESS) {
		memset(res, 0, sizeof res);
		st = cublasLtMatmulAlgoGetHeuristic(h, s.op, s.a, s.b, s.d, s.d, pref, max, res, &n);
		// No algorithm (NOT_SUPPORTED, or INVALID_VALUE for a combination this cublasLt refuses,
		// such as an auxiliary leading dimension it cannot use) is not an error: the caller composes.
		if (st != CUBLAS_STATUS_SUCCESS) { st = CUBLAS_STATUS_SUCCESS; n = 0; }
		for (int i = 0; i < n; i++)
			if (res[i].state == CUBLAS_STATUS_SUCCESS) algos[(*found)++] = res[i].algo;
	}
	if (pref) cublasLtMatmulPreferenceDestroy(pref);
	goddp_lt_free(&s);
	return st;
}

static cublasStatus_t goddp_lt_matmul(cublasLtHandle_t h, const goddp_lt *p, const cublasLtMatmulAlgo_t *algo,
		float alpha, float beta, unsigned long long a, unsigned long long b, unsigned long long d,
		unsigned long long ws, size_t wsb, void *stream) {
	goddp_lt_descs s;
	cublasStatus_t st = goddp_lt_make(p, &s);
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cublasLtMatmul(h, s.op, &alpha, (const void *)a, s.a, (const void *)b, s.b, &beta,
			(const void *)d, s.d, (void *)d, s.d, algo, (void *)ws, wsb, (cudaStream_t)stream);
	goddp_lt_free(&s);
	return st;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// The epilogues goddp uses, as cublasLtEpilogue_t.
const (
	EpiDefault     = int(C.CUBLASLT_EPILOGUE_DEFAULT)       // D = alpha·op(A)·op(B) + beta·D alone
	EpiBias        = int(C.CUBLASLT_EPILOGUE_BIAS)          // D = op(A)·op(B) + bias (bias has M entries)
	EpiGELUAuxBias = int(C.CUBLASLT_EPILOGUE_GELU_AUX_BIAS) // aux = op(A)·op(B) + bias, D = GELU(aux)
	EpiBGradB      = int(C.CUBLASLT_EPILOGUE_BGRADB)        // bias = the sums of op(B) over K: N entries
	EpiDGELUBGrad  = int(C.CUBLASLT_EPILOGUE_DGELU_BGRAD)   // D = GELU'(aux)⊙(op(A)·op(B)); bias = D's sums over N: M entries
)

// Plan is one matmul with its epilogue, column-major: D (M,N) = alpha·op(A)·op(B) + beta·D with
// op(A) (M,K) and op(B) (K,N). DTypes are tensor.DType codes (0 f32, 1 f16, 3 bf16); BiasDT -1
// leaves the bias's dtype to cublasLt (D's). Bias and Aux are device addresses (0: none);
// AlignA, AlignB and AlignD the bytes (a power of two, at most 256) that A's, B's and D's
// addresses are multiples of, which the heuristic must not assume more of.
type Plan struct {
	Epilogue               int
	TransA, TransB         bool
	M, N, K                int
	ADT, BDT, DDT, BiasDT  int
	LDA, LDB, LDD, AuxLD   int
	Bias, Aux              uint64
	AlignA, AlignB, AlignD int
}

func (p *Plan) c() C.goddp_lt {
	b := func(v bool) C.int {
		if v {
			return 1
		}
		return 0
	}
	return C.goddp_lt{epi: C.int(p.Epilogue), ta: b(p.TransA), tb: b(p.TransB), m: C.int(p.M), n: C.int(p.N), k: C.int(p.K),
		adt: C.int(p.ADT), bdt: C.int(p.BDT), ddt: C.int(p.DDT), lda: C.longlong(p.LDA), ldb: C.longlong(p.LDB),
		ldd: C.longlong(p.LDD), biasdt: C.int(p.BiasDT), bias: C.ulonglong(p.Bias), aux: C.ulonglong(p.Aux),
		auxld: C.longlong(p.AuxLD), alignA: C.uint(p.AlignA), alignB: C.uint(p.AlignB), alignD: C.uint(p.AlignD)}
}

// Algo is a cublasLtMatmulAlgo_t, opaque.
type Algo [8]uint64

// check describes a failed status; what names the call (a function, so that a success formats
// nothing).
func check(what func() string, st C.cublasStatus_t) error {
	if st == C.CUBLAS_STATUS_SUCCESS {
		return nil
	}
	return fmt.Errorf("cublaslt: %s: %s (%d)", what(), C.GoString(C.cublasLtGetStatusString(st)), int(st))
}

// Handle is a cublasLt handle.
type Handle struct{ h C.cublasLtHandle_t }

func New() (*Handle, error) {
	h := &Handle{}
	if err := check(func() string { return "cublasLtCreate" }, C.cublasLtCreate(&h.h)); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *Handle) Destroy() { C.cublasLtDestroy(h.h) }

// Algo is cublasLt's first-ranked algorithm for p within wsBytes of workspace; ok is false when
// cublasLt has none for it (an unsupported dtype mix, alignment or epilogue).
func (h *Handle) Algo(p *Plan, wsBytes int64) (a Algo, ok bool, err error) {
	as, err := h.Algos(p, wsBytes, 1)
	if err != nil || len(as) == 0 {
		return a, false, err
	}
	return as[0], true, nil
}

// Algos is up to max (at most 16) of cublasLt's ranked algorithms for p within wsBytes of
// workspace, best-ranked first (Algo's first among them); none when cublasLt has none for it.
// GODDP_LT_TUNE's candidates (model/cuda/lt_tune.go).
func (h *Handle) Algos(p *Plan, wsBytes int64, max int) ([]Algo, error) {
	cp := p.c()
	var ca [16]C.cublasLtMatmulAlgo_t
	var found C.int
	if unsafe.Sizeof(ca[0]) != unsafe.Sizeof(Algo{}) {
		return nil, fmt.Errorf("cublaslt: cublasLtMatmulAlgo_t is %d bytes, not %d", unsafe.Sizeof(ca[0]), unsafe.Sizeof(Algo{}))
	}
	max = min(max, len(ca))
	if err := check(func() string { return fmt.Sprintf("heuristics for %+v", *p) }, C.goddp_lt_algos(h.h, &cp, C.size_t(wsBytes), C.int(max), &ca[0], &found)); err != nil {
		return nil, err
	}
	as := make([]Algo, int(found))
	for i := range as {
		as[i] = *(*Algo)(unsafe.Pointer(&ca[i]))
	}
	return as, nil
}

// Matmul enqueues p with algorithm a (from Algo with the same shape) on stream: a, b and d are
// the operands' device addresses, ws the workspace of wsBytes.
func (h *Handle) Matmul(p *Plan, a Algo, alpha, beta float32, A, B, D, ws uint64, wsBytes int64, stream unsafe.Pointer) error {
	cp := p.c()
	ca := *(*C.cublasLtMatmulAlgo_t)(unsafe.Pointer(&a))
	return check(func() string { return fmt.Sprintf("cublasLtMatmul %+v", *p) }, C.goddp_lt_matmul(h.h, &cp, &ca, C.float(alpha), C.float(beta),
		C.ulonglong(A), C.ulonglong(B), C.ulonglong(D), C.ulonglong(ws), C.size_t(wsBytes), stream))
}
