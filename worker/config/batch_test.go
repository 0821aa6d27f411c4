package config

import (
	"strings"
	"testing"
)

func TestResolveAutoBatch(t *testing.T) {
	for _, x := range []struct {
		k, g, fits, world int
		want              Batch
		errHas            string
	}{
		{fits: 48, world: 2, want: Batch{Micro: 48, Accum: 1, Global: 96, World: 2}},
		{k: 3, fits: 48, world: 2, want: Batch{Micro: 48, Accum: 3, Global: 288, World: 2}},
		{g: 64, fits: 12, world: 1, want: Batch{Micro: 8, Accum: 8, Global: 64, World: 1}},
		{g: 64, k: 5, fits: 12, world: 2, want: Batch{Micro: 8, Accum: 4, Global: 64, World: 2}}, // accumulation follows
		{g: 64, fits: 100, world: 2, want: Batch{Micro: 32, Accum: 1, Global: 64, World: 2}},
		{g: 96, fits: 7, world: 4, want: Batch{Micro: 6, Accum: 4, Global: 96, World: 4}},
		{g: 63, fits: 8, world: 2, errHas: "not divisible by the world size"},
		{fits: 0, world: 2, errHas: "no micro-batch fits"},
	} {
		tc := Default().Train
		tc.MicroBatchAuto, tc.GradAccumSteps, tc.GlobalBatch = true, x.k, x.g
		got, err := tc.ResolveAutoBatch(x.fits, x.world)
		if x.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), x.errHas) {
				t.Errorf("%+v: %v, want %q", x, err, x.errHas)
			}
			continue
		}
		if err != nil || got != x.want {
			t.Errorf("%+v: %+v %v, want %+v", x, got, err, x.want)
		}
		if got.Micro*got.Accum*got.World != got.Global {
			t.Errorf("%+v: %+v breaks global = micro × accum × world", x, got)
		}
	}
}

func TestDivisorAtMost(t *testing.T) {
	for _, tc := range []struct{ n, b, want int }{
		{512, 97, 64}, {512, 600, 512}, {96, 40, 32}, {7, 6, 1}, {12, 12, 12}, {1, 5, 1}, // from worker's autobatch_test.go
		{64, 12, 8}, {64, 100, 64}, {96, 7, 6}, {12, 1, 1},
	} {
		if got := DivisorAtMost(tc.n, tc.b); got != tc.want {
			t.Errorf("DivisorAtMost(%d, %d) = %d, want %d", tc.n, tc.b, got, tc.want)
		}
	}
}

// WithBatch writes the batch in; micro_batch: auto stays auto (and so in the YAML and Hash).
func TestWithBatch(t *testing.T) {
	tc := Default().Train
	tc.MicroBatchAuto, tc.GlobalBatch = true, 64
	b, err := tc.ResolveAutoBatch(16, 2)
	if err != nil {
		t.Fatal(err)
	}
	w := tc.WithBatch(b)
	if w.MicroBatch != 16 || w.GradAccumSteps != 2 || w.GlobalBatch != 64 || !w.MicroBatchAuto {
		t.Errorf("WithBatch: %+v", w)
	}
	if tc.MicroBatch != 0 || tc.GradAccumSteps != 0 {
		t.Errorf("WithBatch changed its receiver: %+v", tc)
	}
}
