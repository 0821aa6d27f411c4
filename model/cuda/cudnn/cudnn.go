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
