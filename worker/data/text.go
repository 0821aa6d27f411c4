package data

import (
	"fmt"
	"os"
)

// Text is a byte-level corpus: every byte is a token in [0, 256). Set the
// context length with WithContext to use it as a language-modelling Dataset.
//
// With context T, a text of L bytes has floor((L-1)/T) samples: window i is
// the inputs Bytes[i*T : i*T+T] and the targets Bytes[i*T+1 : i*T+T+1] (the
// next byte of each input). The windows do not overlap, so one epoch reads
// every byte once.
type Text struct {
	Path  string
	Bytes []byte
	T     int // context length; 0 until WithContext
}

// LoadText reads the file at path and splits it: the first
// (1-evalFraction) of its bytes are for training, the tail for evaluation.
func LoadText(path string, evalFraction float64) (train, eval *Text, err error) {
	if evalFraction <= 0 || evalFraction >= 1 {
		return nil, nil, fmt.Errorf("data: eval fraction %g for %s: want 0 < f < 1", evalFraction, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("data: %s: %d bytes is too short to train on", path, len(b))
	}
	cut := int(float64(len(b)) * (1 - evalFraction))
	return &Text{Path: path, Bytes: b[:cut]}, &Text{Path: path, Bytes: b[cut:]}, nil
}

// WithContext returns the text as a Dataset of windows of T tokens. It
// shares the bytes.
func (t *Text) WithContext(T int) *Text {
	if T < 1 {
		panic(fmt.Sprintf("data: context length %d", T))
	}
	return &Text{Path: t.Path, Bytes: t.Bytes, T: T}
}

// Len is the number of non-overlapping windows, floor((L-1)/T).
func (t *Text) Len() int {
	if t.T == 0 {
		panic("data: Text used as a Dataset before WithContext")
	}
	if len(t.Bytes) < 2 {
		return 0
	}
	return (len(t.Bytes) - 1) / t.T
}

func (t *Text) Layout() Layout { return Layout{SeqLen: t.T} }

// Fill writes windows idx into b.Tokens and b.Targets.
func (t *Text) Fill(b *Batch, idx []int) {
	T := t.T
	for i, j := range idx {
		src := t.Bytes[j*T : j*T+T+1]
		tok, tgt := b.Tokens[i*T:(i+1)*T], b.Targets[i*T:(i+1)*T]
		for k := 0; k < T; k++ {
			tok[k] = int32(src[k])
			tgt[k] = int32(src[k+1])
		}
	}
	b.Size = len(idx)
	b.T = T
}

var _ Dataset = (*Text)(nil)
