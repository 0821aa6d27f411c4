package model

import (
	"fmt"
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// ResNetConfig describes a residual network classifier (He et al. 2015) on NCHW images.
type ResNetConfig struct {
	// Depth is 18 or 34 (basic blocks: two 3×3 convolutions) or 50 (bottleneck blocks: 1×1,
	// 3×3, 1×1 with 4× expansion); stages of {2,2,2,2}, {3,4,6,3}, {3,4,6,3} blocks.
	Depth int
	// Stem is "imagenet" (7×7/2 convolution, BN, ReLU, 3×3/2 max pool) or "small" (3×3/1
	// convolution, BN, ReLU: for 28×28 or 32×32 inputs).
	Stem string
	// Width is the first stage's channels (64 in the real ResNets); stage s has Width·2^s.
	Width   int
	Classes int
	// InC, InH, InW is one input image, e.g. 1×28×28 (MNIST) or 3×224×224. Inputs.X is
	// (B, InC·InH·InW) f32, read as (B,InC,InH,InW).
	InC, InH, InW int
	Compute       tensor.DType // F32, F16 or BF16 (activations; BN statistics, gains and buffers stay f32)
	// Checkpoint recomputes residual blocks in backward: 0 none, 1 every block, N every Nth.
	// A checkpointed block keeps only its output; the recompute does not move the BN running
	// statistics again.
	Checkpoint int
	// Layout of the activations: NCHW (the zero value) or NHWC (channels last, for the CUDA
	// device's tensor-core convolutions). Inputs.X stays (B, InC·InH·InW), read as NCHW; an NHWC
	// model transposes it once at the stem. The parameters do not depend on it.
	Layout tensor.Layout
}

// ResNetDepths are the supported depths.
var resnetStages = map[int][]int{18: {2, 2, 2, 2}, 34: {3, 4, 6, 3}, 50: {3, 4, 6, 3}}

// ResNet is stem → residual stages → global average pool → Linear head → softmax cross-entropy.
//
// Shapes: B batch; activations (B,C,H,W) NCHW, or (B,H,W,C) with Cfg.Layout NHWC. X (B, InC·InH·InW) f32, logits (B, Classes).
type ResNet struct {
	Cfg    ResNetConfig
	dev    tensor.Device
	ps     *Params
	bufs   *Buffers
	stem   *cbr
	pool   bool // the imagenet stem's max pool
	blocks []*resBlock
	head   *Linear
	feat   int // channels entering the head

	loss   *tensor.Tensor // (1) f32
	logits *tensor.Tensor // (B,Classes)
	act    resnetActs     // the last training forward's activations
	xin    *tensor.Tensor // the input in Compute's dtype and Cfg.Layout, when that is not X itself (nil once dropped: dropsStem)
	in     Inputs
	count  int
	train  bool
}

// cbr is convolution → BatchNorm → (ReLU): the unit every block is made of.
type cbr struct {
	conv *Conv2d
	bn   *BatchNorm2d
	relu bool
	name string
}

// cbrAct is one cbr's saved activations: z = conv(x), a = bn(z) (ReLU applied in place, which
// ReLU's backward reads: it needs the output), mean and rstd the BN batch statistics.
type cbrAct struct {
	z, a, mean, rstd *tensor.Tensor
	fused            bool // the ReLU was folded into the batch norm (BatchNorm2d.ForwardReLU)
}

func (u *cbr) forward(dev tensor.Device, x *tensor.Tensor, dt tensor.DType, train, update bool) cbrAct {
	var s cbrAct
	shape := u.conv.OutShape(x)
	s.z = dev.Alloc(dt, u.name+".z", shape...)
	u.conv.Forward(s.z, x)
	s.a = dev.Alloc(dt, u.name+".a", shape...)
	if train {
		s.mean = dev.Alloc(tensor.F32, u.name+".mean", u.bn.C)
		s.rstd = dev.Alloc(tensor.F32, u.name+".rstd", u.bn.C)
		if u.relu && resnetFuseReLU && u.bn.ForwardReLU(s.a, s.mean, s.rstd, s.z, update) {
			s.fused = true
			return s
		}
		u.bn.Forward(s.a, s.mean, s.rstd, s.z, update)
	} else {
		u.bn.Eval(s.a, s.z)
		dev.Free(s.z)
		s.z = nil
	}
	if u.relu {
		resnetReLU(dev, s.a, s.a)
	}
	return s
}

// recompute writes into a fresh tensor the a that forward made from s.z (the same training-mode
// passes, fused or not, with statistics of its own that it throws away, and without moving the
// running statistics), and points s.a at it: a unit that dropped its output after forward gets it
// back for its backward (the ResNet's stem, whose output only the max pool reads). The batch
// statistics of the same z are the same numbers, so a has the same bits as forward's.
func (u *cbr) recompute(dev tensor.Device, s *cbrAct) {
	s.a = dev.Alloc(s.z.DType(), u.name+".a", s.z.Shape()...)
	mean := dev.Alloc(tensor.F32, u.name+".mean", u.bn.C)
	rstd := dev.Alloc(tensor.F32, u.name+".rstd", u.bn.C)
	defer freeAll(dev, mean, rstd)
	if s.fused {
		if !u.bn.ForwardReLU(s.a, mean, rstd, s.z, false) {
			panic("model: " + u.name + ": the batch norm's ReLU fused in forward and not in its recompute")
		}
		return
	}
	u.bn.Forward(s.a, mean, rstd, s.z, false)
	if u.relu {
		resnetReLU(dev, s.a, s.a)
	}
}

// resnetReLU and resnetReLUBackward are the network's nonlinearity (ReLU; in place, the backward
// reading the output). Tests swap in the identity to check the wiring without ReLU's kinks.
// resnetFuseReLU lets a unit's ReLU fold into its batch norm where the device fuses them
// (tensor.BatchNormReLUDevice); a test that swaps the nonlinearity turns it off.
var (
	resnetReLU         = func(dev tensor.Device, y, x *tensor.Tensor) { dev.ReLU(y, x) }
	resnetReLUBackward = func(dev tensor.Device, dx, dy, y *tensor.Tensor) { dev.ReLUBackward(dx, dy, y) }
	resnetFuseReLU     = true
	resnetFuseAdd      = true // the blocks' add and ReLU through tensor.AddReLUDevice (a test compares both ways)
	// resnetDropStem lets a training forward free what only the stem's backward reads and can be
	// recomputed cheaply (ResNet.dropsStem; a test compares both ways).
	resnetDropStem = true
)

// backward: dx (x's shape, nil skips it) overwritten from da (a's shape; consumed by a unit
// with a ReLU, whose backward is written over it; only read by one without) and x, the unit's
// input. Frees z, mean, rstd (not a).
func (u *cbr) backward(dev tensor.Device, dx, da, x *tensor.Tensor, s *cbrAct) {
	dz := dev.Alloc(da.DType(), u.name+".dz", s.z.Shape()...)
	if s.fused {
		u.bn.BackwardReLU(dz, da, s.a, s.z, s.mean, s.rstd)
	} else {
		if u.relu {
			resnetReLUBackward(dev, da, da, s.a)
		}
		u.bn.Backward(dz, da, s.z, s.mean, s.rstd)
	}
	freeAll(dev, s.z, s.mean, s.rstd)
	s.z, s.mean, s.rstd = nil, nil, nil
	u.conv.Backward(dx, dz, x)
	dev.Free(dz)
}

func (s *cbrAct) free(dev tensor.Device) {
	freeLive(dev, s.z, s.a, s.mean, s.rstd)
	*s = cbrAct{}
}

// resBlock is out = relu(main(x) + shortcut(x)): main is 2 (basic) or 3 (bottleneck) cbr units,
// the last without ReLU; shortcut is x itself, or a 1×1 convolution + BN (down) when the shape
// changes.
type resBlock struct {
	units []*cbr
	down  *cbr
	name  string
}

// blockAct is a block's saved activations; out is the last unit's a (the sum and ReLU are
// done in place there).
type blockAct struct {
	units []cbrAct
	down  cbrAct
	out   *tensor.Tensor
	ckpt  bool // only out is kept; the rest is recomputed in backward
}

func (b *resBlock) forward(dev tensor.Device, x *tensor.Tensor, dt tensor.DType, train, update bool) blockAct {
	var s blockAct
	cur := x
	for j, u := range b.units {
		a := u.forward(dev, cur, dt, train, update)
		if !train && j > 0 {
			s.units[j-1].free(dev) // evaluation keeps nothing
		}
		s.units = append(s.units, a)
		cur = a.a
	}
	sc := x
	if b.down != nil {
		s.down = b.down.forward(dev, x, dt, train, update)
		sc = s.down.a
	}
	if ar := fusedAddReLU(dev); ar != nil {
		ar.AddReLU(cur, cur, sc) // one pass where the device has it
	} else {
		dev.Add(cur, cur, sc)
		resnetReLU(dev, cur, cur)
	}
	if train && b.down != nil {
		// the shortcut's BN output is read by the add only (its unit has no ReLU; its backward
		// reads z): PyTorch's autograd frees it here too. 1.5 M elements a sample in ResNet-50.
		dev.Free(s.down.a)
		s.down.a = nil
	}
	s.out = cur
	if !train {
		s.down.free(dev)
		s.units[len(s.units)-1].a = nil // out, owned by the caller now
		s.units = nil
	}
	return s
}

// dropInner frees everything but out (a checkpointed block after its forward).
func (s *blockAct) dropInner(dev tensor.Device) {
	for j := range s.units {
		if s.units[j].a == s.out {
			s.units[j].a = nil
		}
		s.units[j].free(dev)
	}
	s.units = nil
	s.down.free(dev)
	s.ckpt = true
}

// fusedAddReLU is dev's AddReLUDevice where the ResNet takes it (not when a test swapped the
// nonlinearity), else nil.
func fusedAddReLU(dev tensor.Device) tensor.AddReLUDevice {
	if ar, ok := dev.(tensor.AddReLUDevice); ok && resnetFuseReLU && resnetFuseAdd {
		return ar
	}
	return nil
}

// cacheConvFilters starts (on) or drops the device's cache of derived filters where it has one
// (tensor.ConvFilterCache).
func cacheConvFilters(dev tensor.Device, on bool) {
	if fc, ok := dev.(tensor.ConvFilterCache); ok {
		fc.CacheConvFilters(on)
	}
}

// backward: dx (x's shape) overwritten from dout (out's shape; consumed) and x. Frees the
// block's activations including out. masked says dout has been taken through the block's ReLU
// already (the next block's backward did it: its maskX); maskX takes dx through the ReLU that
// made x (x is the previous block's out) as the last pass writing it does (AddReLUBackward),
// which saves the previous block a pass over its dout.
func (b *resBlock) backward(dev tensor.Device, dx, dout, x *tensor.Tensor, s *blockAct, masked, maskX bool) {
	if !masked {
		resnetReLUBackward(dev, dout, dout, s.out) // d(main + shortcut)
	}
	// the last pass writing dx: dx += v, taken through x's ReLU with maskX
	accumulate := func(v *tensor.Tensor) {
		if maskX {
			fusedAddReLU(dev).AddReLUBackward(dx, v, x)
			return
		}
		dev.Axpy(dx, 1, v)
	}
	// Both branches read dout. A unit without a ReLU (the shortcut's, and the main branch's last
	// in every block built here) only reads its da, so each gets dout itself; one with a ReLU
	// would write over it, and gets a copy. In a checkpointed ResNet-50 the copies were two
	// block outputs at the backward's peak.
	if b.down != nil {
		dsc := dout
		if b.down.relu {
			dsc = dev.Alloc(dout.DType(), b.name+".dsc", dout.Shape()...)
			dev.Copy(dsc, dout)
		}
		b.down.backward(dev, dx, dsc, x, &s.down)
		if dsc != dout {
			dev.Free(dsc)
		}
		s.down.free(dev)
	}
	// the main branch, last unit first; dcur holds d(unit j's a)
	dcur := dout
	if b.down == nil && b.units[len(b.units)-1].relu {
		// the identity shortcut's share is dout itself: keep a copy from the consuming unit
		dcur = dev.Alloc(dout.DType(), b.name+".dmain", dout.Shape()...)
		dev.Copy(dcur, dout)
	}
	for j := len(b.units) - 1; j >= 0; j-- {
		in := x
		if j > 0 {
			in = s.units[j-1].a
		}
		var dprev *tensor.Tensor
		if j > 0 {
			dprev = dev.Alloc(dout.DType(), b.units[j-1].name+".da", in.Shape()...)
			b.units[j].backward(dev, dprev, dcur, in, &s.units[j])
		} else if b.down != nil {
			tmp := dev.Alloc(dout.DType(), b.name+".dx", x.Shape()...)
			b.units[j].backward(dev, tmp, dcur, in, &s.units[j])
			accumulate(tmp)
			dev.Free(tmp)
		} else {
			b.units[j].backward(dev, dx, dcur, in, &s.units[j])
		}
		if dcur != dout {
			dev.Free(dcur)
		}
		dcur = dprev
	}
	if b.down == nil {
		accumulate(dout) // the identity shortcut
	}
	for j := range s.units {
		s.units[j].free(dev)
	}
	*s = blockAct{}
}

// resnetActs is what a training forward keeps.
type resnetActs struct {
	stem   cbrAct
	pooled *tensor.Tensor // (B,W,H/4,W/4) after the imagenet stem's max pool
	arg    *tensor.Tensor // its argmax, i32
	blocks []blockAct
	feats  *tensor.Tensor // (B,feat) the global average pool
}

// NewResNet builds and initialises a ResNet (He init for convolutions, BN gains 1 and shifts 0,
// the head N(0, 1/feat)). It fails on a device without tensor.ConvDevice.
func NewResNet(dev tensor.Device, cfg ResNetConfig, seed uint64) (*ResNet, error) {
	if _, err := tensor.AsConv(dev); err != nil {
		return nil, fmt.Errorf("model: ResNet: %w", err)
	}
	stages, ok := resnetStages[cfg.Depth]
	if !ok {
		return nil, fmt.Errorf("model: ResNetConfig.Depth = %d: want 18, 34 or 50", cfg.Depth)
	}
	if cfg.Stem != "imagenet" && cfg.Stem != "small" {
		return nil, fmt.Errorf("model: ResNetConfig.Stem = %q: want imagenet or small", cfg.Stem)
	}
	if cfg.Width <= 0 || cfg.Classes <= 0 || cfg.InC <= 0 || cfg.InH <= 0 || cfg.InW <= 0 {
		return nil, fmt.Errorf("model: ResNetConfig width %d, classes %d, input %d×%d×%d: want all > 0", cfg.Width, cfg.Classes, cfg.InC, cfg.InH, cfg.InW)
	}
	if err := checkCommon(dev, "ResNetConfig", 0, cfg.Compute, cfg.Checkpoint); err != nil {
		return nil, err
	}
	// A device may compute in a dtype it cannot convolve in (the CUDA device: bf16).
	if c, ok := dev.(interface{ CheckConvCompute(tensor.DType) error }); ok {
		if err := c.CheckConvCompute(cfg.Compute); err != nil {
			return nil, fmt.Errorf("model: ResNetConfig.Compute = %s: %w", cfg.Compute, err)
		}
	}
	m := &ResNet{Cfg: cfg, dev: dev, ps: NewParams(dev), bufs: NewBuffers(dev)}
	unit := func(name string, in, out, k, stride int, relu bool) *cbr {
		u := &cbr{conv: NewConv2d(m.ps, name+".conv", in, out, k, stride, k/2, false),
			bn: NewBatchNorm2d(m.ps, m.bufs, name+".bn", out), relu: relu, name: name}
		u.conv.Geom.Layout, u.bn.Layout = cfg.Layout, cfg.Layout
		return u
	}
	w := cfg.Width
	if cfg.Stem == "imagenet" {
		m.stem = unit("stem", cfg.InC, w, 7, 2, true)
		m.pool = true
	} else {
		m.stem = unit("stem", cfg.InC, w, 3, 1, true)
	}
	bottleneck := cfg.Depth >= 50
	in := w
	for si, n := range stages {
		cw := w << si // the stage's inner width
		for bi := 0; bi < n; bi++ {
			stride := 1
			if si > 0 && bi == 0 {
				stride = 2
			}
			name := fmt.Sprintf("layer%d.%d", si+1, bi)
			b := &resBlock{name: name}
			out := cw
			if bottleneck {
				out = 4 * cw
				b.units = []*cbr{unit(name+".u0", in, cw, 1, 1, true), unit(name+".u1", cw, cw, 3, stride, true), unit(name+".u2", cw, out, 1, 1, false)}
			} else {
				b.units = []*cbr{unit(name+".u0", in, cw, 3, stride, true), unit(name+".u1", cw, out, 3, 1, false)}
			}
			if stride != 1 || in != out {
				b.down = unit(name+".down", in, out, 1, stride, false)
			}
			m.blocks = append(m.blocks, b)
			in = out
		}
	}
	m.feat = in
	m.head = NewLinear(m.ps, "fc", in, cfg.Classes, float32(math.Sqrt(1/float64(in))), true)
	m.ps.Build(cfg.Compute)
	m.ps.Init(seed)
	m.bufs.Build()
	m.loss = dev.Alloc(tensor.F32, "loss", 1)
	dev.Fill(m.loss, 0)
	return m, nil
}

func (m *ResNet) Params() *Params { return m.ps }

// poolGeom is the imagenet stem's max pool: 3×3, stride 2, padding 1.
func (m *ResNet) poolGeom() tensor.ConvGeom {
	return tensor.ConvGeom{KH: 3, KW: 3, Stride: 2, Pad: 1, Layout: m.Cfg.Layout}
}
func (m *ResNet) Buffers() *Buffers { return m.bufs }

// Blocks is the number of residual blocks (what Checkpoint counts).
func (m *ResNet) Blocks() int { return len(m.blocks) }

// Forward: X (B, InC·InH·InW) f32 read as (B,InC,InH,InW), Targets (B) i32 → mean loss (1) f32.
// With train the BN layers use batch statistics and move their running statistics; without,
// they use the running statistics and nothing is saved.
func (m *ResNet) Forward(in Inputs, train bool) *tensor.Tensor {
	dev, dt, cfg := m.dev, m.Cfg.Compute, m.Cfg
	m.Release()
	if in.X == nil || in.Targets == nil {
		panic("model: ResNet.Forward needs Inputs.X and Inputs.Targets")
	}
	B := in.X.Dim(0)
	m.in, m.train = in, train
	if train {
		cacheConvFilters(dev, true) // the filters' derived copies, from here to the end of Backward
	}
	m.count = in.Valid
	if m.count <= 0 {
		m.count = CountTargets(in.Targets)
	}
	x := m.stemInput()
	a := &m.act
	a.stem = m.stem.forward(dev, x, dt, train, true)
	cur := a.stem.a
	if m.pool {
		g := m.poolGeom()
		_, ch, h, w := cfg.Layout.Dims(cur.Shape())
		oh, ow := g.OutHW(h, w)
		a.pooled = dev.Alloc(dt, "stem.pool", cfg.Layout.Shape(B, ch, oh, ow)...)
		a.arg = dev.Alloc(tensor.I32, "stem.pool.arg", cfg.Layout.Shape(B, ch, oh, ow)...)
		MaxPool2dForward(dev, a.pooled, a.arg, cur, g)
		if !train {
			a.stem.free(dev)
			dev.Free(a.arg)
			a.arg = nil
		} else if m.dropsStem() {
			// Only the stem's backward reads these, and it is the last: the pool's argmax and the
			// stem's output are recomputed there from what stays (z and the max pool's input
			// geometry), the input from Inputs.X (Backward). 4.4 MB a 224² sample in f32.
			freeAll(dev, a.stem.a, a.arg)
			a.stem.a, a.arg = nil, nil
			freeLive(dev, m.xin)
			m.xin = nil
			if cfg.Checkpoint != 0 {
				// Checkpointing trades time for memory: the stem's convolution output goes too
				// (its recompute is one convolution, ~3% of a forward), 3.1 MB a 224² sample in
				// f32, which a checkpointed step's peak (in the first stage's backward) holds.
				dev.Free(a.stem.z)
				a.stem.z = nil
			}
		}
		cur = a.pooled
	} else if !train {
		a.stem.a = nil // cur, freed below
	}
	for i, b := range m.blocks {
		s := b.forward(dev, cur, dt, train, true)
		if train {
			if checkpointed(cfg.Checkpoint, i) {
				s.dropInner(dev)
			}
		} else {
			dev.Free(cur)
		}
		a.blocks = append(a.blocks, s)
		cur = s.out
	}
	a.feats = dev.Alloc(dt, "pool", B, m.feat)
	GlobalAvgPoolForward(dev, cfg.Layout, a.feats, cur)
	m.logits = dev.Alloc(dt, "logits", B, cfg.Classes)
	m.head.Forward(m.logits, a.feats)
	if !train {
		dev.Free(cur)
		dev.Free(a.feats)
		*a = resnetActs{}
		freeLive(dev, m.xin)
		m.xin = nil
	}
	losses := dev.Alloc(tensor.F32, "losses", B)
	CrossEntropyForward(dev, m.loss, losses, m.logits, in.Targets, m.count)
	dev.Free(losses)
	return m.loss
}

// stemInput is what the stem convolves: Inputs.X as (B,InC,InH,InW), or a copy in Compute's dtype
// and Cfg.Layout (m.xin) where those differ from X's.
func (m *ResNet) stemInput() *tensor.Tensor {
	dev, dt, cfg := m.dev, m.Cfg.Compute, m.Cfg
	B := m.in.X.Dim(0)
	x := m.in.X.Reshape(B, cfg.InC, cfg.InH, cfg.InW)
	if dt != x.DType() { // mixed precision: the stem reads an f16 copy
		m.xin = dev.Alloc(dt, "input", x.Shape()...)
		dev.Copy(m.xin, x)
		x = m.xin
	}
	if cfg.Layout == tensor.NHWC { // (B,C,H·W) → (B,H·W,C)
		t := dev.Alloc(dt, "input.nhwc", tensor.NHWC.Shape(B, cfg.InC, cfg.InH, cfg.InW)...)
		dev.Permute0213(t.Reshape(B, cfg.InH*cfg.InW, cfg.InC, 1), x.Reshape(B, cfg.InC, cfg.InH*cfg.InW, 1))
		freeLive(dev, m.xin)
		m.xin, x = t, t
	}
	return x
}

// dropsStem says whether a training forward frees the stem's output, the max pool's argmax and
// the stem's input copy, for Backward to recompute (the imagenet stem, whose output only the max
// pool reads; not under SyncBatchNorm, whose statistics are a collective): at the step's peak,
// the end of forward, they are 4.4 MB of a 224² sample's ~90 in f32 (PyTorch keeps them), and
// their recompute, at the end of backward, is one batch norm and one max pool over the stem's
// output. Under checkpointing the stem's convolution output goes too (one convolution more).
func (m *ResNet) dropsStem() bool {
	return resnetDropStem && m.pool && m.stem.bn.Sync == nil
}

// Backward: gradients of scale·loss into the slab, checkpointed blocks recomputed.
func (m *ResNet) Backward(scale float32) {
	if !m.train {
		panic("model: ResNet.Backward without a training Forward")
	}
	dev, dt, cfg := m.dev, m.Cfg.Compute, m.Cfg
	a := &m.act
	B := m.in.X.Dim(0)
	dlog := dev.Alloc(dt, "dlogits", B, cfg.Classes)
	CrossEntropyBackward(dev, dlog, m.logits, m.in.Targets, scale, m.count)
	dfeat := dev.Alloc(dt, "dpool", B, m.feat)
	m.head.Backward(dfeat, dlog, a.feats)
	dev.Free(dlog)
	dev.Free(a.feats)
	a.feats = nil
	last := a.blocks[len(a.blocks)-1].out
	dcur := dev.Alloc(dt, "dblock", last.Shape()...)
	GlobalAvgPoolBackward(dev, cfg.Layout, dcur, dfeat)
	dev.Free(dfeat)
	stemOut := a.stem.a
	if m.pool {
		stemOut = a.pooled
	}
	// Each block but the first takes its dx through the ReLU that ends the block before it
	// (where the device fuses it), which then skips that pass.
	fused, masked := fusedAddReLU(dev) != nil, false
	for i := len(m.blocks) - 1; i >= 0; i-- {
		x := stemOut
		if i > 0 {
			x = a.blocks[i-1].out
		}
		s := &a.blocks[i]
		if s.ckpt {
			kept := s.out
			*s = m.blocks[i].forward(dev, x, dt, true, false)
			dev.Free(kept)
		}
		dx := dev.Alloc(dt, m.blocks[i].name+".dx", x.Shape()...)
		maskX := fused && i > 0
		m.blocks[i].backward(dev, dx, dcur, x, s, masked, maskX)
		dev.Free(dcur)
		dcur, masked = dx, maskX
	}
	var x *tensor.Tensor // the stem's input, where backward has to make it again
	if m.pool {
		if a.stem.a == nil { // dropped by forward (dropsStem): the same bits again
			if a.stem.z == nil { // and under checkpointing the convolution's output
				x = m.stemInput()
				a.stem.z = dev.Alloc(dt, "stem.z", m.stem.conv.OutShape(x)...)
				m.stem.conv.Forward(a.stem.z, x)
			}
			m.stem.recompute(dev, &a.stem)
			a.arg = dev.Alloc(tensor.I32, "stem.pool.arg", a.pooled.Shape()...)
			// into pooled, which nothing reads any more (block 0's backward is done)
			MaxPool2dForward(dev, a.pooled, a.arg, a.stem.a, m.poolGeom())
		}
		ds := dev.Alloc(dt, "stem.da", a.stem.a.Shape()...)
		MaxPool2dBackward(dev, ds, dcur, a.arg, m.poolGeom())
		dev.Free(dcur)
		freeAll(dev, a.arg, a.pooled)
		a.arg, a.pooled = nil, nil
		dcur = ds
	}
	if x == nil {
		x = m.xin
	}
	if x == nil && m.dropsStem() {
		x = m.stemInput() // dropped by forward: the copy again (m.xin, freed below), or X itself
	}
	if x == nil {
		x = m.in.X.Reshape(B, cfg.InC, cfg.InH, cfg.InW)
	}
	m.stem.backward(dev, nil, dcur, x, &a.stem)
	dev.Free(dcur)
	a.stem.free(dev)
	a.blocks = a.blocks[:0]
	m.train = false
	freeLive(dev, m.xin)
	m.xin = nil
	cacheConvFilters(dev, false)
}

// Predict: out (B) i32 = argmax of the last Forward's logits.
func (m *ResNet) Predict(out *tensor.Tensor) {
	if m.logits == nil {
		panic("model: ResNet.Predict before Forward")
	}
	m.dev.ArgMax(out, m.logits)
}

// Release frees what the previous forward (and an interrupted backward) kept: see Releaser.
func (m *ResNet) Release() {
	dev := m.dev
	a := &m.act
	a.stem.free(dev)
	freeLive(dev, a.pooled, a.arg, a.feats)
	for i := range a.blocks {
		s := &a.blocks[i]
		for j := range s.units {
			if s.units[j].a == s.out {
				s.units[j].a = nil
			}
			s.units[j].free(dev)
		}
		s.down.free(dev)
		freeLive(dev, s.out)
	}
	*a = resnetActs{}
	freeLive(dev, m.logits)
	m.logits = nil
	freeLive(dev, m.xin)
	m.xin = nil
	m.train = false
	cacheConvFilters(dev, false) // an interrupted backward's
}

// Free releases every buffer, the parameters and the BN buffers.
func (m *ResNet) Free() {
	m.Release()
	freeAll(m.dev, m.loss)
	m.loss = nil
	m.ps.Free()
	m.bufs.Free()
}

var (
	_ Model    = (*ResNet)(nil)
	_ Releaser = (*ResNet)(nil)
	_ Buffered = (*ResNet)(nil)
)

// BatchNorms lists every BatchNorm layer (model.BatchNormed), stem first, in forward order.
func (m *ResNet) BatchNorms() []*BatchNorm2d {
	out := []*BatchNorm2d{m.stem.bn}
	for _, b := range m.blocks {
		for _, u := range b.units {
			out = append(out, u.bn)
		}
		if b.down != nil {
			out = append(out, b.down.bn)
		}
	}
	return out
}

var _ BatchNormed = (*ResNet)(nil)
