package data

import (
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// SyntheticTokens is a language-modelling set made up on the fly, for benchmarks: sample i is a
// window of T+1 token ids drawn uniformly from [0, Vocab), a function of (Seed, i) only, whose
// first T are the inputs and last T the targets (the next token of each input), as a Text
// window's are. Every run and every rank sees the same data without reading a disk. These are
// the inputs PyTorch's GPT-2 benchmark (scripts/bench_gpt2_pytorch.py) and the model bench
// (TestCUDA_gpt2Bench) train on, so the trainer's step can be compared with theirs on the same
// kind of data: byte-level text draws from ~100 ids, a trained model's activations differ, and
// the GPU's kernels can run at other speeds on them.
type SyntheticTokens struct {
	N, T, Vocab int
	Seed        uint64
}

// NewSyntheticTokens makes n windows of t tokens from [0, vocab).
func NewSyntheticTokens(n, t, vocab int, seed uint64) (*SyntheticTokens, error) {
	if n < 1 || t < 1 || vocab < 2 {
		return nil, fmt.Errorf("data: synthetic tokens: %d samples of %d tokens from a vocabulary of %d: want at least 1, 1 and 2", n, t, vocab)
	}
	return &SyntheticTokens{N: n, T: t, Vocab: vocab, Seed: seed}, nil
}

func (s *SyntheticTokens) Len() int       { return s.N }
func (s *SyntheticTokens) Layout() Layout { return Layout{SeqLen: s.T} }

// token is position k of window i.
func (s *SyntheticTokens) token(i, k int) int32 {
	h := tensor.Mix64(s.Seed ^ tensor.Mix64(uint64(i)<<20^uint64(k)))
	return int32(h % uint64(s.Vocab))
}

// Fill writes windows idx into b.Tokens and b.Targets.
func (s *SyntheticTokens) Fill(b *Batch, idx []int) {
	T := s.T
	for i, j := range idx {
		tok, tgt := b.Tokens[i*T:(i+1)*T], b.Targets[i*T:(i+1)*T]
		prev := s.token(j, 0)
		for k := 0; k < T; k++ {
			next := s.token(j, k+1)
			tok[k], tgt[k] = prev, next
			prev = next
		}
	}
	b.Size = len(idx)
	b.T = T
}

var _ Dataset = (*SyntheticTokens)(nil)
