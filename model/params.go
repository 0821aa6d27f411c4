package model

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// Params holds a model's parameters in llm.c's layout: one f32 slab each for the master weights,
// the gradients and (with mixed precision) the f16 or bf16 compute copy, and a named view per parameter
// into each. Registration order is the order of the views in the slabs; backward finishes
// parameters roughly in reverse of it, which is the order DDP buckets them.
//
// Life cycle: Add every parameter → Build (one allocation per slab) → Init → train. The optimizer
// steps the slabs; DDP all-reduces contiguous ranges of the gradient slab.
//
// Under ddp.shard_optimizer with mixed precision the f32 master may be kept for part of the slab
// only (ShardMaster, master_shard.go): Data is then nil, the master lives in a packed shard slab,
// and the views W of the parameters it does not hold whole are nil. Forward and backward read the
// 16-bit copy (Half, whole) and the MasterRead parameters' masters (held whole).
type Params struct {
	dev    tensor.Device
	List   []*Param
	byName map[string]*Param
	Data   *tensor.Tensor // (N) f32 master weights; nil while the master is sharded (ShardMaster)
	Grad   *tensor.Tensor // (N) f32 gradients
	Half   *tensor.Tensor // (N) f16 (bf16) copy used by forward/backward under fp16 (bf16); nil under fp32
	N      int            // total elements

	// OnGradReady, when set, is called by layers as soon as a parameter's gradient for this
	// backward is complete (DDP starts communication from it). Called on the training goroutine.
	OnGradReady func(p *Param)
	// OnRead, when set, is called before a layer reads a parameter's weights: its compute copy
	// (Compute, master false) or its f32 master (Master, master true). DDP's sharded step sets
	// it while the updated weights are still being all-gathered, overlapped with the next
	// forward (ddp.overlap_gather): the call returns once p's values are in place. Called on the
	// training goroutine.
	OnRead func(p *Param, master bool)

	held *heldMaster // the master of part of the slab only (ShardMaster); nil: whole, in Data
}

// Param is one named parameter: views into the slabs plus how it is initialised and decayed.
type Param struct {
	Name   string
	Shape  []int
	Index  int            // registration order
	Offset int            // element offset in the slabs
	W      *tensor.Tensor // f32 master view; nil while the master is sharded and this rank holds only part of p
	G      *tensor.Tensor // f32 gradient view
	H      *tensor.Tensor // f16 or bf16 view (nil under fp32)
	Decay  bool           // weight decay applies (matrices and embeddings; not biases or norm gains)
	// MasterRead: forward and backward read the f32 master weights (W) even under mixed precision,
	// not the 16-bit copy (LayerNorm's and BatchNorm's gains and biases). ddp's sharded step
	// all-gathers these master values as well as the 16-bit copy (ddp.Engine.GatherParams).
	MasterRead bool
	Init       Init
	ps         *Params
}

// Init says how a parameter starts: N(0, Std²) when Std > 0, otherwise the constant Value.
type Init struct {
	Std   float32
	Value float32
}

// NewParams starts an empty parameter set on dev.
func NewParams(dev tensor.Device) *Params { return &Params{dev: dev, byName: map[string]*Param{}} }

// Device is where the slabs live.
func (ps *Params) Device() tensor.Device { return ps.dev }

// Add registers a parameter; Build must not have run yet.
func (ps *Params) Add(name string, init Init, decay bool, shape ...int) *Param {
	if ps.Data != nil || ps.held != nil {
		panic("model: Params.Add after Build")
	}
	if _, dup := ps.byName[name]; dup {
		panic(fmt.Sprintf("model: parameter %q registered twice", name))
	}
	p := &Param{Name: name, Shape: append([]int(nil), shape...), Index: len(ps.List), Offset: ps.N, Decay: decay, Init: init, ps: ps}
	ps.List = append(ps.List, p)
	ps.byName[name] = p
	ps.N += tensor.Numel(shape)
	return p
}

// Get returns the named parameter or nil.
func (ps *Params) Get(name string) *Param { return ps.byName[name] }

// Build allocates the slabs and points every parameter into them. A compute dtype of F16 or BF16
// asks for the 16-bit copy (tagged params.f16 or params.bf16); F32 for none.
func (ps *Params) Build(compute tensor.DType) {
	half := compute.Half()
	ps.Data = ps.dev.Alloc(tensor.F32, "params", ps.N)
	ps.Grad = ps.dev.Alloc(tensor.F32, "grads", ps.N)
	if half {
		ps.Half = ps.dev.Alloc(compute, "params."+compute.String(), ps.N)
	}
	for _, p := range ps.List {
		p.W = ps.Data.View(p.Offset, p.Shape...)
		p.G = ps.Grad.View(p.Offset, p.Shape...)
		if half {
			p.H = ps.Half.View(p.Offset, p.Shape...)
		}
	}
	ps.dev.Fill(ps.Grad, 0)
}

// Init fills every parameter from its Init with streams derived from seed and the name, then
// refreshes the f16 copy.
func (ps *Params) Init(seed uint64) {
	for _, p := range ps.List {
		if p.Init.Std > 0 {
			ps.dev.RandNormal(p.W, p.Init.Std, tensor.DeriveSeed(seed, p.Name))
		} else {
			ps.dev.Fill(p.W, p.Init.Value)
		}
	}
	ps.SyncHalf()
}

// SyncHalf copies the master weights into the f16 slab (after loading or broadcasting weights).
// The master must be whole (not ShardMaster's).
func (ps *Params) SyncHalf() {
	ps.mustBeWhole("SyncHalf")
	if ps.Half != nil {
		ps.dev.Copy(ps.Half, ps.Data)
	}
}

// ZeroGrad clears the gradient slab (micro-step 0 of each optimizer step).
func (ps *Params) ZeroGrad() { ps.dev.Fill(ps.Grad, 0) }

// Compute is the tensor forward and backward read: the f16 copy under mixed precision. Layers
// read a parameter's weights through it (or Master), never p.W or p.H directly, so that a
// parameter still in transit (Params.OnRead) is waited for.
func (p *Param) Compute() *tensor.Tensor {
	if f := p.ps.OnRead; f != nil {
		f(p, false)
	}
	if p.H != nil {
		return p.H
	}
	return p.W
}

// Master is the f32 master weights, for the layers that read them under mixed precision too
// (MasterRead: the norms' gains and biases); it waits as Compute does.
func (p *Param) Master() *tensor.Tensor {
	if f := p.ps.OnRead; f != nil {
		f(p, true)
	}
	return p.W
}

// Ready reports that p's gradient is complete for this backward.
func (p *Param) Ready() {
	if f := p.ps.OnGradReady; f != nil {
		f(p)
	}
}

// Len is the number of elements of p.
func (p *Param) Len() int { return tensor.Numel(p.Shape) }

// Free releases the slabs (the master's shard slab too).
func (ps *Params) Free() {
	for _, t := range []*tensor.Tensor{ps.Data, ps.Grad, ps.Half} {
		if t != nil {
			ps.dev.Free(t)
		}
	}
	if ps.held != nil {
		ps.dev.Free(ps.held.slab)
		ps.held = nil
	}
	ps.Data, ps.Grad, ps.Half = nil, nil, nil
}

// Host returns the master weights as float32 on the host. The master must be whole (a sharded
// one is gathered: ddp.Engine.MasterHost).
func (ps *Params) Host() []float32 {
	ps.mustBeWhole("Host")
	return tensor.ToHost(ps.Data)
}

// SHA256 hashes the master weights' little-endian bytes: equal hashes mean bit-identical replicas.
// The master must be whole (a sharded one: HashF32 of ddp.Engine.MasterHost).
func (ps *Params) SHA256() string { return HashF32(ps.Host()) }

// HashF32 is the sha256 of x's little-endian bytes, in hex.
func HashF32(x []float32) string {
	h := sha256.New()
	var b [4096]byte
	for len(x) > 0 {
		n := min(len(x), len(b)/4)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x[i]))
		}
		h.Write(b[:4*n])
		x = x[n:]
	}
	return hex.EncodeToString(h.Sum(nil))
}
