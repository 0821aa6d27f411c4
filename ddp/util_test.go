package ddp

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }
func contains(s, sub string) bool     { return strings.Contains(s, sub) }

// eachRank runs body for W ranks at once, each a goroutine with its own group over one in-process
// network, and waits for all of them; the groups are closed when body returns.
func eachRank(t *testing.T, W int, body func(r int, g *allreduce.Group)) {
	t.Helper()
	nw := allreduce.NewInprocNetwork(W)
	var wg sync.WaitGroup
	for r := 0; r < W; r++ {
		g, err := allreduce.NewGroup(context.Background(), allreduce.Config{Rank: r, WorldSize: W, Transport: nw.Transport(r)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close()
			body(r, g)
		}()
	}
	wg.Wait()
}

// inprocWorld runs rank(r, main, extra) for W ranks at once, each over its own groups of channels
// in-process networks (at least one: main; the others are extra channels), and returns the
// results by rank; the groups are closed when rank returns.
func inprocWorld[R any](t *testing.T, W, channels int, rank func(r int, main Comm, extra []Comm) R) []R {
	nws := make([]*allreduce.InprocNetwork, max(1, channels))
	for i := range nws {
		nws[i] = allreduce.NewInprocNetwork(W)
	}
	out := make([]R, W)
	var wg sync.WaitGroup
	for r := 0; r < W; r++ {
		var gs []Comm
		for _, nw := range nws {
			g, err := allreduce.NewGroup(context.Background(), allreduce.Config{Rank: r, WorldSize: W, Transport: nw.Transport(r)})
			if err != nil {
				t.Fatal(err)
			}
			gs = append(gs, g)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				for _, g := range gs {
					g.(*allreduce.Group).Close()
				}
			}()
			out[r] = rank(r, gs[0], gs[1:])
		}()
	}
	wg.Wait()
	return out
}

// newTestMLP is the replica the engine tests train: an MLP nFeat → nHidden → nHidden → nClass
// with GELU in compute (F32, or F16/BF16 for mixed precision), seed 3, and SGD with momentum 0.9
// over its parameters. free releases both.
func newTestMLP(t *testing.T, dev tensor.Device, compute tensor.DType) (*model.MLP, model.Optimizer, func()) {
	t.Helper()
	m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{nFeat, nHidden, nHidden, nClass}, Activation: "gelu", Compute: compute}, 3)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := model.NewSGD(m.Params(), model.SGDConfig{Momentum: 0.9})
	if err != nil {
		m.Free()
		t.Fatal(err)
	}
	return m, opt, func() { opt.Free(); m.Free() }
}
