package tensor

import (
	"fmt"
	"strings"
)

// Buffer is a device's storage for one allocation. Only the device that made it looks inside.
type Buffer interface {
	// Bytes is the size of the allocation as counted by the allocator.
	Bytes() int64
}

// Tensor is a typed, shaped window onto a device buffer. A tensor from Device.Alloc owns its buffer;
// View and Reshape make tensors that share it (freeing a view is an error). Layers never read the
// elements: they hand tensors to device operations, which is what lets the CUDA device run them
// asynchronously on a stream.
type Tensor struct {
	dev   Device
	buf   Buffer
	off   int // element offset into buf
	n     int // element count
	shape []int
	dtype DType
	tag   string
	owner bool
}

// NewTensor wraps buf, a block of dev's, as an owning tensor. Pool.Alloc makes every tensor with
// it; a caller that knows a block only from an AllocEvent frees it through such a tensor.
func NewTensor(dev Device, buf Buffer, dt DType, tag string, shape []int) *Tensor {
	return &Tensor{dev: dev, buf: buf, n: Numel(shape), shape: append([]int(nil), shape...), dtype: dt, tag: tag, owner: true}
}

// Numel is the number of elements of a tensor of shape (1 for no dimensions); a negative
// dimension panics.
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}

func (t *Tensor) Device() Device { return t.dev }
func (t *Tensor) Buffer() Buffer { return t.buf }
func (t *Tensor) Offset() int    { return t.off } // in elements
func (t *Tensor) Len() int       { return t.n }
func (t *Tensor) Shape() []int   { return t.shape }
func (t *Tensor) DType() DType   { return t.dtype }
func (t *Tensor) Tag() string    { return t.tag }
func (t *Tensor) Owner() bool    { return t.owner }
func (t *Tensor) Bytes() int64   { return int64(t.n) * int64(t.dtype.Size()) }

// Dim returns dimension i; negative i counts from the end.
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

// Rows and Cols view the tensor as a matrix: the last dimension is the columns, all others the rows.
func (t *Tensor) Cols() int {
	if len(t.shape) == 0 {
		return 1
	}
	return t.shape[len(t.shape)-1]
}
func (t *Tensor) Rows() int {
	c := t.Cols()
	if c == 0 {
		return 0
	}
	return t.n / c
}

// View returns the elements [off, off+numel(shape)) of t, in t's dtype, with the given shape.
func (t *Tensor) View(off int, shape ...int) *Tensor {
	n := Numel(shape)
	if off < 0 || off+n > t.n {
		panic(fmt.Sprintf("tensor: view [%d,%d) out of range of %s", off, off+n, t))
	}
	return &Tensor{dev: t.dev, buf: t.buf, off: t.off + off, n: n, shape: append([]int(nil), shape...), dtype: t.dtype, tag: t.tag}
}

// Reshape is a view of all of t with another shape of the same size.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	if Numel(shape) != t.n {
		panic(fmt.Sprintf("tensor: reshape %s to %v changes the size", t, shape))
	}
	return t.View(0, shape...)
}

func (t *Tensor) String() string {
	dims := make([]string, len(t.shape))
	for i, d := range t.shape {
		dims[i] = fmt.Sprint(d)
	}
	name := t.tag
	if name == "" {
		name = "tensor"
	}
	return fmt.Sprintf("%s(%s %s)", name, t.dtype, strings.Join(dims, "×"))
}

// SameShape reports whether a and b have equal shapes.
func SameShape(a, b *Tensor) bool {
	if len(a.shape) != len(b.shape) {
		return false
	}
	for i := range a.shape {
		if a.shape[i] != b.shape[i] {
			return false
		}
	}
	return true
}

// ToHost copies t to a new float32 slice (waiting for the device). Tests and diagnostics only.
func ToHost(t *Tensor) []float32 {
	out := make([]float32, t.Len())
	t.dev.Download(out, t)
	return out
}

// FromHost allocates a tensor on dev and uploads x into it.
func FromHost(dev Device, dt DType, tag string, x []float32, shape ...int) *Tensor {
	t := dev.Alloc(dt, tag, shape...)
	dev.Upload(t, x)
	return t
}
