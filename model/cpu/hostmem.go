package cpu

import "github.com/goddp/goddp/model/tensor"

// The CPU device's tensors are Go memory: tensor.HostMemory hands them out as they are.

var _ tensor.HostMemory = (*Device)(nil)

// HostF32 is t's own elements (t f32); it panics on another dtype.
func (c *Device) HostF32(t *tensor.Tensor) []float32 { return f32s(t) }

// HostHalf is t's own 16-bit elements (t f16 or bf16); it panics on another dtype.
func (c *Device) HostHalf(t *tensor.Tensor) []uint16 { return h16s(t) }
