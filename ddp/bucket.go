package ddp

import (
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
)

// bucket is a contiguous range [lo, hi) of the gradient slab holding whole parameters, or one
// piece of a parameter larger than the bucket cap (splitRange). Buckets are numbered in the order
// gradients become ready: bucket 0 holds the last-registered parameters.
type bucket struct {
	index   int
	lo, hi  int            // element range in the slab
	params  []*model.Param // members, in registration order
	pending int            // members not yet ready in this backward
	host    []float32      // staging buffer, len hi-lo, reused every step
	view    *tensor.Tensor // the slab range
	// timing of the last all-reduce (trace and hidden fraction)
	start, end int64 // ns since engine epoch
}

// planBuckets cuts the parameters, walked in reverse registration order, into buckets of at most
// capBytes of f32 gradient each (a parameter larger than the cap gets a bucket to itself).
// Because parameters are laid out in registration order, each bucket is a contiguous slab range.
// It is a pure function of the parameter sizes, so every rank plans the same buckets.
func planBuckets(sizes []int, capBytes int) [][2]int {
	// returns for each bucket [first, last] parameter indices (first ≤ last), bucket 0 holds the
	// highest indices.
	var out [][2]int
	capElems := max(1, capBytes/4)
	last := len(sizes) - 1
	acc := 0
	for i := len(sizes) - 1; i >= 0; i-- {
		if acc > 0 && acc+sizes[i] > capElems {
			out = append(out, [2]int{i + 1, last})
			last = i
			acc = 0
		}
		acc += sizes[i]
	}
	if last >= 0 {
		out = append(out, [2]int{0, last})
	}
	return out
}

// splitRange cuts the element range [lo, hi) of one parameter larger than the cap into pieces of
// near-equal size, about capElems elements at most (rounded up to a multiple of 64, but the last), so
// every piece starts 256-byte aligned relative to lo. A large parameter (GPT's tied embedding is
// 38.6 M values, ready only when backward ends) then goes out as several all-reduces that the
// channels run at once, instead of one that a single channel carries alone. The pieces depend on
// the cap only, never on the number of channels, so results stay bit-identical across channels.
func splitRange(lo, hi, capElems int) [][2]int {
	n := hi - lo
	if n <= capElems || capElems < 64 {
		return [][2]int{{lo, hi}}
	}
	parts := (n + capElems - 1) / capElems
	piece := (n + parts - 1) / parts
	piece = (piece + 63) / 64 * 64
	var out [][2]int
	for a := lo; a < hi; a += piece {
		out = append(out, [2]int{a, min(a+piece, hi)})
	}
	return out
}
