package data

import (
	"math/bits"
	"math/rand/v2"
)

// Permutation returns the shuffle of epoch `epoch`: a permutation of 0..n-1
// that depends only on (seed, epoch, n). Every rank computes the same one, so
// ranks agree on the data order without talking. The generator is PCG (whose
// output math/rand/v2 fixes) driving a Fisher–Yates shuffle with Lemire's
// unbiased bounded draw, all spelled out here so that the order cannot change
// with the Go version.
func Permutation(n int, seed uint64, epoch int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	r := rand.NewPCG(seed, uint64(epoch)^0x9e3779b97f4a7c15)
	for i := n - 1; i > 0; i-- {
		j := bounded(r, uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// bounded draws uniformly from [0, n) (Lemire, "Fast random integer
// generation in an interval", 2019).
func bounded(r *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return hi
}
