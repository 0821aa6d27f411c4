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

// Release: see Releaser.
func (m *GPT) Release() {
	dev := m.dev
	for _, a := range m.acts {
		if a.Attn != nil {
			s := a.Attn
			freeLive(dev, s.Q, s.K, s.V, s.Att, s.Y, s.QKV, s.LSE)
		}
		freeLive(dev, a.LN1, a.Mean1, a.Rstd1, a.Res1, a.LN2, a.Mean2, a.Rstd2, a.FC, a.Gelu, a.Out)
	}
	m.acts = m.acts[:0]
	freeLive(dev, m.x0, m.lnf, m.meanf, m.rstdf, m.dlnf)
	m.x0, m.lnf, m.meanf, m.rstdf, m.dlnf = nil, nil, nil, nil, nil
	m.train = false
}

// Release: see Releaser.
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
