package model

import (
	"math"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

func tinyShardGPT(t *testing.T, compute tensor.DType) (*GPT, tensor.Device) {
	t.Helper()
	dev := cpu.New()
	m, err := NewGPT(dev, GPTConfig{Layers: 2, Width: 32, Heads: 2, Context: 16, Vocab: 64, Compute: compute}, 7)
	if err != nil {
		t.Fatal(err)
	}
	return m, dev
}

// ShardMaster keeps the f32 master of the shard and of the MasterRead parameters (the LayerNorms'
// gains and biases) only, in one packed slab; the whole slab is freed; the W views of the
// parameters held whole read their values, the others' are nil; MasterView finds held ranges and
// panics on others; what needs the whole master refuses; UnshardMaster brings back the held
// values with zeros elsewhere.
func TestShardMaster_holdsTheShardAndTheNormsOnly(t *testing.T) {
	m, dev := tinyShardGPT(t, tensor.F16)
	defer m.Free()
	ps := m.Params()
	whole := ps.Host()
	// Ranges cutting through parameters: the first third, and a piece in the middle.
	sh := &Shard{Ranges: [][2]int{{0, ps.N / 3}, {ps.N / 2, ps.N/2 + 100}}}
	held := make([]bool, ps.N)
	for _, r := range sh.Ranges {
		for i := r[0]; i < r[1]; i++ {
			held[i] = true
		}
	}
	reads := 0
	for _, p := range ps.List {
		if p.MasterRead {
			for i := p.Offset; i < p.Offset+p.Len(); i++ {
				held[i] = true
			}
			reads += p.Len()
		}
	}
	want := 0
	for _, h := range held {
		if h {
			want++
		}
	}
	if reads == 0 {
		t.Fatal("the GPT has no MasterRead parameter")
	}
	if err := ps.ShardMaster(sh); err != nil {
		t.Fatal(err)
	}
	if ps.Data != nil || !ps.MasterSharded() {
		t.Fatalf("after ShardMaster: Data %v, sharded %v", ps.Data, ps.MasterSharded())
	}
	if n := ps.MasterTensor().Len(); n != want || n > sh.N()+reads {
		t.Fatalf("the master's shard slab holds %d elements, want %d (shard %d + norms %d, less their overlap)", n, want, sh.N(), reads)
	}
	var live int64
	for _, l := range dev.Live() {
		if l.Tag == "params" {
			t.Errorf("the whole master slab is still live (%d bytes)", l.Bytes)
		}
		if l.Tag == "params.shard" {
			live += l.Bytes
		}
	}
	if live != tensor.SizeClass(4*int64(want)) {
		t.Errorf("params.shard: %d bytes live, want %d", live, tensor.SizeClass(4*int64(want)))
	}
	// The held values are the master's, bit for bit, wherever they are read from.
	vals := tensor.ToHost(ps.MasterTensor())
	k := 0
	for i, h := range held {
		if h {
			if math.Float32bits(vals[k]) != math.Float32bits(whole[i]) {
				t.Fatalf("held element %d (slab %d): %v, the master had %v", k, i, vals[k], whole[i])
			}
			k++
		}
	}
	for _, p := range ps.List {
		all := true
		for i := p.Offset; i < p.Offset+p.Len(); i++ {
			all = all && held[i]
		}
		if all != (p.W != nil) {
			t.Errorf("%s: held whole %v, W %v", p.Name, all, p.W)
		}
		if p.MasterRead && (p.W == nil || !sameBits(tensor.ToHost(p.Master()), whole[p.Offset:p.Offset+p.Len()])) {
			t.Errorf("%s (MasterRead): its master does not read the master's values", p.Name)
		}
	}
	if got := tensor.ToHost(ps.MasterView(ps.N/2+10, 50)); !sameBits(got, whole[ps.N/2+10:ps.N/2+60]) {
		t.Error("MasterView of a held range: not the master's values")
	}
	mustPanic(t, "MasterView of a range not held", "not held by this rank", func() { ps.MasterView(ps.N/3, 1) })
	mustPanic(t, "SHA256 of a sharded master", "needs the whole f32 master", func() { ps.SHA256() })
	mustPanic(t, "SyncHalf of a sharded master", "needs the whole f32 master", func() { ps.SyncHalf() })
	if err := ps.LoadNamed(nil); err == nil || !strings.Contains(err.Error(), "sharded f32 master") {
		t.Errorf("LoadNamed into a sharded master: %v", err)
	}
	if err := ps.ShardMaster(sh); err == nil {
		t.Error("ShardMaster twice: no error")
	}
	// NamedWeightsOf reads the gathered whole as NamedWeights read the slab.
	ts, err := ps.NamedWeightsOf(whole)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps.List {
		if got, _ := ts[i].Float32s(); ts[i].Name != p.Name || !sameBits(got, whole[p.Offset:p.Offset+p.Len()]) {
			t.Fatalf("NamedWeightsOf: tensor %d (%s) is not %s's values", i, ts[i].Name, p.Name)
		}
	}

	if got := ps.UnshardMaster(); got != sh {
		t.Fatalf("UnshardMaster returned %v, want the shard", got)
	}
	back := ps.Host()
	for i := range back {
		w := float32(0)
		if held[i] {
			w = whole[i]
		}
		if math.Float32bits(back[i]) != math.Float32bits(w) {
			t.Fatalf("after UnshardMaster element %d is %v, want %v (held %v)", i, back[i], w, held[i])
		}
	}
	for _, p := range ps.List {
		if p.W == nil {
			t.Fatalf("after UnshardMaster %s has no master view", p.Name)
		}
	}
}

// An optimizer on a shard steps a sharded master to the bits it gives the whole one: AdamW and
// SGD with momentum, fp16 and bf16, the held master and the whole 16-bit copy compared after
// three steps on the same gradients.
func TestShardMaster_optimizerStepsTheSameBits(t *testing.T) {
	for _, compute := range []tensor.DType{tensor.F16, tensor.BF16} {
		for _, kind := range []string{"adamw", "sgd"} {
			t.Run(compute.String()+"/"+kind, func(t *testing.T) {
				run := func(shardMaster bool) (master, half []float32) {
					m, dev := tinyShardGPT(t, compute)
					defer m.Free()
					ps := m.Params()
					sh := &Shard{Ranges: [][2]int{{5, ps.N / 4}, {ps.N / 2, ps.N - 7}}}
					var opt Optimizer
					var err error
					if kind == "adamw" {
						opt, err = NewAdamWShard(ps, DefaultAdamW(), sh)
					} else {
						opt, err = NewSGDShard(ps, SGDConfig{Momentum: 0.9, WeightDecay: 0.01}, sh)
					}
					if err != nil {
						t.Fatal(err)
					}
					defer opt.Free()
					if shardMaster {
						if err := ps.ShardMaster(sh); err != nil {
							t.Fatal(err)
						}
					}
					for s := 0; s < 3; s++ {
						dev.RandNormal(ps.Grad, 0.1, uint64(100+s))
						opt.Step(0.01)
					}
					if shardMaster {
						ps.UnshardMaster()
					}
					whole := ps.Host()
					return sh.Pack(whole), tensor.ToHost(ps.Half)
				}
				wm, wh := run(false)
				sm, shh := run(true)
				if !sameBits(wm, sm) {
					t.Error("the shard's master differs from the whole master's shard after the same steps")
				}
				if !sameBits(wh, shh) {
					t.Error("the 16-bit copy differs")
				}
			})
		}
	}
}

// Under fp32 there is no 16-bit copy: forward reads the master, which cannot be sharded.
func TestShardMaster_refusedUnderFP32(t *testing.T) {
	m, _ := tinyShardGPT(t, tensor.F32)
	defer m.Free()
	err := m.Params().ShardMaster(&Shard{Ranges: [][2]int{{0, 10}}})
	if err == nil || !strings.Contains(err.Error(), "only under mixed precision") {
		t.Fatalf("ShardMaster under fp32: %v", err)
	}
}

func mustPanic(t *testing.T, what, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil || !strings.Contains(strings.ToLower(toString(r)), strings.ToLower(want)) {
			t.Errorf("%s: panic %v, want one saying %q", what, r, want)
		}
	}()
	f()
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}
