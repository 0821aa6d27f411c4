//go:build cuda && cudnn

// goddp's small cgo binding of cuDNN 9's convolutions (the legacy imperative
// API: cudnnConvolutionForward, cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter and
// the v7 heuristics that rank their algorithms), for the CUDA device's tensor.ConvDevice
// (model/cuda/conv.go). All of its cgo is this one file; scripts/cudastub/cudnn.go.txt mirrors
// its API for the type-check on machines without cuDNN.
//
// It builds only with the tags cuda and cudnn (`make cuda CUDA_TAGS=cuda,cudnn`), so a CUDA build
// without cuDNN still builds (its device then has no convolutions, as before). Not yet run on a
// GPU.
//
// Descriptors are made and destroyed around each call (host calls of a microsecond or two; the
// caller caches what costs: the algorithm and its workspace size per shape). Device addresses
// travel as uint64; every call must run on an OS thread whose current context is the device's.

package cudnn

/*
#cgo LDFLAGS: -lcudnn
#include <cudnn.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int n, c, h, w, k, r, s, ph, pw, sh, sw, oh, ow, nhwc, dt, tf32; } goddp_conv;
typedef struct {
	cudnnTensorDescriptor_t x, y;
	cudnnFilterDescriptor_t w;
	cudnnConvolutionDescriptor_t conv;
} goddp_descs;

static void goddp_descs_free(goddp_descs *d) {
	if (d->x) cudnnDestroyTensorDescriptor(d->x);
	if (d->y) cudnnDestroyTensorDescriptor(d->y);
	if (d->w) cudnnDestroyFilterDescriptor(d->w);
	if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
}

// goddp_descs_make describes x (n,c,h,w), y (n,k,oh,ow) and the filter (k,c,r,s), all in one
// layout (NHWC: the filter KRSC), f32 (dt 0) or f16 (dt 1) data with f32 accumulation; f16 may
// use tensor cores, f32 only with tf32 set (CUDNN_DEFAULT_MATH, which allows TF32 as PyTorch's
// default does), else never (CUDNN_FMA_MATH: no TF32, as the device's GEMMs).
static cudnnStatus_t goddp_descs_make(const goddp_conv *g, goddp_descs *d) {
	cudnnStatus_t st;
	cudnnTensorFormat_t f = g->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
	cudnnDataType_t t = g->dt ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
	memset(d, 0, sizeof *d);
	if ((st = cudnnCreateTensorDescriptor(&d->x)) != CUDNN_STATUS_SUCCESS) return st;
	if ((st = cudnnCreateTensorDescriptor(&d->y)) != CUDNN_STATUS_SUCCESS) return st;
	if ((st = cudnnCreateFilterDescriptor(&d->w)) != CUDNN_STATUS_SUCCESS) return st;
	if ((st = cudnnCreateConvolutionDescriptor(&d->conv)) != CUDNN_STATUS_SUCCESS) return st;
	if ((st = cudnnSetTensor4dDescriptor(d->x, f, t, g->n, g->c, g->h, g->w)) != CUDNN_STATUS_SUCCESS) return st;
	if ((st = cudnnSetTensor4dDescriptor(d->y, f, t, g->n, g->k, g->oh, g->ow)) != CUDNN_STATUS_SUCCESS) return st;
	if ((st = cudnnSetFilter4dDescriptor(d->w, t, f, g->k, g->c, g->r, g->s)) != CUDNN_STATUS_SUCCESS) return st;
	if ((st = cudnnSetConvolution2dDescriptor(d->conv, g->ph, g->pw, g->sh, g->sw, 1, 1,
			CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) != CUDNN_STATUS_SUCCESS) return st;
	return cudnnSetConvolutionMathType(d->conv, g->dt ? CUDNN_TENSOR_OP_MATH : g->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
}

#define GODDP_MAXALGO 16

// goddp_algo: the first algorithm the heuristics rank for op (0 forward, 1 backward data,
// 2 backward filter) that is deterministic and supported, and its workspace bytes; *algo = -1
// when there is none.
static cudnnStatus_t goddp_algo(cudnnHandle_t h, const goddp_conv *g, int op, int *algo, size_t *ws) {
	goddp_descs d;
	cudnnStatus_t st = goddp_descs_make(g, &d);
	int n = 0, i;
	*algo = -1;
	*ws = 0;
	if (st == CUDNN_STATUS_SUCCESS && op == 0) {
		cudnnConvolutionFwdAlgoPerf_t p[GODDP_MAXALGO];
		st = cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, GODDP_MAXALGO, &n, p);
		for (i = 0; st == CUDNN_STATUS_SUCCESS && i < n; i++)
			if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].determinism == CUDNN_DETERMINISTIC) { *algo = (int)p[i].algo; break; }
		if (st == CUDNN_STATUS_SUCCESS && *algo >= 0)
			st = cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, (cudnnConvolutionFwdAlgo_t)*algo, ws);
	} else if (st == CUDNN_STATUS_SUCCESS && op == 1) {
		cudnnConvolutionBwdDataAlgoPerf_t p[GODDP_MAXALGO];
		st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, GODDP_MAXALGO, &n, p);
		for (i = 0; st == CUDNN_STATUS_SUCCESS && i < n; i++)
			if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].determinism == CUDNN_DETERMINISTIC) { *algo = (int)p[i].algo; break; }
		if (st == CUDNN_STATUS_SUCCESS && *algo >= 0)
			st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, (cudnnConvolutionBwdDataAlgo_t)*algo, ws);
	} else if (st == CUDNN_STATUS_SUCCESS) {
		cudnnConvolutionBwdFilterAlgoPerf_t p[GODDP_MAXALGO];
		st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, GODDP_MAXALGO, &n, p);
		for (i = 0; st == CUDNN_STATUS_SUCCESS && i < n; i++)
			if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].determinism == CUDNN_DETERMINISTIC) { *algo = (int)p[i].algo; break; }
		if (st == CUDNN_STATUS_SUCCESS && *algo >= 0)
			st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, (cudnnConvolutionBwdFilterAlgo_t)*algo, ws);
	}
	goddp_descs_free(&d);
	return st;
}

// goddp_run: op 0 out = y from (a = x, b = w); op 1 out = dx from (a = w, b = dy); op 2 out = dw
// from (a = x, b = dy); out = 1·result + beta·out.
static cudnnStatus_t goddp_run(cudnnHandle_t h, const goddp_conv *g, int op, int algo,
		unsigned long long a, unsigned long long b, unsigned long long ws, size_t wsb, float beta, unsigned long long out) {
	goddp_descs d;
	float alpha = 1.0f;
	cudnnStatus_t st = goddp_descs_make(g, &d);
	if (st == CUDNN_STATUS_SUCCESS && op == 0)
		st = cudnnConvolutionForward(h, &alpha, d.x, (const void *)a, d.w, (const void *)b, d.conv,
			(cudnnConvolutionFwdAlgo_t)algo, (void *)ws, wsb, &beta, d.y, (void *)out);
	else if (st == CUDNN_STATUS_SUCCESS && op == 1)
		st = cudnnConvolutionBackwardData(h, &alpha, d.w, (const void *)a, d.y, (const void *)b, d.conv,
			(cudnnConvolutionBwdDataAlgo_t)algo, (void *)ws, wsb, &beta, d.x, (void *)out);
	else if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnConvolutionBackwardFilter(h, &alpha, d.x, (const void *)a, d.y, (const void *)b, d.conv,
			(cudnnConvolutionBwdFilterAlgo_t)algo, (void *)ws, wsb, &beta, d.w, (void *)out);
	goddp_descs_free(&d);
	return st;
}

// ---- the graph (backend) API: one execution plan per (operation, shape, beta), built once ----
//
// The legacy calls above cost the host ~200 µs each under cuDNN 9 (measured on an H100: 158 of
// them made a ResNet-50 step host-bound, docs/perf-resnet-gpu.md). A finalized execution plan is
// run with a variant pack of three pointers and a workspace, a few µs.

#define GODDP_CK(x) do { if ((st = (x)) != CUDNN_STATUS_SUCCESS) goto out; } while (0)
#define GODDP_NDESC 8

typedef struct {
	cudnnBackendDescriptor_t d[GODDP_NDESC]; // x, w, y, conv, op, graph, cfg, plan (kept for the plan's life)
	long long ws;
} goddp_plan;

void goddp_plan_free(goddp_plan *p) {
	int i;
	for (i = 0; i < GODDP_NDESC; i++)
		if (p->d[i]) cudnnBackendDestroyDescriptor(p->d[i]);
	free(p);
}

// goddp_tensor describes a 4-d tensor of logical dims (n, c, h, w) with its layout's strides,
// unique id uid, 16-byte aligned.
static cudnnStatus_t goddp_tensor(cudnnBackendDescriptor_t *t, long long uid, int dt, int nhwc, int n, int c, int h, int w) {
	cudnnStatus_t st;
	cudnnDataType_t ty = dt ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
	int64_t dims[4] = {n, c, h, w}, str[4], id = uid, al = 16;
	if (nhwc) { str[0] = (int64_t)h * w * c; str[1] = 1; str[2] = (int64_t)w * c; str[3] = c; }
	else { str[0] = (int64_t)c * h * w; str[1] = (int64_t)h * w; str[2] = w; str[3] = 1; }
	GODDP_CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
	GODDP_CK(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ty));
	GODDP_CK(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
	GODDP_CK(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
	GODDP_CK(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id));
	GODDP_CK(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al));
	GODDP_CK(cudnnBackendFinalize(*t));
out:
	return st;
}

// goddp_engine_ok: whether cfg's engine is deterministic, keeps f32 accumulation, and (for f32
// without tf32) uses no tensor cores: the legacy path's rules.
static int goddp_engine_ok(cudnnBackendDescriptor_t cfg, const goddp_conv *g) {
	cudnnBackendDescriptor_t e = NULL;
	cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
	int64_t n = 0, i;
	int ok = 0;
	if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) != CUDNN_STATUS_SUCCESS) return 0;
	if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) != CUDNN_STATUS_SUCCESS) goto done;
	if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
			CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS) goto done;
	ok = 1;
	for (i = 0; i < n; i++) {
		if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC || notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) ok = 0;
		if (g->dt == 0 && !g->tf32 && (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)) ok = 0;
	}
done:
	cudnnBackendDestroyDescriptor(e);
	return ok;
}

// goddp_plan_make: the plan of op (0 forward, 1 backward data, 2 backward filter) on g with
// out = result + beta·out: the first engine configuration heuristics mode A ranks that
// goddp_engine_ok takes and that finalizes. Tensor uids: x (or dx) 1, w (or dw) 2, y (or dy) 3.
// *tried is the number of configurations looked at.
static cudnnStatus_t goddp_plan_make(cudnnHandle_t h, const goddp_conv *g, int op, float beta, goddp_plan **pp, int *tried) {
	cudnnStatus_t st;
	goddp_plan *p = (goddp_plan *)calloc(1, sizeof *p);
	cudnnBackendDescriptor_t heur = NULL, cfgs[32];
	int64_t two[2], pre[2], post[2], dil[2] = {1, 1}, nsp = 2, n = 0, i, ncfg = 0;
	cudnnDataType_t comp = CUDNN_DATA_FLOAT;
	cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
	cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
	float alpha = 1.0f;
	static const cudnnBackendDescriptorType_t opType[3] = {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
		CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
	// per op: x, w, y, conv desc, alpha, beta attributes
	static const cudnnBackendAttributeName_t at[3][6] = {
		{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
		{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
		{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
	*pp = NULL;
	*tried = 0;
	if (!p) return CUDNN_STATUS_ALLOC_FAILED;
	two[0] = g->sh; two[1] = g->sw; pre[0] = post[0] = g->ph; pre[1] = post[1] = g->pw;
	GODDP_CK(goddp_tensor(&p->d[0], 1, g->dt, g->nhwc, g->n, g->c, g->h, g->w));
	GODDP_CK(goddp_tensor(&p->d[1], 2, g->dt, g->nhwc, g->k, g->c, g->r, g->s));
	GODDP_CK(goddp_tensor(&p->d[2], 3, g->dt, g->nhwc, g->n, g->k, g->oh, g->ow));
	GODDP_CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &p->d[3]));
	GODDP_CK(cudnnBackendSetAttribute(p->d[3], CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
	GODDP_CK(cudnnBackendSetAttribute(p->d[3], CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
	GODDP_CK(cudnnBackendSetAttribute(p->d[3], CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp));
	GODDP_CK(cudnnBackendSetAttribute(p->d[3], CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
	GODDP_CK(cudnnBackendSetAttribute(p->d[3], CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, two));
	GODDP_CK(cudnnBackendSetAttribute(p->d[3], CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pre));
	GODDP_CK(cudnnBackendSetAttribute(p->d[3], CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, post));
	GODDP_CK(cudnnBackendFinalize(p->d[3]));
	GODDP_CK(cudnnBackendCreateDescriptor(opType[op], &p->d[4]));
	GODDP_CK(cudnnBackendSetAttribute(p->d[4], at[op][0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->d[0]));
	GODDP_CK(cudnnBackendSetAttribute(p->d[4], at[op][1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->d[1]));
	GODDP_CK(cudnnBackendSetAttribute(p->d[4], at[op][2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->d[2]));
	GODDP_CK(cudnnBackendSetAttribute(p->d[4], at[op][3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->d[3]));
	GODDP_CK(cudnnBackendSetAttribute(p->d[4], at[op][4], CUDNN_TYPE_FLOAT, 1, &alpha));
	GODDP_CK(cudnnBackendSetAttribute(p->d[4], at[op][5], CUDNN_TYPE_FLOAT, 1, &beta));
	GODDP_CK(cudnnBackendFinalize(p->d[4]));
	GODDP_CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &p->d[5]));
	GODDP_CK(cudnnBackendSetAttribute(p->d[5], CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->d[4]));
	GODDP_CK(cudnnBackendSetAttribute(p->d[5], CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
	GODDP_CK(cudnnBackendFinalize(p->d[5]));
	GODDP_CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
	GODDP_CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->d[5]));
	GODDP_CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
	GODDP_CK(cudnnBackendFinalize(heur));
	GODDP_CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL));
	if (n > 32) n = 32;
	for (ncfg = 0; ncfg < n; ncfg++)
		GODDP_CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[ncfg]));
	GODDP_CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ncfg, &n, cfgs));
	st = CUDNN_STATUS_NOT_SUPPORTED;
	for (i = 0; i < n && i < ncfg; i++) {
		cudnnStatus_t s2;
		(*tried)++;
		if (!goddp_engine_ok(cfgs[i], g)) continue;
		if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p->d[7]) != CUDNN_STATUS_SUCCESS) continue;
		s2 = cudnnBackendSetAttribute(p->d[7], CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
		if (s2 == CUDNN_STATUS_SUCCESS)
			s2 = cudnnBackendSetAttribute(p->d[7], CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
		if (s2 == CUDNN_STATUS_SUCCESS) s2 = cudnnBackendFinalize(p->d[7]);
		if (s2 == CUDNN_STATUS_SUCCESS) {
			int64_t one = 0;
			s2 = cudnnBackendGetAttribute(p->d[7], CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &one, &p->ws);
		}
		if (s2 == CUDNN_STATUS_SUCCESS) {
			p->d[6] = cfgs[i];
			cfgs[i] = NULL;
			st = CUDNN_STATUS_SUCCESS;
			break;
		}
		cudnnBackendDestroyDescriptor(p->d[7]);
		p->d[7] = NULL;
	}
out:
	for (i = 0; i < ncfg; i++)
		if (cfgs[i]) cudnnBackendDestroyDescriptor(cfgs[i]);
	if (heur) cudnnBackendDestroyDescriptor(heur);
	if (st == CUDNN_STATUS_SUCCESS) *pp = p;
	else goddp_plan_free(p);
	return st;
}

// goddp_plan_run: p on (a, b, out) as goddp_run takes them, with ws (p->ws bytes).
static cudnnStatus_t goddp_plan_run(cudnnHandle_t h, goddp_plan *p, int op,
		unsigned long long a, unsigned long long b, unsigned long long out, unsigned long long ws) {
	cudnnStatus_t st;
	cudnnBackendDescriptor_t vp = NULL;
	void *ptrs[3], *wsp = (void *)ws;
	int64_t uids[3] = {1, 2, 3};
	if (op == 0) { ptrs[0] = (void *)a; ptrs[1] = (void *)b; ptrs[2] = (void *)out; }       // x, w, y
	else if (op == 1) { ptrs[0] = (void *)out; ptrs[1] = (void *)a; ptrs[2] = (void *)b; }  // dx, w, dy
	else { ptrs[0] = (void *)a; ptrs[1] = (void *)out; ptrs[2] = (void *)b; }               // x, dw, dy
	GODDP_CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
	GODDP_CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
	GODDP_CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
	GODDP_CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp));
	GODDP_CK(cudnnBackendFinalize(vp));
	st = cudnnBackendExecute(h, p->d[7], vp);
out:
	if (vp) cudnnBackendDestroyDescriptor(vp);
	return st;
}

static cudnnStatus_t goddp_handle(cudnnHandle_t *h, void *stream) {
	cudnnStatus_t st = cudnnCreate(h);
	if (st != CUDNN_STATUS_SUCCESS) return st;
	return cudnnSetStream(*h, (cudaStream_t)stream);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// The operations, as Algo and Run take them.
const (
	Forward        = 0 // y = x ⋆ w
	BackwardData   = 1 // dx from w and dy
	BackwardFilter = 2 // dw from x and dy
)

var opNames = [...]string{"forward", "backward data", "backward filter"}

// Conv is one convolution's shapes: x (N,C,H,W), filter (K,C,R,S), y (N,K,OH,OW), padding and
// stride per side, in NHWC (filter KRSC) or NCHW (filter KCRS); DType 0 f32, 1 f16 (f32
// accumulation either way); TF32 lets an f32 convolution use TF32 tensor cores. It is
// comparable: the caller's cache key.
type Conv struct {
	N, C, H, W, K, R, S, PadH, PadW, StrideH, StrideW, OH, OW int
	NHWC                                                      bool
	DType                                                     int
	TF32                                                      bool
}

func (c Conv) String() string {
	l := "nchw"
	if c.NHWC {
		l = "nhwc"
	}
	return fmt.Sprintf("x %d×%d×%d×%d ⋆ w %d×%d×%d×%d (pad %d,%d stride %d,%d) → %d×%d, %s dtype %d",
		c.N, c.C, c.H, c.W, c.K, c.C, c.R, c.S, c.PadH, c.PadW, c.StrideH, c.StrideW, c.OH, c.OW, l, c.DType)
}

func (c Conv) c() C.goddp_conv {
	b, tf := 0, 0
	if c.NHWC {
		b = 1
	}
	if c.TF32 {
		tf = 1
	}
	return C.goddp_conv{n: C.int(c.N), c: C.int(c.C), h: C.int(c.H), w: C.int(c.W), k: C.int(c.K), r: C.int(c.R), s: C.int(c.S),
		ph: C.int(c.PadH), pw: C.int(c.PadW), sh: C.int(c.StrideH), sw: C.int(c.StrideW), oh: C.int(c.OH), ow: C.int(c.OW),
		nhwc: C.int(b), dt: C.int(c.DType), tf32: C.int(tf)}
}

func check(op string, st C.cudnnStatus_t) error {
	if st == C.CUDNN_STATUS_SUCCESS {
		return nil
	}
	return fmt.Errorf("cudnn: %s: %s (%d)", op, C.GoString(C.cudnnGetErrorString(st)), int(st))
}

// Version is cudnnGetVersion: major·10000 + minor·100 + patch for cuDNN 9.
func Version() int { return int(C.cudnnGetVersion()) }

// Handle is a cuDNN handle bound to one stream.
type Handle struct{ h C.cudnnHandle_t }

// New makes a handle whose work goes on stream (a CUstream, as cudadrv.Stream.Ptr gives it).
func New(stream unsafe.Pointer) (*Handle, error) {
	h := &Handle{}
	if err := check("cudnnCreate", C.goddp_handle(&h.h, stream)); err != nil {
		return nil, err
	}
	return h, nil
}

// Destroy releases the handle.
func (h *Handle) Destroy() { C.cudnnDestroy(h.h) }

// Algo is the algorithm for op on c: the first that cuDNN's heuristics rank (cudnnGet…_v7) among
// the deterministic ones, so a step's results do not depend on timing, and its workspace bytes.
func (h *Handle) Algo(op int, c Conv) (algo int, workspace int64, err error) {
	cc := c.c()
	var a C.int
	var ws C.size_t
	if err := check("choosing the "+opNames[op]+" algorithm for "+c.String(), C.goddp_algo(h.h, &cc, C.int(op), &a, &ws)); err != nil {
		return 0, 0, err
	}
	if a < 0 {
		return 0, 0, fmt.Errorf("cudnn: no deterministic %s algorithm for %s", opNames[op], c)
	}
	return int(a), int64(ws), nil
}

// Run enqueues op on c with algo: Forward out (y) from a = x, b = w; BackwardData out (dx) from
// a = w, b = dy; BackwardFilter out (dw) from a = x, b = dy. out = result + beta·out; ws is a
// device workspace of wsBytes (0 when the algorithm needs none).
func (h *Handle) Run(op int, c Conv, algo int, a, b, ws uint64, wsBytes int64, beta float32, out uint64) error {
	cc := c.c()
	return check("convolution "+opNames[op]+" of "+c.String(), C.goddp_run(h.h, &cc, C.int(op), C.int(algo),
		C.ulonglong(a), C.ulonglong(b), C.ulonglong(ws), C.size_t(wsBytes), C.float(beta), C.ulonglong(out)))
}

// Plan is a finalized execution plan of one operation on one shape with one beta (the graph
// API: host cost per run a few µs, where a legacy call costs ~200 µs under cuDNN 9). Not yet run
// on a GPU.
type Plan struct {
	p         *C.goddp_plan
	op        int
	Workspace int64 // bytes Execute's workspace must have
	Tried     int   // engine configurations looked at before this one was taken
}

// NewPlan builds the plan of op on c with out = result + beta·out: the first engine
// configuration cuDNN's heuristics (mode A) rank that is deterministic, accumulates in f32 and,
// for f32 without TF32, uses no tensor cores — the legacy path's rules — and that finalizes.
func (h *Handle) NewPlan(op int, c Conv, beta float32) (*Plan, error) {
	cc := c.c()
	var p *C.goddp_plan
	var tried C.int
	if err := check("planning the "+opNames[op]+" of "+c.String(), C.goddp_plan_make(h.h, &cc, C.int(op), C.float(beta), &p, &tried)); err != nil {
		return nil, fmt.Errorf("%w (%d engine configurations looked at)", err, int(tried))
	}
	return &Plan{p: p, op: op, Workspace: int64(p.ws), Tried: int(tried)}, nil
}

// Execute enqueues p with the operands as Run takes them (a, b, out) and a workspace of
// p.Workspace bytes (0 when none), 16-byte aligned all.
func (h *Handle) Execute(p *Plan, a, b, ws, out uint64) error {
	return check("executing a "+opNames[p.op]+" plan", C.goddp_plan_run(h.h, p.p, C.int(p.op), C.ulonglong(a), C.ulonglong(b), C.ulonglong(out), C.ulonglong(ws)))
}

// Destroy releases the plan and its descriptors.
func (p *Plan) Destroy() {
	if p.p != nil {
		C.goddp_plan_free(p.p)
		p.p = nil
	}
}
