package model

import (
	"fmt"
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// Optimizers update the f32 master weights from the f32 gradient slab with one device operation
// per run of parameters (AdamW: one for all runs on a MultiAdamW device), and write the f16 compute copy in the same pass under mixed precision.
// Their state (AdamW's m and v, SGD's momentum) mirrors the parameter slab: one allocation each,
// so a checkpoint stores it as a few named tensors.

// Optimizer is what the trainer steps.
type Optimizer interface {
	// Step applies one update at learning rate lr and advances the step count.
	Step(lr float32)
	// State lists the optimizer's tensors by name, for checkpoints (views of the device slabs:
	// loading writes into them).
	State() []NamedState
	// Steps is the number of updates taken (AdamW's bias correction depends on it).
	Steps() int64
	SetSteps(n int64)
	// Free releases the state slabs.
	Free()
}

// NamedState is one optimizer state tensor, e.g. {"adamw.m", (N) f32}.
type NamedState struct {
	Name string
	T    *tensor.Tensor
}

// decayRun is a contiguous range of parameters that share a decay flag: one device call each.
// state is where the range starts in the optimizer's state slabs: off itself, except under
// optimizer-state sharding, where the state holds only the shard's elements, packed.
type decayRun struct {
	off, n int
	decay  bool
	state  int
}

// decayRuns merges neighbouring parameters with equal Decay into ranges of the slabs.
func decayRuns(ps *Params) []decayRun {
	var runs []decayRun
	for _, p := range ps.List {
		n := p.Len()
		if k := len(runs) - 1; k >= 0 && runs[k].decay == p.Decay && runs[k].off+runs[k].n == p.Offset {
			runs[k].n += n
			continue
		}
		runs = append(runs, decayRun{off: p.Offset, n: n, decay: p.Decay, state: p.Offset})
	}
	return runs
}

// Shard is the part of the parameter slab that one rank's optimizer updates under
// optimizer-state sharding (ddp.shard_optimizer, ZeRO-1): ascending, disjoint element ranges
// [lo, hi) of the slabs (ddp.PlanShard: the rank's ring segment of every gradient bucket). An
// optimizer built on a shard keeps state for these elements only, packed in slab order, so its
// state slabs hold N() elements instead of the model's.
type Shard struct {
	Ranges [][2]int
}

// N is the number of elements in the shard.
func (s *Shard) N() int {
	n := 0
	for _, r := range s.Ranges {
		n += r[1] - r[0]
	}
	return n
}

// Pack copies the shard's elements of full (a slab-length vector) into a packed vector (N()).
func (s *Shard) Pack(full []float32) []float32 {
	out := make([]float32, 0, s.N())
	for _, r := range s.Ranges {
		out = append(out, full[r[0]:r[1]]...)
	}
	return out
}

// Unpack writes a packed vector (N()) into the shard's elements of full.
func (s *Shard) Unpack(full, packed []float32) {
	k := 0
	for _, r := range s.Ranges {
		k += copy(full[r[0]:r[1]], packed[k:k+r[1]-r[0]])
	}
}

// Views are the shard's ranges of t, a slab-length tensor (the gradients, for the scaler's
// check and for clipping).
func (s *Shard) Views(t *tensor.Tensor) []*tensor.Tensor {
	out := make([]*tensor.Tensor, 0, len(s.Ranges))
	for _, r := range s.Ranges {
		if r[1] > r[0] {
			out = append(out, t.View(r[0], r[1]-r[0]))
		}
	}
	return out
}

// ShardOf is the shard an optimizer was built on (NewAdamWShard, NewSGDShard), or nil: the
// whole slab.
func ShardOf(o Optimizer) *Shard {
	if s, ok := o.(interface{ Shard() *Shard }); ok {
		return s.Shard()
	}
	return nil
}

// shardRuns cuts the decay runs to the shard: the pieces inside its ranges, with their packed
// state offsets. A run and a range may each span several of the other.
func shardRuns(runs []decayRun, sh *Shard) []decayRun {
	var out []decayRun
	state := 0
	for _, r := range sh.Ranges {
		for _, d := range runs {
			lo, hi := max(r[0], d.off), min(r[1], d.off+d.n)
			if hi > lo {
				out = append(out, decayRun{off: lo, n: hi - lo, decay: d.decay, state: state + lo - r[0]})
			}
		}
		state += r[1] - r[0]
	}
	return out
}

func halfView(ps *Params, off, n int) *tensor.Tensor {
	if ps.Half == nil {
		return nil
	}
	return ps.Half.View(off, n)
}

// ---- AdamW ----

// AdamWConfig: Loshchilov & Hutter's decoupled weight decay, PyTorch's defaults.
type AdamWConfig struct {
	Beta1       float32 // 0.9
	Beta2       float32 // 0.999
	Eps         float32 // 1e-8
	WeightDecay float32 // 0.01, applied only to parameters with Decay set
}

// DefaultAdamW returns PyTorch's AdamW defaults.
func DefaultAdamW() AdamWConfig {
	return AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
}

// AdamW keeps first and second moments m, v (N) f32 beside the parameter slab:
//
//	m = β1·m + (1−β1)·g,  v = β2·v + (1−β2)·g²,  m̂ = m/(1−β1ᵗ),  v̂ = v/(1−β2ᵗ)
//	w −= lr·(m̂/(√v̂ + ε) + λ·w)      (λ = WeightDecay for decayed parameters, else 0)
type AdamW struct {
	Cfg   AdamWConfig
	ps    *Params
	M, V  *tensor.Tensor // (N) f32; (shard.N()) under sharding
	t     int64
	runs  []decayRun
	shard *Shard // nil: every element

	// With a MultiAdamW device: the runs as one table, and its device copy.
	multi  tensor.MultiAdamW
	aruns  []tensor.AdamWRun
	table  *tensor.Tensor
	perRun bool // tests: force one Device.AdamW call per run
}

// NewAdamW allocates zeroed moments for ps.
func NewAdamW(ps *Params, cfg AdamWConfig) (*AdamW, error) { return NewAdamWShard(ps, cfg, nil) }

// NewAdamWShard is AdamW on a shard of ps (nil: all of it): m and v hold the shard's elements
// only, and Step updates only the shard's master weights (and their 16-bit copy); the rest of
// the slab is some other rank's to update and to all-gather (ddp.Engine.GatherParams). Per
// element the update is the very arithmetic of the unsharded AdamW, so on the same gradients it
// gives the same bits. The MultiAdamW device path is not used on a shard. Step reads and writes
// the master through Params.MasterView, so the master may be kept for the shard only
// (Params.ShardMaster on the same shard).
func NewAdamWShard(ps *Params, cfg AdamWConfig, shard *Shard) (*AdamW, error) {
	if !(cfg.Beta1 >= 0 && cfg.Beta1 < 1) || !(cfg.Beta2 >= 0 && cfg.Beta2 < 1) {
		return nil, fmt.Errorf("model: AdamW betas (%v, %v) must lie in [0,1)", cfg.Beta1, cfg.Beta2)
	}
	if !(cfg.Eps > 0) || !(cfg.WeightDecay >= 0) {
		return nil, fmt.Errorf("model: AdamW eps %v must be > 0 and weight decay %v ≥ 0", cfg.Eps, cfg.WeightDecay)
	}
	dev := ps.Device()
	o := &AdamW{Cfg: cfg, ps: ps, runs: decayRuns(ps), shard: shard}
	n := ps.N
	if shard != nil {
		o.runs = shardRuns(o.runs, shard)
		n = shard.N()
	}
	o.M = dev.Alloc(tensor.F32, "adamw.m", n)
	o.V = dev.Alloc(tensor.F32, "adamw.v", n)
	dev.Fill(o.M, 0)
	dev.Fill(o.V, 0)
	if md, ok := dev.(tensor.MultiAdamW); ok && ps.N > 0 && shard == nil {
		o.multi = md
		for _, r := range o.runs {
			o.aruns = append(o.aruns, tensor.AdamWRun{Off: r.off, N: r.n, Decay: r.decay})
		}
		o.table = md.AdamWTable(o.aruns)
	}
	return o, nil
}

func (o *AdamW) Step(lr float32) { o.step(lr, 0, 0) }

// step is one update with each gradient element multiplied by unscale (0: none) and then by
// gradScale (0: none) as it is read (tensor.AdamWArgs).
func (o *AdamW) step(lr, unscale, gradScale float32) {
	o.t++
	dev := o.ps.Device()
	a := tensor.AdamWArgs{
		LR: lr, Beta1: o.Cfg.Beta1, Beta2: o.Cfg.Beta2, Eps: o.Cfg.Eps,
		BiasCorr1: float32(1 - math.Pow(float64(o.Cfg.Beta1), float64(o.t))),
		BiasCorr2: float32(1 - math.Pow(float64(o.Cfg.Beta2), float64(o.t))),
		GradScale: gradScale, Unscale: unscale,
	}
	if o.multi != nil && !o.perRun {
		o.ps.mustBeWhole("AdamW.Step (unsharded AdamW)")
		a.WeightDecay = o.Cfg.WeightDecay
		o.multi.AdamWRuns(o.ps.Data, o.ps.Grad, o.M, o.V, o.ps.Half, o.aruns, o.table, a)
		return
	}
	for _, r := range o.runs {
		a.WeightDecay = 0
		if r.decay {
			a.WeightDecay = o.Cfg.WeightDecay
		}
		dev.AdamW(o.ps.MasterView(r.off, r.n), o.ps.Grad.View(r.off, r.n), o.M.View(r.state, r.n),
			o.V.View(r.state, r.n), halfView(o.ps, r.off, r.n), a)
	}
}

func (o *AdamW) State() []NamedState {
	return []NamedState{{"adamw.m", o.M}, {"adamw.v", o.V}}
}
func (o *AdamW) Steps() int64     { return o.t }
func (o *AdamW) SetSteps(n int64) { o.t = n }

// Shard is the part of the slab this optimizer updates; nil: all of it.
func (o *AdamW) Shard() *Shard { return o.shard }

func (o *AdamW) Free() {
	freeAll(o.ps.Device(), o.M, o.V, o.table)
	o.M, o.V, o.table = nil, nil, nil
}

// ---- SGD ----

// SGDConfig: PyTorch's SGD. With momentum μ the buffer is b = μ·b + g (+ λ·w); the step uses b, or
// g + μ·b with Nesterov.
type SGDConfig struct {
	Momentum    float32
	Nesterov    bool
	WeightDecay float32 // L2, applied only to parameters with Decay set
}

// SGD is stochastic gradient descent with optional (Nesterov) momentum.
type SGD struct {
	Cfg   SGDConfig
	ps    *Params
	Mom   *tensor.Tensor // (N) f32, nil without momentum; (shard.N()) under sharding
	t     int64
	runs  []decayRun
	shard *Shard // nil: every element

	// With a MultiSGD device: the runs as one table, and its device copy (as AdamW's).
	multi  tensor.MultiSGD
	aruns  []tensor.AdamWRun
	table  *tensor.Tensor
	perRun bool // tests: force one Device.SGD call per run
}

// NewSGD allocates a zeroed momentum buffer when Momentum > 0.
func NewSGD(ps *Params, cfg SGDConfig) (*SGD, error) { return NewSGDShard(ps, cfg, nil) }

// NewSGDShard is SGD on a shard of ps (nil: all of it), as NewAdamWShard: the momentum buffer
// holds the shard's elements only, packed in slab order, and Step updates only the shard's
// weights (and their 16-bit copy). Per element the update is the unsharded arithmetic, so on
// the same gradients it gives the same bits.
func NewSGDShard(ps *Params, cfg SGDConfig, shard *Shard) (*SGD, error) {
	if !(cfg.Momentum >= 0 && cfg.Momentum < 1) || !(cfg.WeightDecay >= 0) {
		return nil, fmt.Errorf("model: SGD momentum %v must lie in [0,1) and weight decay %v be ≥ 0", cfg.Momentum, cfg.WeightDecay)
	}
	if cfg.Nesterov && cfg.Momentum == 0 {
		return nil, fmt.Errorf("model: SGD with Nesterov needs momentum > 0")
	}
	o := &SGD{Cfg: cfg, ps: ps, runs: decayRuns(ps), shard: shard}
	n := ps.N
	if shard != nil {
		o.runs = shardRuns(o.runs, shard)
		n = shard.N()
	}
	if cfg.Momentum > 0 {
		dev := ps.Device()
		o.Mom = dev.Alloc(tensor.F32, "sgd.momentum", n)
		dev.Fill(o.Mom, 0)
	}
	if md, ok := ps.Device().(tensor.MultiSGD); ok && md.FusesSGD() && ps.N > 0 && shard == nil {
		o.multi = md
		for _, r := range o.runs {
			o.aruns = append(o.aruns, tensor.AdamWRun{Off: r.off, N: r.n, Decay: r.decay})
		}
		o.table = md.AdamWTable(o.aruns)
	}
	return o, nil
}

func (o *SGD) Step(lr float32) {
	o.t++
	dev := o.ps.Device()
	a := tensor.SGDArgs{LR: lr, Momentum: o.Cfg.Momentum, Nesterov: o.Cfg.Nesterov}
	if o.multi != nil && !o.perRun {
		a.WeightDecay = o.Cfg.WeightDecay
		o.multi.SGDRuns(o.ps.Data, o.ps.Grad, o.Mom, o.ps.Half, o.aruns, o.table, a)
		return
	}
	for _, r := range o.runs {
		a.WeightDecay = 0
		if r.decay {
			a.WeightDecay = o.Cfg.WeightDecay
		}
		var mom *tensor.Tensor
		if o.Mom != nil {
			mom = o.Mom.View(r.state, r.n)
		}
		dev.SGD(o.ps.MasterView(r.off, r.n), o.ps.Grad.View(r.off, r.n), mom, halfView(o.ps, r.off, r.n), a)
	}
}

func (o *SGD) State() []NamedState {
	if o.Mom == nil {
		return nil
	}
	return []NamedState{{"sgd.momentum", o.Mom}}
}
func (o *SGD) Steps() int64     { return o.t }
func (o *SGD) SetSteps(n int64) { o.t = n }

// Shard is the part of the slab this optimizer updates; nil: all of it.
func (o *SGD) Shard() *Shard { return o.shard }

func (o *SGD) Free() {
	freeAll(o.ps.Device(), o.Mom, o.table)
	o.Mom, o.table = nil, nil
}

var (
	_ Optimizer         = (*AdamW)(nil)
	_ Optimizer         = (*SGD)(nil)
	_ GradScaledStepper = (*AdamW)(nil)
	_ UnscaledStepper   = (*AdamW)(nil)
)

// ClipGradNorm scales the gradient slab so that its global L2 norm is at most max (max ≤ 0 only
// measures) and returns the norm before clipping. It reads the norm back, so it waits for the
// device. A non-finite norm leaves the gradients alone (the scaler skips such steps).
func ClipGradNorm(ps *Params, max float32) float32 {
	norm, coef := GradNormCoef(ps, max)
	if coef != 0 {
		ps.Device().Scale(ps.Grad, coef)
	}
	return norm
}

// GradNormCoef is ClipGradNorm without the scaling: the norm, and the factor the gradients are to
// be multiplied by (0: none, the norm is at most max, max ≤ 0, or the norm is not finite) — for
// a step that applies it itself (GradScaledStepper.StepScaled) instead of a pass of its own.
func GradNormCoef(ps *Params, max float32) (norm, coef float32) {
	dev := ps.Device()
	sq := dev.Alloc(tensor.F32, "clip.norm", 1)
	dev.Fill(sq, 0)
	dev.SumSquares(sq, ps.Grad)
	var h [1]float32
	dev.Download(h[:], sq)
	dev.Free(sq)
	norm = float32(math.Sqrt(float64(h[0])))
	return norm, ClipCoef(norm, max)
}

// ClipCoef is the factor that clips gradients of global norm norm to max: max/(norm+1e-6) when
// max > 0 and norm is finite and above it, else 0 (no scaling).
func ClipCoef(norm, max float32) float32 {
	if max > 0 && norm > max && !math.IsInf(float64(norm), 0) && !math.IsNaN(float64(norm)) {
		return max / (norm + 1e-6)
	}
	return 0
}

// GradScaledStepper is an optimizer that can multiply the gradients by a factor inside its step
// (gradient clipping without a pass over the gradients of its own: ~1/3 of the memory traffic
// clipping adds). StepScaled(lr, c) updates as Scale(gradients, c) then Step(lr) would, bit for
// bit; the gradients themselves are left unscaled. GradScaled reports whether it can: the
// optimizer and its device support it.
type GradScaledStepper interface {
	GradScaled() bool
	StepScaled(lr, gradScale float32)
}

// GradScaled reports whether the device's AdamW honours a gradient scale (tensor.GradScaledAdamW).
func (o *AdamW) GradScaled() bool {
	g, ok := o.ps.Device().(tensor.GradScaledAdamW)
	return ok && g.GradScaledAdamW()
}

// StepScaled is Step with each gradient element multiplied by gradScale first (0: Step).
func (o *AdamW) StepScaled(lr, gradScale float32) {
	if gradScale != 0 && !o.GradScaled() {
		panic("model: AdamW.StepScaled on a device without tensor.GradScaledAdamW")
	}
	o.step(lr, 0, gradScale)
}

// UnscaledStepper is a GradScaledStepper that can also take the loss scaler's unscale in its step
// (the scaler's check then reads the gradients without writing them back: Scaler.CheckDeferred).
// StepUnscaled(lr, inv, c) updates as UnscaleCheck's x·inv pass then StepScaled(lr, c) would, bit
// for bit — each gradient element multiplied by inv, rounded to f32, then by c — and leaves the
// gradients as they were (still scaled; the next step's ZeroGrad clears them). inv 0: no unscale.
// Unscaled reports whether it can: the optimizer and its device (tensor.UnscaleFolder, its switch
// on) support it.
type UnscaledStepper interface {
	GradScaledStepper
	Unscaled() bool
	StepUnscaled(lr, inv, gradScale float32)
}

// Unscaled reports whether the device's AdamW honours AdamWArgs.Unscale and its switch is on
// (tensor.UnscaleFolder). Not on a shard: the sharded step keeps the scaler's unscaling pass
// (Scaler.UnscaleCheckShard).
func (o *AdamW) Unscaled() bool {
	f, ok := o.ps.Device().(tensor.UnscaleFolder)
	return ok && f.FoldsUnscale() && o.shard == nil
}

// StepUnscaled is StepScaled with each gradient element multiplied by inv before gradScale (inv
// 0: StepScaled).
func (o *AdamW) StepUnscaled(lr, inv, gradScale float32) {
	if inv != 0 && !o.Unscaled() {
		panic("model: AdamW.StepUnscaled on a shard or a device without tensor.UnscaleFolder (or its switch off)")
	}
	if gradScale != 0 && !o.GradScaled() {
		panic("model: AdamW.StepUnscaled with a clip factor on a device without tensor.GradScaledAdamW")
	}
	o.step(lr, inv, gradScale)
}
