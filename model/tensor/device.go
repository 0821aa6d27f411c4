package tensor

// Device is the seam between layers and hardware. Every operation the layers use is here, and the
// CPU device (model/cpu) and the CUDA device (model/cuda, build tag cuda) implement all of it.
//
// Contract, for every operation:
//   - Operations may run asynchronously (the CUDA device enqueues them on its compute stream, in
//     call order). Only Download, DownloadI32, Sync and a Fence's Wait wait. A caller may free a
//     tensor right after handing it to an operation; the device keeps the memory until the work
//     is done.
//   - Tensors of more than two dimensions are read as matrices where an operation says "(R,C)": the
//     last dimension is C, the product of the others R.
//   - Floating inputs may be f32 or f16 (or bf16, where the device computes in it: CheckCompute) in
//     any mix, unless stated; arithmetic is f32 inside and results are rounded (to nearest even) to
//     the output tensor's dtype. Shapes must agree exactly as documented; a mismatch
//     panics with a message naming the operation and the tensors (a programming error, not bad input).
//   - "accumulates" means the result is added to what the output holds; otherwise it is overwritten.
//     All parameter-gradient outputs accumulate, so gradient accumulation over micro-steps needs no
//     extra pass: the trainer zeroes the gradient slab at micro-step 0.
//   - Devices are not safe for concurrent use unless stated: one goroutine drives a device.
type Device interface {
	Name() string

	// ---- memory (a device embeds the Pool of alloc.go for all of these) ----

	// Alloc returns an owning tensor. Its contents are undefined. The tag names the allocation in
	// memory reports and leak checks. When the allocation would pass the device's memory (or the
	// limit set by SetLimit) it panics with *OOMError; CatchOOM turns that into an error.
	Alloc(dt DType, tag string, shape ...int) *Tensor
	// Free returns an owning tensor's memory to the device's cache. Freeing a view panics.
	Free(t *Tensor)
	Stats() MemStats
	ResetPeak()
	// SetLimit caps the bytes held from the device (reserved: allocated + cached, as a card of
	// that size would; 0 = no cap other than the hardware). At the cap the cached blocks are
	// given back and the allocation is retried before it fails, as PyTorch's caching allocator.
	SetLimit(bytes int64)
	// EmptyCache releases cached, unused blocks (reserved falls towards allocated).
	EmptyCache()
	// Live lists the tensors allocated and not freed, for leak checks and memory reports.
	Live() []LiveBlock

	// ---- host transfer ----

	Upload(dst *Tensor, src []float32)   // dst f32, f16 or bf16; len(src) == dst.Len()
	UploadI32(dst *Tensor, src []int32)  // dst i32
	Download(dst []float32, src *Tensor) // waits; src f32, f16 or bf16
	DownloadI32(dst []int32, src *Tensor)
	Sync() // waits until all enqueued work is done

	// Fence marks the point after all work enqueued so far: its Wait returns once that work is
	// done, and Done says whether it is without waiting. It waits for the compute work only, not
	// for what Sync also waits for (the CUDA device's copy stream). See Fence.
	Fence() Fence

	// ---- fills, copies, elementwise ----

	Fill(t *Tensor, v float32)
	// Copy copies src into dst (same length), converting between f32 and f16 or bf16.
	Copy(dst, src *Tensor)
	// RandNormal fills t with N(0, std²) from a counter-based generator: element i of a tensor filled
	// with seed s is the same on every device and every run.
	RandNormal(t *Tensor, std float32, seed uint64)
	Scale(t *Tensor, s float32)               // t *= s
	Axpy(y *Tensor, alpha float32, x *Tensor) // y += alpha·x
	Add(out, a, b *Tensor)                    // out = a + b; out may alias a or b

	// ---- matrix products ----

	// MatMul: c = alpha·op(a)·op(b) + beta·c, as matrices: op(a) is (M,K), op(b) is (K,N), c is (M,N).
	// With transA, a is stored (K,M); with transB, b is stored (N,K). beta = 1 accumulates.
	MatMul(c, a, b *Tensor, transA, transB bool, alpha, beta float32)
	// BatchedMatMul is MatMul over the leading dimension of 3-D a, b, c (same batch count).
	BatchedMatMul(c, a, b *Tensor, transA, transB bool, alpha, beta float32)
	// AddBias: y (R,C) += bias (C).
	AddBias(y, bias *Tensor)
	// BiasGrad: db (C) += column sums of dy (R,C). Accumulates.
	BiasGrad(db, dy *Tensor)

	// ---- activations ----

	ReLU(y, x *Tensor)
	ReLUBackward(dx, dy, y *Tensor) // dx = dy·[y>0]; dx may alias dy
	GELU(y, x *Tensor)              // tanh form
	GELUBackward(dx, dy, x *Tensor) // dx may alias dy
	// Dropout: y = x·mask/(1-p), mask from the counter generator under seed; DropoutBackward
	// regenerates the same mask, so nothing is saved.
	Dropout(y, x *Tensor, p float32, seed uint64)
	DropoutBackward(dx, dy *Tensor, p float32, seed uint64)

	// ---- normalisation ----

	// LayerNorm over the last dimension: x (R,C), w and b (C) f32, mean and rstd (R) f32 outputs.
	LayerNorm(y, mean, rstd, x, w, b *Tensor, eps float32)
	// LayerNormBackward accumulates into dx (R,C), dw (C) and db (C).
	LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd *Tensor)

	// ---- embeddings ----

	// Embedding: out (B,T,C) = wte[ids[b,t]] + wpe[t]; ids (B,T) i32, wte (V,C), wpe (maxT,C) or nil.
	Embedding(out, ids, wte, wpe *Tensor)
	// EmbeddingBackward accumulates dout into dwte rows (and dwpe rows when not nil).
	EmbeddingBackward(dwte, dwpe, dout, ids *Tensor)

	// ---- softmax, attention and loss ----

	// Softmax over the last dimension of x (R,C) after multiplying by scale. With causal, x is
	// (…,T,T) and row i of each T×T block only sees columns j ≤ i (the rest of y is 0).
	Softmax(y, x *Tensor, scale float32, causal bool)
	// SoftmaxBackward: dx = scale·y⊙(dy − rowsum(dy⊙y)). dx may alias dy.
	SoftmaxBackward(dx, dy, y *Tensor, scale float32)
	// SplitQKV: qkv (B,T,3·C) with C = H·hs → q, k, v each (B,H,T,hs).
	SplitQKV(q, k, v, qkv *Tensor)
	// MergeQKV is SplitQKV's inverse (used for gradients): dqkv (B,T,3·C) = join of dq, dk, dv.
	MergeQKV(dqkv, dq, dk, dv *Tensor)
	// Permute0213: src (A,B,C,D) → dst (A,C,B,D), dst.Shape() must say so.
	Permute0213(dst, src *Tensor)
	// FlashAttention is fused causal self-attention that never stores the T×T scores: qkv
	// (B,T,3·C) holds q, k, v side by side as the QKV projection writes them (C = heads·hs);
	// y (B,T,C) gets softmax_causal(scale·q·kᵀ)·v per head, heads side by side; lse (B,heads,T) f32
	// gets each row's natural-log log-sum-exp of its scaled scores, which the backward needs.
	FlashAttention(y, lse, qkv *Tensor, heads int, scale float32)
	// FlashAttentionBackward: dqkv (B,T,3·C), overwritten, from dy (B,T,C) and the forward's qkv,
	// y and lse.
	FlashAttentionBackward(dqkv, dy, qkv, y, lse *Tensor, heads int, scale float32)
	// FlashAttentionFast reports whether FlashAttention runs a fused kernel for this head size and
	// dtype. When false it is a reference implementation (correct, slower than attention through
	// BatchedMatMul and Softmax), and layers choosing automatically use the materialised path.
	FlashAttentionFast(headSize int, dt DType) bool
	// CrossEntropy: losses (R) f32 = −log softmax(logits (R,V))[targets (R) i32], computed in f32
	// and stable; a negative target contributes 0.
	CrossEntropy(losses, logits, targets *Tensor)
	// CrossEntropyBackward: dlogits = scale·(softmax(logits) − onehot(targets)); rows with a negative
	// target get 0. dlogits may alias logits (the logits are then gone).
	CrossEntropyBackward(dlogits, logits, targets *Tensor, scale float32)
	// ArgMax: out (R) i32 = index of each row's maximum of x (R,C).
	ArgMax(out, x *Tensor)

	// ---- reductions, loss scaling and optimizers (f32 tensors) ----

	// SumSquares: out (1) += Σ x². Accumulates, so several tensors sum into one norm.
	SumSquares(out, x *Tensor)
	// Sum: out (1) += Σ x.
	Sum(out, x *Tensor)
	// UnscaleCheck: x *= inv, and found (1) is set to 1 when any element of x is inf or NaN
	// (found is never cleared here).
	UnscaleCheck(x *Tensor, inv float32, found *Tensor)
	// AdamW updates p with g (all f32, same length) and moments m, v; when half is not nil it also
	// receives p rounded to f16 (the mixed-precision weight copy).
	AdamW(p, g, m, v, half *Tensor, a AdamWArgs)
	// SGD with momentum buffer mom (nil when Momentum is 0); half as in AdamW.
	SGD(p, g, mom, half *Tensor, a SGDArgs)
}

// FlashForwardRower is an optional ability of a device whose fused attention forward runs in
// blocks of query rows (the CUDA device: 64 rows by default, or 128): SetFlashForwardRows picks
// the block height (model.flash_forward_rows). Every row adds the same key tiles in the same order
// either way, so the results are the same bits; an unsupported height is an error.
type FlashForwardRower interface {
	SetFlashForwardRows(rows int) error
}

// BiasFolder is an optional ability of a device that folds a linear layer's bias add into the
// pass that reads its result (a GPT block's MLP GELU and residual adds):
//
//	AddBiasGELU(h, g, bias): h (R,C) += bias; g = GELU(h) — AddBias(h, bias) then GELU(g, h)
//	AddBiasAdd(out, x, y, bias): out = x + (y + bias), the sum y + bias rounded to y's dtype
//	  first — AddBias(y, bias) then Add(out, x, y) — but y itself is left as it was
//
// the same bits as the two operations, one read of h (or a write and a read of y) fewer.
// FoldsBias reports whether callers should take it (the CUDA and CPU devices: unless
// GODDP_BIAS_FOLD=0).
type BiasFolder interface {
	AddBiasGELU(h, g, bias *Tensor)
	AddBiasAdd(out, x, y, bias *Tensor)
	FoldsBias() bool
}

// ResidualNormer is an optional ability of a device that makes a residual sum and the layer norm
// that reads it in one pass:
//
//	AddBiasAddLayerNorm(out, y2, mean, rstd, x, y, bias, w, b, eps): out (R,C) = x + (y + bias)
//	  as BiasFolder's AddBiasAdd leaves it, then y2 = LayerNorm(out) with w, b, eps, and its mean
//	  and rstd (R) — AddBiasAdd then LayerNorm
//
// the same bits as the two operations, one read of out fewer. FusesResidualNorm reports whether
// callers should take it (both devices: unless GODDP_RESNORM_FOLD=0).
type ResidualNormer interface {
	AddBiasAddLayerNorm(out, y2, mean, rstd, x, y, bias, w, b *Tensor, eps float32)
	FusesResidualNorm() bool
}

// GELUBiasGrader is an optional ability of a device that computes a GELU's backward and the
// column sums of its result — the bias gradient of the linear that fed the GELU — in one pass:
//
//	GELUBackwardBiasGrad(dx, dy, x, db): dx (R,C) = GELU'(x)·dy (dx may alias dy), then db (C) +=
//	  the column sums of dx as stored — GELUBackward(dx, dy, x) then BiasGrad(db, dx)
//
// the same bits as the two operations, one read of dx fewer. FusesGELUBiasGrad reports whether
// callers should take it (both devices: unless GODDP_GELU_DB_FOLD=0).
type GELUBiasGrader interface {
	GELUBackwardBiasGrad(dx, dy, x, db *Tensor)
	FusesGELUBiasGrad() bool
}

// UnscaleSquarer is an optional ability of a device that unscales, checks and sums the squares of
// a gradient slab in one read: UnscaleCheckSumSquares(x, inv, found, sq) does what
// UnscaleCheck(x, inv, found) then SumSquares(sq, x) would, the same bits (the mixed-precision
// step's clipping norm without a pass of its own). FusesUnscaleSquares reports whether callers
// should take it (the CUDA device: unless GODDP_CLIP_FUSED=0).
type UnscaleSquarer interface {
	UnscaleCheckSumSquares(x *Tensor, inv float32, found, sq *Tensor)
	FusesUnscaleSquares() bool
}

// UnscaleFolder is an optional ability of a device that leaves the loss scaler's unscale to the
// optimizer: the check reads the gradients without writing them back, and AdamW multiplies each
// gradient by the inverse scale itself (AdamWArgs.Unscale), one write of the slab fewer.
//
//	CheckUnscaled(x, inv, found, sq): found (1) f32 is set to 1 when any x·inv (f32) is inf or
//	  NaN (never cleared here); when sq (1) f32 is not nil, sq += Σ (x·inv)² — the bits
//	  UnscaleCheck(x, inv, found) then SumSquares(sq, x) give (UnscaleCheckSumSquares's) — and x
//	  is left as it was. x is f32 (the gradient slab).
//
// FoldsUnscale reports whether callers should take it; AdamW (and AdamWRuns, where MultiAdamW)
// honour AdamWArgs.Unscale when it reports true (both devices: unless GODDP_UNSCALE_FOLD=0).
type UnscaleFolder interface {
	CheckUnscaled(x *Tensor, inv float32, found, sq *Tensor)
	FoldsUnscale() bool
}

// SquareSummer is an optional ability of a device that hands back a sum of squares in float64
// (the CUDA device; the CPU device too): SumSquaresF64 adds, in xs's order, each tensor's Σ v²
// computed in float64, and returns the float64 total after one wait. ddp's sharded ClipGradNorm
// uses it for the owned segments of the gradients instead of copying them to the host.
type SquareSummer interface {
	SumSquaresF64(xs []*Tensor) float64
}

// CrossEntropyGrad is an optional ability of a device that computes a cross-entropy's per-row
// losses and its gradient together (the CUDA device): CrossEntropy then CrossEntropyBackward, to
// the bit, possibly in fewer passes over the logits. dlogits may alias logits. The loss head
// (model.LMHeadLossForwardBackward) uses it.
type CrossEntropyGrad interface {
	CrossEntropyWithGrad(losses, dlogits, logits, targets *Tensor, scale float32)
}

// AdamWArgs are one AdamW step's scalars. Bias corrections are 1-β^t, computed by the caller.
// GradScale, when not 0, multiplies each gradient element before the step (g·GradScale in f32,
// the product a Device.Scale pass over the gradients would have written: gradient clipping folded
// into the step, model.AdamW.StepScaled); only devices that are GradScaledAdamW with it true
// take one. Unscale, when not 0, multiplies each gradient element before GradScale does (g·Unscale
// in f32, the value UnscaleCheck would have stored: the loss scaler's unscale folded into the
// step, model.AdamW.StepUnscaled), so the step sees (g·Unscale)·GradScale; only devices that are
// UnscaleFolder with FoldsUnscale true take one.
type AdamWArgs struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	BiasCorr1, BiasCorr2               float32
	GradScale                          float32
	Unscale                            float32
}

// GradScaledAdamW is implemented by devices whose AdamW (and AdamWRuns, where MultiAdamW) honour
// AdamWArgs.GradScale when GradScaledAdamW reports true.
type GradScaledAdamW interface {
	GradScaledAdamW() bool
}

// SGDArgs are one SGD step's scalars: v = μ·v + g + λ·p; p −= lr·(nesterov ? g + λp + μ·v : v).
type SGDArgs struct {
	LR, Momentum, WeightDecay float32
	Nesterov                  bool
}

// AdamWRun is a contiguous range [Off, Off+N) of the slabs with one decay flag.
type AdamWRun struct {
	Off, N int
	Decay  bool
}

// MultiAdamW is implemented by devices that update every run of the slabs in one operation (the
// CUDA device: one kernel launch per step instead of one per run). It is optional: AdamW falls
// back to one Device.AdamW call per run. The result must be bit-identical to that fallback.
type MultiAdamW interface {
	// AdamWTable packs runs into a tensor on the device for AdamWRuns (nil when the device needs
	// none). The caller keeps runs unchanged while the table lives and frees it with Device.Free.
	AdamWTable(runs []AdamWRun) *Tensor
	// AdamWRuns is Device.AdamW over whole slabs p, g, m, v (and half, which may be nil): runs,
	// described by table, partition [0, p.Len()) in order, and a.WeightDecay applies only to the
	// runs with Decay set.
	AdamWRuns(p, g, m, v, half *Tensor, runs []AdamWRun, table *Tensor, a AdamWArgs)
}

// MultiSGD is MultiAdamW's companion for SGD (the same run table, AdamWTable's): SGDRuns is
// Device.SGD over whole slabs p, g, mom (nil without momentum) and half (may be nil), the weight
// decay applied only to the runs with Decay set, bit-identical to one Device.SGD call per run.
type MultiSGD interface {
	MultiAdamW
	SGDRuns(p, g, mom, half *Tensor, runs []AdamWRun, table *Tensor, a SGDArgs)
	// FusesSGD reports whether SGD should take SGDRuns (a device may keep it behind a switch).
	FusesSGD() bool
}

// Fence is a point in a device's stream of work, from Device.Fence: what was enqueued before it
// is done once Wait returns or Done reports true, and the host may then read what that work wrote
// (a pinned buffer, say) and reuse what it read. The CPU device's fences are done when made (its
// operations finish before they return); the CUDA device's record an event on the compute stream.
//
// A training loop uses one to wait once per step for the step's work (instead of a Download used
// as a fence plus a Sync), or to overlap host work with the device and then wait.
//
// A fence is spent once Wait has returned or Done has reported true: its resources go back to the
// device (the CUDA device recycles its event) and later calls return at once (Done: true); one
// dropped unspent gives them back when it is garbage collected. Wait and Done may be called from
// any goroutine, not concurrently on one fence.
type Fence interface {
	// Wait blocks until all work enqueued before the fence is done.
	Wait()
	// Done reports, without blocking, whether all work enqueued before the fence is done.
	Done() bool
}
