package model

import (
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// Buffers is a model's state that no gradient trains (BatchNorm's running mean and variance), in
// one f32 slab like Params: Add every buffer → Build (one allocation, views pointed in, initial
// values filled). The optimizer never sees it; DDP broadcasts it from rank 0 (Buffered).
type Buffers struct {
	dev  tensor.Device
	List []Buffer
	Data *tensor.Tensor // (N) f32
	N    int
}

// Buffer is one named buffer: its place in the slab and where its view goes.
type Buffer struct {
	Name   string
	Offset int
	Len    int
	Init   float32
	T      *tensor.Tensor
	dst    **tensor.Tensor
}

// Buffered is an optional Model ability: a model with buffers. The trainer broadcasts them
// from rank 0 with the parameters at the start and after every optimizer step.
type Buffered interface {
	Buffers() *Buffers
}

// NewBuffers starts an empty buffer set on dev.
func NewBuffers(dev tensor.Device) *Buffers { return &Buffers{dev: dev} }

// Add registers a buffer of n elements starting at init; *dst gets its view at Build.
func (bs *Buffers) Add(name string, init float32, n int, dst **tensor.Tensor) {
	if bs.Data != nil {
		panic("model: Buffers.Add after Build")
	}
	bs.List = append(bs.List, Buffer{Name: name, Offset: bs.N, Len: n, Init: init, dst: dst})
	bs.N += n
}

// Build allocates the slab, points the views and fills the initial values.
func (bs *Buffers) Build() {
	bs.Data = bs.dev.Alloc(tensor.F32, "buffers", max(bs.N, 1))
	for i := range bs.List {
		b := &bs.List[i]
		b.T = bs.Data.View(b.Offset, b.Len)
		bs.dev.Fill(b.T, b.Init)
		if b.dst != nil {
			*b.dst = b.T
		}
	}
}

// Get returns the named buffer's view, or nil.
func (bs *Buffers) Get(name string) *tensor.Tensor {
	for _, b := range bs.List {
		if b.Name == name {
			return b.T
		}
	}
	return nil
}

// Free releases the slab.
func (bs *Buffers) Free() {
	if bs.Data != nil {
		bs.dev.Free(bs.Data)
		bs.Data = nil
	}
}

func (bs *Buffers) String() string {
	return fmt.Sprintf("buffers(%d in %d elements)", len(bs.List), bs.N)
}
