package model

import (
	"fmt"
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// MLPConfig describes a multi-layer perceptron classifier.
type MLPConfig struct {
	// Widths are the layer sizes from input to classes, e.g. {784, 1024, 1024, 10}: len−1 Linear
	// layers, an activation (and dropout) after every one but the last.
	Widths     []int
	Activation string       // "relu" (default) or "gelu"
	Dropout    float32      // probability after each hidden activation, in [0,1)
	Compute    tensor.DType // F32, or F16 or BF16 for mixed precision (a 16-bit weights copy and activations)
	// Checkpoint recomputes hidden stages in backward instead of keeping their activations:
	// 0 none, 1 every stage, N every Nth stage (0, N, 2N, …). A checkpointed stage keeps only its
	// output (the next stage's input).
	Checkpoint int
}

// MLP is Linear → act → dropout stages followed by a Linear head and softmax cross-entropy.
//
// Shapes: B batch, Widths[j] the width entering Linear j. X (B,Widths[0]) f32, logits (B,K).
type MLP struct {
	Cfg    MLPConfig
	Layers []*Linear // Linear j: (Widths[j+1], Widths[j])
	act    Activation
	dev    tensor.Device
	ps     *Params
	seed   uint64
	names  []string // "fc.j": activation tags
	sites  []string // "fc.j.drop": dropout site per hidden stage

	loss   *tensor.Tensor // (1) f32
	logits *tensor.Tensor // (B,K) of the last forward
	stages []mlpStage     // saved hidden-stage activations of the last training forward
	in     Inputs         // last forward's inputs
	count  int            // valid targets of the last forward
	train  bool           // the last forward saved activations for Backward
}

// mlpStage holds one hidden stage's activations: z = x·Wᵀ + b, h = act(z), d = dropout(h).
type mlpStage struct {
	z    *tensor.Tensor // (B,W) pre-activation; kept for GELU's backward only
	h    *tensor.Tensor // (B,W) activation output (ReLU's backward reads it)
	d    *tensor.Tensor // (B,W) after dropout; nil without dropout
	seed uint64         // dropout seed
	ckpt bool           // only out() is kept; z/h are recomputed in backward
}

// out is the stage's output, the next Linear's input.
func (s *mlpStage) out() *tensor.Tensor {
	if s.d != nil {
		return s.d
	}
	return s.h
}

func (s *mlpStage) free(dev tensor.Device) {
	freeAll(dev, s.z, s.h, s.d)
	*s = mlpStage{}
}

// NewMLP builds and initialises an MLP (He init N(0, 2/in) for hidden layers, N(0, 1/in) for the
// head, zero biases). Errors name the bad field.
func NewMLP(dev tensor.Device, cfg MLPConfig, seed uint64) (*MLP, error) {
	if len(cfg.Widths) < 2 {
		return nil, fmt.Errorf("model: MLPConfig.Widths %v: need at least input and output widths", cfg.Widths)
	}
	for i, w := range cfg.Widths {
		if w <= 0 {
			return nil, fmt.Errorf("model: MLPConfig.Widths[%d] = %d: widths must be positive", i, w)
		}
	}
	act, err := ParseActivation(cfg.Activation)
	if err != nil {
		return nil, fmt.Errorf("model: MLPConfig.Activation: %w", err)
	}
	if err := checkCommon(dev, "MLPConfig", cfg.Dropout, cfg.Compute, cfg.Checkpoint); err != nil {
		return nil, err
	}
	m := &MLP{Cfg: cfg, act: act, dev: dev, ps: NewParams(dev), seed: seed}
	n := len(cfg.Widths) - 1
	for j := 0; j < n; j++ {
		in, out := cfg.Widths[j], cfg.Widths[j+1]
		std := float32(math.Sqrt(2 / float64(in)))
		if j == n-1 {
			std = float32(math.Sqrt(1 / float64(in)))
		}
		m.Layers = append(m.Layers, NewLinear(m.ps, fmt.Sprintf("fc.%d", j), in, out, std, true))
		m.names = append(m.names, fmt.Sprintf("fc.%d", j))
		m.sites = append(m.sites, fmt.Sprintf("fc.%d.drop", j))
	}
	m.ps.Build(cfg.Compute)
	m.ps.Init(seed)
	m.loss = dev.Alloc(tensor.F32, "loss", 1)
	dev.Fill(m.loss, 0)
	return m, nil
}

func checkCommon(dev tensor.Device, cfg string, dropout float32, compute tensor.DType, checkpoint int) error {
	if !(dropout >= 0 && dropout < 1) {
		return fmt.Errorf("model: %s.Dropout = %v: want a probability in [0,1)", cfg, dropout)
	}
	if err := tensor.CheckCompute(dev, compute); err != nil {
		return fmt.Errorf("model: %s.Compute = %s: %w", cfg, compute, err)
	}
	if checkpoint < 0 {
		return fmt.Errorf("model: %s.Checkpoint = %d: want 0 (none), 1 (every) or N (every Nth)", cfg, checkpoint)
	}
	return nil
}

func (m *MLP) Params() *Params { return m.ps }

// stageForward runs hidden stage j on x (B,Widths[j]); dropout only with train.
func (m *MLP) stageForward(j int, x *tensor.Tensor, seed uint64, train bool) mlpStage {
	dev, dt := m.dev, m.Cfg.Compute
	B, W := x.Dim(0), m.Cfg.Widths[j+1]
	s := mlpStage{seed: seed}
	s.z = dev.Alloc(dt, m.names[j]+".z", B, W)
	m.Layers[j].Forward(s.z, x)
	s.h = dev.Alloc(dt, m.names[j]+".h", B, W)
	ActivationForward(dev, m.act, s.h, s.z)
	if !m.act.NeedsInput() {
		dev.Free(s.z)
		s.z = nil
	}
	if p := m.Cfg.Dropout; p > 0 && train {
		s.d = dev.Alloc(dt, m.sites[j], B, W)
		DropoutForward(dev, s.d, s.h, p, seed)
	}
	return s
}

// Forward: X (B,In) f32 and Targets (B) i32 → mean loss (1) f32.
func (m *MLP) Forward(in Inputs, train bool) *tensor.Tensor {
	dev := m.dev
	m.Release()
	if in.X == nil || in.Targets == nil {
		panic("model: MLP.Forward needs Inputs.X and Inputs.Targets")
	}
	B := in.X.Dim(0)
	m.in, m.train = in, train
	m.count = in.Valid
	if m.count <= 0 {
		m.count = CountTargets(in.Targets)
	}

	x := in.X
	n := len(m.Layers)
	for j := 0; j < n-1; j++ {
		s := m.stageForward(j, x, dropSeed(m.seed, in.Seed, m.sites[j]), train)
		if train {
			if checkpointed(m.Cfg.Checkpoint, j) { // keep only the output
				freeAll(dev, s.z)
				s.z = nil
				if s.d != nil {
					dev.Free(s.h)
					s.h = nil
				}
				s.ckpt = true
			}
		} else if j > 0 {
			m.stages[j-1].free(dev)
		}
		m.stages = append(m.stages, s)
		x = s.out()
	}
	m.logits = dev.Alloc(m.Cfg.Compute, "logits", B, m.Cfg.Widths[n])
	m.Layers[n-1].Forward(m.logits, x)
	if !train {
		for j := range m.stages {
			m.stages[j].free(dev)
		}
		m.stages = m.stages[:0]
	}
	losses := dev.Alloc(tensor.F32, "losses", B)
	CrossEntropyForward(dev, m.loss, losses, m.logits, in.Targets, m.count)
	dev.Free(losses)
	return m.loss
}

// Backward: gradients of scale·loss into the slab, hidden stages recomputed where checkpointed.
func (m *MLP) Backward(scale float32) {
	if !m.train {
		panic("model: MLP.Backward without a training Forward")
	}
	dev, dt := m.dev, m.Cfg.Compute
	B := m.in.X.Dim(0)
	n := len(m.Layers)
	dcur := dev.Alloc(dt, "dlogits", B, m.Cfg.Widths[n])
	CrossEntropyBackward(dev, dcur, m.logits, m.in.Targets, scale, m.count)
	for j := n - 1; j >= 0; j-- {
		var kept *tensor.Tensor
		if j < n-1 { // hidden stage j: dropout and activation backward
			s := &m.stages[j]
			if s.ckpt {
				kept = s.out()
				x := m.in.X
				if j > 0 {
					x = m.stages[j-1].out()
				}
				*s = m.stageForward(j, x, s.seed, true)
			}
			if s.d != nil {
				dh := dev.Alloc(dt, m.names[j]+".dh", B, m.Cfg.Widths[j+1])
				DropoutBackward(dev, dh, dcur, m.Cfg.Dropout, s.seed)
				dev.Free(dcur)
				dcur = dh
			}
			saved := s.h
			if m.act.NeedsInput() {
				saved = s.z
			}
			ActivationBackward(dev, m.act, dcur, dcur, saved)
		}
		x := m.in.X
		if j > 0 {
			x = m.stages[j-1].out()
		}
		var dx *tensor.Tensor
		if j > 0 {
			dx = dev.Alloc(dt, m.names[j-1]+".dout", B, m.Cfg.Widths[j])
		}
		m.Layers[j].Backward(dx, dcur, x)
		dev.Free(dcur)
		dcur = dx
		if j < n-1 {
			m.stages[j].free(dev)
			freeAll(dev, kept)
		}
	}
	m.stages = m.stages[:0]
	m.train = false
}

// Predict: out (B) i32 = argmax of the last Forward's logits (valid before and after Backward).
func (m *MLP) Predict(out *tensor.Tensor) {
	if m.logits == nil {
		panic("model: MLP.Predict before Forward")
	}
	m.dev.ArgMax(out, m.logits)
}

// Release frees what the previous forward (and an interrupted backward) kept: see Releaser.
// Forward starts with it, Free ends with it.
func (m *MLP) Release() {
	for j := range m.stages {
		s := &m.stages[j]
		freeLive(m.dev, s.z, s.h, s.d)
		*s = mlpStage{}
	}
	m.stages = m.stages[:0]
	freeLive(m.dev, m.logits)
	m.logits = nil
	m.train = false
}

// Free releases every buffer and the parameters.
func (m *MLP) Free() {
	m.Release()
	freeAll(m.dev, m.loss)
	m.loss = nil
	m.ps.Free()
}
