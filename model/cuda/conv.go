//go:build cuda && cudnn

package cuda

import (
	"fmt"
	"sync"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/cuda/cudnn"
	"github.com/goddp/goddp/model/tensor"
)

// The CUDA device's tensor.ConvDevice, tensor.SyncBatchNormDevice and tensor.BatchNormReLUDevice
// (issue 33; run on an H100, docs/perf-resnet-gpu.md): convolutions through cuDNN 9
// (model/cuda/cudnn), batch normalisation, pooling and the layout moves as kernels of this package
// (conv_kernels.go). Built with the tags cuda and cudnn; without cudnn the device has no
// convolutions (conv_off.go) and a ResNet is refused by name, as before.
//
// Convolution. The parameters keep PyTorch's (OC, C, KH, KW) filter in both layouts. NCHW hands
// it to cuDNN as it is (KCRS); NHWC first copies it channels last (KRSC) into a scratch tensor,
// which is what cuDNN's NHWC tensor-core kernels read. f16 convolutions accumulate in f32 and may
// use tensor cores; f32 ones use FMA only (no TF32, as the device's GEMMs) unless
// GODDP_CUDNN_TF32=1 (env.go) allows TF32, as PyTorch's torch.backends.cudnn.allow_tf32 does by
// default. Each (operation, shape, beta) gets one cuDNN execution plan, built once (the graph
// API; GODDP_CUDNN_GRAPH=0 takes the legacy calls, whose host cost is ~200 µs each), its engine
// the first that the heuristics rank among the deterministic ones. The filter gradient comes out
// of cuDNN in the data's dtype and layout into scratch and is added into the f32 dw (PyTorch's
// AMP does the same: its f16 filter gradient is cast into the f32 parameter's). Workspaces come
// from the device's caching allocator, so the memory report sees them, and are freed after the
// call (stream order makes the reuse safe).
//
// Batch norms. The per-channel sums are split over row chunks (k_chan_part8 or k_chan_part, cut
// by chanPlan to fill the GPU; GODDP_BN_SPLIT=0 runs one block per channel tile), the statistics
// in one f64 pass; the elementwise passes are 8-wide where NHWC has channels in eights; a ReLU
// after a batch norm is folded into its passes (BatchNormReLU).

var (
	_ tensor.ConvDevice          = (*Device)(nil)
	_ tensor.SyncBatchNormDevice = (*Device)(nil)
	_ tensor.BatchNormReLUDevice = (*Device)(nil)
)

// optPtr is t's device pointer, or 0 for a nil t (a kernel's optional argument).
func optPtr(t *tensor.Tensor) uint64 {
	if t == nil {
		return nilPtr
	}
	return ptra(t)
}

// convState is the device's cuDNN handle, its conv kernels' module and the algorithm cache.
type convState struct {
	h      *cudnn.Handle
	module cudadrv.Module
	mu     sync.Mutex
	algos  map[convKey]convAlgo
	plans  map[planKey]*cudnn.Plan // the graph API's execution plans (GODDP_CUDNN_GRAPH); nil: none, legacy
	misses []string                // why each nil plan is nil
	// krsc: NHWC filters' channels-last copies by the filter's address, while CacheConvFilters
	// is on (a training forward to the end of its backward); nil when off.
	krsc map[uint64]*tensor.Tensor
}

type planKey struct {
	convKey
	beta float32
}

type convKey struct {
	c  cudnn.Conv
	op int
}

type convAlgo struct {
	algo int
	ws   int64
}

// initConv loads the conv kernels and makes the cuDNN handle on the compute stream (New).
func (d *Device) initConv() error {
	ptx, err := d.compileLaunched(convKernelSource, []string{fmt.Sprintf("--gpu-architecture=compute_%d%d", d.major, d.minor), "-default-device", "--std=c++17"})
	if err != nil {
		return err
	}
	cs := &convState{algos: map[convKey]convAlgo{}, plans: map[planKey]*cudnn.Plan{}}
	if cs.module, err = cudadrv.LoadPTX(ptx); err != nil {
		return fmt.Errorf("cuda: loading the convolution kernels' PTX: %w", err)
	}
	for _, m := range kernelNameRE.FindAllStringSubmatch(convKernelSource, -1) {
		f, err := cs.module.Function(m[1])
		if err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
		d.fns[m[1]] = f
	}
	if cs.h, err = cudnn.New(d.stream.Ptr()); err != nil {
		return fmt.Errorf("cuda: %w (cuDNN %d)", err, cudnn.Version())
	}
	d.conv = cs
	return nil
}

// closeConv releases what initConv made (Close, with the context current).
func (d *Device) closeConv() {
	if d.conv == nil {
		return
	}
	d.CacheConvFilters(false)
	for _, p := range d.conv.plans {
		if p != nil {
			p.Destroy()
		}
	}
	d.conv.h.Destroy()
	d.conv.module.Unload()
	d.conv = nil
}

// convDT is the kernels' and cuDNN's dtype code of t: 0 f32, 1 f16; bf16 is refused by name.
func convDT(op string, t *tensor.Tensor) int {
	switch t.DType() {
	case tensor.F32:
		return 0
	case tensor.F16:
		return 1
	}
	panic(fmt.Sprintf("cuda: %s of %s: convolutional networks run in f32 or f16 on this device (not %s)", op, t, t.DType()))
}

func nhwcArg(l tensor.Layout) uint64 {
	if l == tensor.NHWC {
		return 1
	}
	return 0
}

// algo is the cached algorithm of op on c.
func (d *Device) algo(op int, c cudnn.Conv) convAlgo {
	cs := d.conv
	k := convKey{c, op}
	cs.mu.Lock()
	a, ok := cs.algos[k]
	cs.mu.Unlock()
	if ok {
		return a
	}
	d.enter()
	algo, ws, err := cs.h.Algo(op, c)
	d.leave()
	if err != nil {
		panic("cuda: " + err.Error())
	}
	a = convAlgo{algo, ws}
	cs.mu.Lock()
	cs.algos[k] = a
	cs.mu.Unlock()
	return a
}

// plan is the cached execution plan of op on c with beta (the graph path, env.go's cudnnGraph),
// or nil where cuDNN offers none under the path's rules — then the legacy call runs it, as it
// did for some of ResNet-50's f32 shapes on the H100 (the graph path's first trainer run in f32
// panicked on one; which, the next GPU run's PlanMisses says). The miss is cached too.
func (d *Device) plan(op int, c cudnn.Conv, beta float32) *cudnn.Plan {
	cs := d.conv
	k := planKey{convKey{c, op}, beta}
	cs.mu.Lock()
	p, ok := cs.plans[k]
	cs.mu.Unlock()
	if ok {
		return p
	}
	d.enter()
	p, err := cs.h.NewPlan(op, c, beta)
	d.leave()
	cs.mu.Lock()
	if err != nil {
		p = nil
		cs.misses = append(cs.misses, err.Error())
	}
	cs.plans[k] = p
	cs.mu.Unlock()
	return p
}

// PlanMisses lists the convolutions the graph path left to the legacy calls (cuDNN offered no
// execution plan under its rules), one line each: diagnostics.
func (d *Device) PlanMisses() []string {
	if d.conv == nil {
		return nil
	}
	d.conv.mu.Lock()
	defer d.conv.mu.Unlock()
	return append([]string(nil), d.conv.misses...)
}

// graphPlan is the plan runConv takes, nil for the legacy call: the graph path on (the default),
// every operand 16-byte aligned (the plans' tensors say so), and a plan for the shape.
func (d *Device) graphPlan(op int, c cudnn.Conv, a, b *tensor.Tensor, beta float32, out *tensor.Tensor) *cudnn.Plan {
	if !cudnnGraph() || dptr(a)%16 != 0 || dptr(b)%16 != 0 || dptr(out)%16 != 0 {
		return nil
	}
	return d.plan(op, c, beta)
}

// runConv enqueues op on c into out (out = result + beta·out) with a workspace from the pool:
// through a cached execution plan (unless GODDP_CUDNN_GRAPH=0) where every operand is 16-byte
// aligned (the plans' tensors say so), else through the legacy call.
func (d *Device) runConv(op int, c cudnn.Conv, a, b *tensor.Tensor, beta float32, out *tensor.Tensor) {
	p := d.graphPlan(op, c, a, b, beta, out)
	var al convAlgo
	wsBytes := int64(0)
	if p != nil {
		wsBytes = p.Workspace
	} else {
		al = d.algo(op, c)
		wsBytes = al.ws
	}
	var ws *tensor.Tensor
	var wsp uint64
	if wsBytes > 0 {
		ws = d.Alloc(tensor.F32, "cudnn.workspace", int((wsBytes+3)/4))
		wsp = dptr(ws)
	}
	d.enter()
	end := d.profBegin("cudnn." + [...]string{"fwd", "bwd_data", "bwd_filter"}[op])
	var err error
	if p != nil {
		err = d.conv.h.Execute(p, dptr(a), dptr(b), wsp, dptr(out))
	} else {
		err = d.conv.h.Run(op, c, al.algo, dptr(a), dptr(b), wsp, al.ws, beta, dptr(out))
	}
	end()
	d.leave()
	if ws != nil {
		d.Free(ws)
	}
	if err != nil {
		panic("cuda: " + err.Error())
	}
}

// convOf checks y = conv(x, w) and describes it for cuDNN.
func convOf(op string, y, x, w *tensor.Tensor, g tensor.ConvGeom) cudnn.Conv {
	if err := g.Valid(); err != nil {
		panic("cuda: " + op + ": " + err.Error())
	}
	if len(w.Shape()) != 4 {
		panic(fmt.Sprintf("cuda: %s wants a 4-D filter: %s", op, w))
	}
	N, C, H, W := g.Layout.Dims(x.Shape())
	OC := w.Dim(0)
	OH, OW := g.OutHW(H, W)
	yn, yc, yh, yw := g.Layout.Dims(y.Shape())
	if w.Dim(1) != C || w.Dim(2) != g.KH || w.Dim(3) != g.KW || yn != N || yc != OC || yh != OH || yw != OW || OH < 1 || OW < 1 {
		panic(fmt.Sprintf("cuda: %s shapes: y %s = x %s ⋆ w %s with %+v (want y %v)", op, y, x, w, g, g.Layout.Shape(N, OC, OH, OW)))
	}
	dt := convDT(op, x)
	if w.DType() != x.DType() || y.DType() != x.DType() {
		panic(fmt.Sprintf("cuda: %s: x %s, w %s and y %s must share one dtype", op, x, w, y))
	}
	return cudnn.Conv{N: N, C: C, H: H, W: W, K: OC, R: g.KH, S: g.KW, PadH: g.Pad, PadW: g.Pad,
		StrideH: g.Stride, StrideW: g.Stride, OH: OH, OW: OW, NHWC: g.Layout == tensor.NHWC, DType: dt, TF32: dt == 0 && cudnnTF32()}
}

// filterFor is w as cuDNN reads it for c: w itself (KCRS) for NCHW, a KRSC copy for NHWC, the
// cached one while CacheConvFilters is on (the forward's, reused by the backward's data
// gradient and a checkpointed block's recomputation). The caller gives it back with dropFilter.
func (d *Device) filterFor(c cudnn.Conv, w *tensor.Tensor) *tensor.Tensor {
	if !c.NHWC {
		return w
	}
	if t, ok := d.conv.krsc[dptr(w)]; ok && t.Len() == w.Len() && t.DType() == w.DType() {
		return t
	}
	t := d.Alloc(w.DType(), "conv.w_krsc", c.K, c.R, c.S, c.C)
	d.launch1("k_w_krsc", w.Len(), ptra(t), ptra(w), dta(w), i32a(c.K), i32a(c.C), i32a(c.R*c.S))
	if d.conv.krsc != nil {
		if old, ok := d.conv.krsc[dptr(w)]; ok { // another tensor at w's address: not w's copy
			d.Free(old)
		}
		d.conv.krsc[dptr(w)] = t
	}
	return t
}

// dropFilter frees filterFor's wf unless it is w itself or cached.
func (d *Device) dropFilter(wf, w *tensor.Tensor) {
	if wf != w && d.conv.krsc[dptr(w)] != wf {
		d.Free(wf)
	}
}

// CacheConvFilters is tensor.ConvFilterCache's: on starts a cache of the NHWC filters'
// channels-last copies (dropping any before it), off frees them. A ResNet-50 step made 105
// copies (k_w_krsc, ~0.85 ms on an H100), half of them of filters its forward had copied.
func (d *Device) CacheConvFilters(on bool) {
	for _, t := range d.conv.krsc {
		d.Free(t)
	}
	d.conv.krsc = nil
	if on {
		d.conv.krsc = map[uint64]*tensor.Tensor{}
	}
}

func (d *Device) Conv2d(y, x, w, b *tensor.Tensor, g tensor.ConvGeom) {
	c := convOf("Conv2d", y, x, w, g)
	wf := d.filterFor(c, w)
	d.runConv(cudnn.Forward, c, x, wf, 0, y)
	d.dropFilter(wf, w)
	if b != nil {
		if b.Len() != c.K {
			panic(fmt.Sprintf("cuda: Conv2d: bias %s for %d output channels", b, c.K))
		}
		convDT("Conv2d bias", b)
		d.launch1("k_bias_add", y.Len(), ptra(y), dta(y), ptra(b), dta(b), nhwcArg(g.Layout), u64a(uint64(y.Len())), i32a(c.K), i32a(c.OH*c.OW))
	}
}

func (d *Device) Conv2dBackward(dx, dw, db, dy, x, w *tensor.Tensor, g tensor.ConvGeom) {
	c := convOf("Conv2dBackward", dy, x, w, g)
	if dx != nil {
		if !tensor.SameShape(dx, x) || dx.DType() != x.DType() {
			panic(fmt.Sprintf("cuda: Conv2dBackward: dx %s for x %s", dx, x))
		}
		wf := d.filterFor(c, w)
		d.runConv(cudnn.BackwardData, c, wf, dy, 0, dx)
		d.dropFilter(wf, w)
	}
	if dw != nil {
		if dw.DType() != tensor.F32 || dw.Len() != w.Len() {
			panic(fmt.Sprintf("cuda: Conv2dBackward: dw %s for w %s (want f32)", dw, w))
		}
		gw := d.Alloc(w.DType(), "conv.dw", w.Len())
		d.runConv(cudnn.BackwardFilter, c, x, dy, 0, gw)
		krsc := uint64(0)
		if c.NHWC {
			krsc = 1
		}
		d.launch1("k_dw_acc", w.Len(), ptra(dw), ptra(gw), dta(gw), i32a(c.K), i32a(c.C), i32a(c.R*c.S), krsc)
		d.Free(gw)
	}
	if db != nil {
		if db.DType() != tensor.F32 || db.Len() != c.K {
			panic(fmt.Sprintf("cuda: Conv2dBackward: db %s for %d output channels (want f32)", db, c.K))
		}
		d.chanTiles("k_chan_sum", g.Layout, c.K, ptra(db), ptra(dy), dta(dy), nhwcArg(g.Layout), i32a(c.N), i32a(c.K), i32a(c.OH*c.OW))
	}
}

// chanTiles launches a per-channel reduction over C channels: 32×8 tiles for NHWC, 1×256 for NCHW
// (conv_kernels.go).
func (d *Device) chanTiles(name string, l tensor.Layout, C int, args ...uint64) {
	bx, by := 1, 256
	if l == tensor.NHWC {
		bx, by = 32, 8
	}
	d.launch(name, [3]int{(C + bx - 1) / bx, 1, 1}, [3]int{bx, by, 1}, 0, args...)
}

// bnDims checks a batch norm's x against its per-channel tensors and returns N, C, P = H·W.
func bnDims(op string, l tensor.Layout, x *tensor.Tensor, perChannel ...*tensor.Tensor) (N, C, P int) {
	n, c, h, w := l.Dims(x.Shape())
	convDT(op, x)
	for _, t := range perChannel {
		if t != nil && (t.Len() != c || t.DType() != tensor.F32) {
			panic(fmt.Sprintf("cuda: %s: %s for %d channels of %s (want f32 per channel)", op, t, c, x))
		}
	}
	return n, c, h * w
}

func sameImage(op string, a, b *tensor.Tensor) {
	if !tensor.SameShape(a, b) || a.DType() != b.DType() {
		panic(fmt.Sprintf("cuda: %s: %s and %s must have one shape and dtype", op, a, b))
	}
}

func (d *Device) BatchNorm(l tensor.Layout, y, mean, rstd, runMean, runVar, x, w, b *tensor.Tensor, eps, momentum float32) {
	d.batchNorm(l, y, mean, rstd, runMean, runVar, x, w, b, eps, momentum, false)
}

// BatchNormReLU is tensor.BatchNormReLUDevice's forward: the batch norm's apply pass ReLUs what it
// writes (k_bn_apply's relu: the bits of BatchNorm then ReLU).
func (d *Device) BatchNormReLU(l tensor.Layout, y, mean, rstd, runMean, runVar, x, w, b *tensor.Tensor, eps, momentum float32) {
	d.batchNorm(l, y, mean, rstd, runMean, runVar, x, w, b, eps, momentum, true)
}

// FusesBatchNormReLU reports whether the ResNet should take BatchNormReLU(Backward):
// on unless GODDP_BN_RELU=0 (env.go), with the split reductions, whose kernels take the mask.
func (d *Device) FusesBatchNormReLU() bool { return bnReLU() && bnSplit() }

// BatchNormReLUBackward is tensor.BatchNormReLUDevice's backward: dy masked by y > 0 inside the
// reductions and the elementwise pass (the bits of ReLUBackward then BatchNormBackward); dy is
// left as it was, except without the split reductions, where it is masked in place first.
func (d *Device) BatchNormReLUBackward(l tensor.Layout, dx, dw, db, dy, y, x, w, mean, rstd *tensor.Tensor) {
	sameImage("BatchNormReLUBackward", y, x)
	if !bnSplit() {
		d.ReLUBackward(dy, dy, y)
		d.BatchNormBackward(l, dx, dw, db, dy, x, w, mean, rstd)
		return
	}
	d.batchNormBackward(l, dx, dw, db, dy, x, w, mean, rstd, y)
}

func (d *Device) batchNorm(l tensor.Layout, y, mean, rstd, runMean, runVar, x, w, b *tensor.Tensor, eps, momentum float32, relu bool) {
	N, C, P := bnDims("BatchNorm", l, x, mean, rstd, runMean, runVar, w, b)
	sameImage("BatchNorm", y, x)
	fe := finExtra{fin: true, eps: eps, momentum: momentum, w: ptra(w), b: ptra(b)}
	if runMean != nil && runVar != nil {
		fe.run, fe.runMean, fe.runVar = true, ptra(runMean), ptra(runVar)
	}
	vec := bnVec8(l, C, y, x)
	var pack *tensor.Tensor
	if vec { // mean, rstd, w and b packed (4, C) for the 8-wide pass's vector loads
		pack = d.Alloc(tensor.F32, "bn.pack", 4*C)
		fe.pack = ptra(pack)
	}
	if bnSplit() { // the sums, then k_chan_fin finishes the statistics too (fe.fin)
		p := planChan(l, C, N*P, x, nil, nil)
		part := d.Alloc(tensor.F32, "bn.part", 4*p.S*C) // (2,S,C) f64
		d.chanPart(l, p, 0, N, C, P, x, nil, nil, nilPtr, nilPtr, part)
		d.chanFin(0, p, C, N*P, part, ptra(mean), ptra(rstd), nilPtr, nilPtr, fe)
		d.Free(part)
	} else { // rstd holds the variance until k_bn_finish
		d.chanTiles("k_bn_stats", l, C, ptra(x), dta(x), nhwcArg(l), i32a(N), i32a(C), i32a(P), ptra(mean), ptra(rstd))
		d.launch1("k_bn_finish", C, ptra(mean), ptra(rstd), fe.runMean, fe.runVar, i32a(b2i(fe.run)), i32a(C), u64a(uint64(N*P)),
			f32a(eps), f32a(momentum), fe.w, fe.b, fe.pack)
	}
	if vec {
		d.launch1("k_bn_apply8", x.Len()/8, ptra(y), ptra(x), dta(x), i32a(x.Len()/8), i32a(C), ptra(pack), i32a(b2i(relu)))
		d.Free(pack)
		return
	}
	d.launch1("k_bn_apply", x.Len(), ptra(y), ptra(x), dta(x), nhwcArg(l), u64a(uint64(x.Len())), i32a(C), i32a(P),
		ptra(mean), ptra(rstd), ptra(w), ptra(b), i32a(b2i(relu)))
}

// bnVec8 reports whether a batch norm's elementwise pass over ts takes the 8-wide kernel: asked
// for (unless GODDP_BN_VEC=0), NHWC with channels in eights, 16-byte aligned.
func bnVec8(l tensor.Layout, C int, ts ...*tensor.Tensor) bool {
	return bnVec() && l == tensor.NHWC && C%8 == 0 && vec8(ts[0].Len(), ts...)
}

func (d *Device) BatchNormInference(l tensor.Layout, y, x, w, b, runMean, runVar *tensor.Tensor, eps float32) {
	_, C, P := bnDims("BatchNormInference", l, x, w, b, runMean, runVar)
	sameImage("BatchNormInference", y, x)
	d.launch1("k_bn_infer", x.Len(), ptra(y), ptra(x), dta(x), nhwcArg(l), u64a(uint64(x.Len())), i32a(C), i32a(P),
		ptra(w), ptra(b), ptra(runMean), ptra(runVar), f32a(eps))
}

func (d *Device) BatchNormBackward(l tensor.Layout, dx, dw, db, dy, x, w, mean, rstd *tensor.Tensor) {
	d.batchNormBackward(l, dx, dw, db, dy, x, w, mean, rstd, nil)
}

// batchNormBackward is BatchNormBackward with dy taken as 0 where mask ≤ 0 when mask is set.
func (d *Device) batchNormBackward(l tensor.Layout, dx, dw, db, dy, x, w, mean, rstd, mask *tensor.Tensor) {
	N, C, P := bnDims("BatchNormBackward", l, x, dw, db, w, mean, rstd)
	sdy, sdyx := d.Alloc(tensor.F32, "bn.sdy", C), d.Alloc(tensor.F32, "bn.sdyx", C)
	var pack *tensor.Tensor
	if bnSplit() && bnVec8(l, C, dx, dy, x, mask) { // k_chan_fin packs the elemt pass's coefficients
		pack = d.Alloc(tensor.F32, "bn.pack", 5*C)
	}
	d.backwardReduce(l, sdy, sdyx, dw, db, dy, x, mean, rstd, mask, w, pack)
	d.backwardElemt(l, dx, dy, x, w, mean, rstd, sdy, sdyx, N*P, mask, pack)
	d.Free(sdy)
	d.Free(sdyx)
	if pack != nil {
		d.Free(pack)
	}
}

func (d *Device) BatchNormStats(l tensor.Layout, mean, variance, x *tensor.Tensor) {
	N, C, P := bnDims("BatchNormStats", l, x, mean, variance)
	if bnSplit() {
		p := planChan(l, C, N*P, x, nil, nil)
		part := d.Alloc(tensor.F32, "bn.part", 4*p.S*C) // (2,S,C) f64
		d.chanPart(l, p, 0, N, C, P, x, nil, nil, nilPtr, nilPtr, part)
		d.chanFin(0, p, C, N*P, part, ptra(mean), ptra(variance), nilPtr, nilPtr, finExtra{})
		d.Free(part)
		return
	}
	d.chanTiles("k_bn_stats", l, C, ptra(x), dta(x), nhwcArg(l), i32a(N), i32a(C), i32a(P), ptra(mean), ptra(variance))
}

// The split reductions' plan: enough blocks to fill a GPU (chanTargetBlocks over all channel
// tiles) with at least chanMinRows rows a chunk. Version 1 cut every batch norm into chunks of
// 4096 rows, which left ResNet-50's deep layers (2048 channels of 3136 rows: 8 blocks; 512 of
// 3136: 2) on a few SMs each: 55–65% of a step on the H100 (docs/perf-resnet-gpu.md). Variables
// only so that a test can split its small batches.
var (
	chanTargetBlocks = 512
	chanMinRows      = 64
)

// chanPlan is how k_chan_part (or k_chan_part8) and k_chan_fin cut a batch norm's M = N·P rows
// of C channels: tiles of bx channel threads (8 channels each when vec) × by row threads, S chunks
// of R rows. A function of the shape and the kernel alone, so the sums' order (and bits) do not
// depend on the GPU.
type chanPlan struct {
	vec           bool
	tiles, bx, by int
	S, R          int
}

func planChan(l tensor.Layout, C, M int, a, x, mask *tensor.Tensor) chanPlan {
	p := chanPlan{bx: 1, by: 256}
	if l == tensor.NHWC {
		p.bx, p.by = 32, 8
	}
	lanes := C
	if bnVec() && l == tensor.NHWC && C%8 == 0 && vec8(8, a, x, mask) { // eight channels a thread
		p.vec, lanes = true, C/8
		p.bx = min(32, lanes)
		p.by = 256 / p.bx
	}
	p.tiles = (lanes + p.bx - 1) / p.bx
	p.S = max(1, min((chanTargetBlocks+p.tiles-1)/p.tiles, M/chanMinRows))
	p.R = (M + p.S - 1) / p.S
	p.S = (M + p.R - 1) / p.R
	return p
}

// chanPart launches k_chan_part (what: 0 Σa and Σa², 2 Σa and Σa·x̂; a counted where mask > 0
// when mask is set) or k_chan_part8 as p says, into part (2, p.S, C) f64.
func (d *Device) chanPart(l tensor.Layout, p chanPlan, what, N, C, P int, a, x, mask *tensor.Tensor, mean, rstd uint64, part *tensor.Tensor) {
	xp, mp := optPtr(x), optPtr(mask)
	if p.vec {
		d.launch("k_chan_part8", [3]int{p.tiles, p.S, 1}, [3]int{p.bx, p.by, 1}, 0, i32a(what), ptra(a), xp, mp, dta(a),
			i32a(C), u64a(uint64(N*P)), u64a(uint64(p.R)), mean, rstd, ptra(part))
		return
	}
	d.launch("k_chan_part", [3]int{p.tiles, p.S, 1}, [3]int{p.bx, p.by, 1}, 0, i32a(what), ptra(a), xp, mp, dta(a), nhwcArg(l),
		i32a(N), i32a(C), i32a(P), u64a(uint64(p.R)), mean, rstd, ptra(part))
}

// finExtra is what k_chan_fin does after the sums besides writing them (zero: nothing): for
// the statistics (what 0) with fin, k_bn_finish's step (o2 becomes rstd; the running statistics
// when run; pack (4, C) when set, from w and b); for the backward sums (what 2) with pack set,
// k_bn_coef's pack (5, C) from w, mean, rstd and count.
type finExtra struct {
	fin, run               bool
	runMean, runVar        uint64
	eps, momentum, count   float32
	w, b, mean, rstd, pack uint64
}

// chanFin launches k_chan_fin over C channels: 32 channels × 8 lanes a block.
func (d *Device) chanFin(what int, p chanPlan, C, M int, part *tensor.Tensor, o1, o2, dw, db uint64, fe finExtra) {
	d.launch("k_chan_fin", [3]int{(C + 31) / 32, 1, 1}, [3]int{32, 8, 1}, 0, i32a(what), ptra(part), i32a(p.S), i32a(C),
		u64a(uint64(M)), o1, o2, dw, db, i32a(b2i(fe.fin)), fe.runMean, fe.runVar, i32a(b2i(fe.run)), f32a(fe.eps), f32a(fe.momentum),
		fe.w, fe.b, fe.mean, fe.rstd, f32a(fe.count), fe.pack)
}

func (d *Device) BatchNormBackwardReduce(l tensor.Layout, sdy, sdyx, dw, db, dy, x, mean, rstd *tensor.Tensor) {
	d.backwardReduce(l, sdy, sdyx, dw, db, dy, x, mean, rstd, nil, nil, nil)
}

// backwardReduce is BatchNormBackwardReduce with dy masked as batchNormBackward's; a mask
// needs the split reductions (k_bn_reduce has none). pack (5, C), when set (with the split
// reductions only), gets k_bn_coef's coefficients from w, for count N·P.
func (d *Device) backwardReduce(l tensor.Layout, sdy, sdyx, dw, db, dy, x, mean, rstd, mask, w, pack *tensor.Tensor) {
	N, C, P := bnDims("BatchNormBackwardReduce", l, x, sdy, sdyx, dw, db, mean, rstd)
	sameImage("BatchNormBackwardReduce", dy, x)
	var dwp, dbp uint64
	if dw != nil {
		dwp = ptra(dw)
	}
	if db != nil {
		dbp = ptra(db)
	}
	if bnSplit() {
		p := planChan(l, C, N*P, dy, x, mask)
		part := d.Alloc(tensor.F32, "bn.part", 4*p.S*C) // (2,S,C) f64
		d.chanPart(l, p, 2, N, C, P, dy, x, mask, ptra(mean), ptra(rstd), part)
		var fe finExtra
		if pack != nil {
			fe = finExtra{w: ptra(w), mean: ptra(mean), rstd: ptra(rstd), count: float32(N * P), pack: ptra(pack)}
		}
		d.chanFin(2, p, C, N*P, part, ptra(sdy), ptra(sdyx), dwp, dbp, fe)
		d.Free(part)
		return
	}
	if mask != nil {
		panic("cuda: BatchNormReLUBackward's mask without the split reductions (GODDP_BN_SPLIT=0)")
	}
	d.chanTiles("k_bn_reduce", l, C, ptra(dy), ptra(x), dta(x), nhwcArg(l), i32a(N), i32a(C), i32a(P),
		ptra(mean), ptra(rstd), ptra(sdy), ptra(sdyx), dwp, dbp)
}

func (d *Device) BatchNormBackwardElemt(l tensor.Layout, dx, dy, x, w, mean, rstd, sdy, sdyx *tensor.Tensor, count int) {
	d.backwardElemt(l, dx, dy, x, w, mean, rstd, sdy, sdyx, count, nil, nil)
}

// backwardElemt is BatchNormBackwardElemt with dy masked as batchNormBackward's; pack, when set,
// holds the coefficients already (k_chan_fin's), else the 8-wide pass computes them (k_bn_coef).
func (d *Device) backwardElemt(l tensor.Layout, dx, dy, x, w, mean, rstd, sdy, sdyx *tensor.Tensor, count int, mask, pack *tensor.Tensor) {
	_, C, P := bnDims("BatchNormBackwardElemt", l, x, w, mean, rstd, sdy, sdyx)
	sameImage("BatchNormBackwardElemt", dy, x)
	sameImage("BatchNormBackwardElemt", dx, x)
	mp := optPtr(mask)
	if bnVec8(l, C, dx, dy, x, mask) {
		if pack == nil { // the per-channel coefficients packed (5, C) for the 8-wide pass's vector loads
			pack = d.Alloc(tensor.F32, "bn.pack", 5*C)
			defer d.Free(pack)
			d.launch1("k_bn_coef", C, ptra(pack), ptra(w), ptra(mean), ptra(rstd), ptra(sdy), ptra(sdyx), i32a(C), f32a(float32(count)))
		}
		d.launch1("k_bn_elemt8", x.Len()/8, ptra(dx), ptra(dy), ptra(x), mp, dta(x), i32a(x.Len()/8), i32a(C), ptra(pack))
		return
	}
	d.launch1("k_bn_elemt", x.Len(), ptra(dx), ptra(dy), ptra(x), mp, dta(x), nhwcArg(l), u64a(uint64(x.Len())), i32a(C), i32a(P),
		ptra(w), ptra(mean), ptra(rstd), ptra(sdy), ptra(sdyx), f32a(float32(count)))
}

// poolDims checks a max pool's x against y and returns the geometry's sizes.
func poolDims(op string, y, x *tensor.Tensor, g tensor.ConvGeom) (N, C, H, W, OH, OW int) {
	if err := g.Valid(); err != nil {
		panic("cuda: " + op + ": " + err.Error())
	}
	N, C, H, W = g.Layout.Dims(x.Shape())
	OH, OW = g.OutHW(H, W)
	yn, yc, yh, yw := g.Layout.Dims(y.Shape())
	if yn != N || yc != C || yh != OH || yw != OW || y.DType() != x.DType() {
		panic(fmt.Sprintf("cuda: %s: y %s for x %s with %+v", op, y, x, g))
	}
	convDT(op, x)
	return
}

// AddReLU is tensor.AddReLUDevice's: out = max(a + b, 0) in one 8-wide pass (k_add_relu8) where
// the three share a dtype (f32 or f16), lengths in eights and 16-byte alignment and
// GODDP_BN_RELU is not 0; else Add then ReLU. The same bits either way.
func (d *Device) AddReLU(out, a, b *tensor.Tensor) {
	tensor.CheckLen("AddReLU", out, a, b)
	tensor.CheckFloat("AddReLU", out, a, b)
	dt := out.DType()
	if !bnReLU() || (dt != tensor.F32 && dt != tensor.F16) || a.DType() != dt || b.DType() != dt || !vec8(out.Len(), out, a, b) {
		d.Add(out, a, b)
		d.ReLU(out, out)
		return
	}
	d.launch1("k_add_relu8", out.Len()/8, ptra(out), ptra(a), ptra(b), dta(out), i32a(out.Len()/8))
}

// pool8 reports whether a max pool takes its 8-wide kernels: NHWC, channels in eights, every
// tensor 16-byte aligned and the 32-bit kernels' sizes (ts[0] the input image).
func pool8(g tensor.ConvGeom, C int, ts ...*tensor.Tensor) bool {
	return bnVec() && pool8On && g.Layout == tensor.NHWC && C%8 == 0 && ts[0].Len() < idx32Max && vec8(8, ts...)
}

// pool8On: a test turns the 8-wide max pools off to compare them with the 32-bit scalar ones.
var pool8On = true

// idx32Max: tensors below it take the 32-bit-index kernels (a variable for a test).
var idx32Max = 1 << 30

// AddReLUBackward is tensor.AddReLUDevice's: dx = y > 0 ? dx + a : 0 in one 8-wide pass
// (k_add_relu_bwd8) under AddReLU's conditions, else Axpy then ReLUBackward. The same bits.
func (d *Device) AddReLUBackward(dx, a, y *tensor.Tensor) {
	tensor.CheckLen("AddReLUBackward", dx, a, y)
	tensor.CheckFloat("AddReLUBackward", dx, a, y)
	dt := dx.DType()
	if !bnReLU() || (dt != tensor.F32 && dt != tensor.F16) || a.DType() != dt || y.DType() != dt || !vec8(dx.Len(), dx, a, y) {
		d.Axpy(dx, 1, a)
		d.ReLUBackward(dx, dx, y)
		return
	}
	d.launch1("k_add_relu_bwd8", dx.Len()/8, ptra(dx), ptra(a), ptra(y), dta(dx), i32a(dx.Len()/8))
}

// idx32 is the kernel name's 32-bit-index twin (name + "32") for tensors of n elements well
// below 2^31 (a grid-stride step past the end must not overflow), else name.
func idx32(name string, n int) string {
	if n < idx32Max {
		return name + "32"
	}
	return name
}

func (d *Device) MaxPool2d(y, arg, x *tensor.Tensor, g tensor.ConvGeom) {
	N, C, H, W, OH, OW := poolDims("MaxPool2d", y, x, g)
	if arg.Len() != y.Len() || arg.DType() != tensor.I32 {
		panic(fmt.Sprintf("cuda: MaxPool2d: arg %s for y %s (want i32)", arg, y))
	}
	if pool8(g, C, x, y, arg) {
		d.launch1("k_maxpool8", y.Len()/8, ptra(y), ptra(arg), ptra(x), dta(x), i32a(N), i32a(C), i32a(H), i32a(W),
			i32a(OH), i32a(OW), i32a(g.KH), i32a(g.KW), i32a(g.Stride), i32a(g.Pad))
		return
	}
	d.launch1(idx32("k_maxpool", x.Len()), y.Len(), ptra(y), ptra(arg), ptra(x), dta(x), nhwcArg(g.Layout), i32a(N), i32a(C), i32a(H), i32a(W),
		i32a(OH), i32a(OW), i32a(g.KH), i32a(g.KW), i32a(g.Stride), i32a(g.Pad))
}

func (d *Device) MaxPool2dBackward(dx, dy, arg *tensor.Tensor, g tensor.ConvGeom) {
	N, C, H, W, OH, OW := poolDims("MaxPool2dBackward", dy, dx, g)
	if arg.Len() != dy.Len() || arg.DType() != tensor.I32 {
		panic(fmt.Sprintf("cuda: MaxPool2dBackward: arg %s for dy %s (want i32)", arg, dy))
	}
	if pool8(g, C, dx, dy, arg) {
		d.launch1("k_maxpool_bwd8", dx.Len()/8, ptra(dx), ptra(dy), ptra(arg), dta(dx), i32a(N), i32a(C), i32a(H), i32a(W),
			i32a(OH), i32a(OW), i32a(g.KH), i32a(g.KW), i32a(g.Stride), i32a(g.Pad))
		return
	}
	d.launch1(idx32("k_maxpool_bwd", dx.Len()), dx.Len(), ptra(dx), ptra(dy), ptra(arg), dta(dx), nhwcArg(g.Layout), i32a(N), i32a(C), i32a(H), i32a(W),
		i32a(OH), i32a(OW), i32a(g.KH), i32a(g.KW), i32a(g.Stride), i32a(g.Pad))
}

func (d *Device) GlobalAvgPool(l tensor.Layout, y, x *tensor.Tensor) {
	N, C, h, w := l.Dims(x.Shape())
	if y.Len() != N*C {
		panic(fmt.Sprintf("cuda: GlobalAvgPool: y %s for x %s", y, x))
	}
	convDT("GlobalAvgPool", x)
	convDT("GlobalAvgPool", y)
	d.launch("k_gap", [3]int{(N*C + 255) / 256, 1, 1}, [3]int{256, 1, 1}, 0, ptra(y), dta(y), ptra(x), dta(x), nhwcArg(l), i32a(N), i32a(C), i32a(h*w))
}

func (d *Device) GlobalAvgPoolBackward(l tensor.Layout, dx, dy *tensor.Tensor) {
	N, C, h, w := l.Dims(dx.Shape())
	if dy.Len() != N*C {
		panic(fmt.Sprintf("cuda: GlobalAvgPoolBackward: dy %s for dx %s", dy, dx))
	}
	convDT("GlobalAvgPoolBackward", dx)
	convDT("GlobalAvgPoolBackward", dy)
	d.launch1("k_gap_bwd", dx.Len(), ptra(dx), dta(dx), ptra(dy), dta(dy), nhwcArg(l), u64a(uint64(dx.Len())), i32a(C), i32a(h*w))
}
