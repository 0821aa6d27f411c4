package model

import "github.com/goddp/goddp/model/tensor"

// Releaser is an optional Model ability: Release frees what the last Forward and Backward kept,
// also when an *OOMError interrupted them halfway (tensors those already freed are skipped), so
// the model is ready for the next Forward. micro_batch: auto (worker/autobatch.go) uses it to
// clean up after a trial step that ran out of memory.
//
// What it cannot reach are the temporaries local to the interrupted function; the caller finds
// those with an Observable device (they are the blocks allocated during the trial and still live).
type Releaser interface {
	Release()
}

var (
	_ Releaser = (*GPT)(nil)
	_ Releaser = (*MLP)(nil)
)

// freeLive frees the tensors that still hold a block (a nil tensor or an already freed one is
// skipped).
func freeLive(dev tensor.Device, ts ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil && t.Buffer() != nil {
			dev.Free(t)
		}
	}
}
