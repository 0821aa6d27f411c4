package observe

import (
	"strconv"
	"strings"
	"testing"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

// Under ddp.shard_optimizer the memory report names the shard, the unsharded size and the saving.
func TestMemoryReport_namesTheShard(t *testing.T) {
	dev := cpu.New()
	m, err := model.NewMLP(dev, model.MLPConfig{Widths: []int{16, 32, 4}, Activation: "relu", Compute: tensor.F32}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	ps := m.Params()
	half := ps.N / 2
	opt, err := model.NewAdamWShard(ps, model.DefaultAdamW(), &model.Shard{Ranges: [][2]int{{0, half}}})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Free()
	r := MemoryReport(dev, ps, opt)
	for _, want := range []string{"optimizer state (rank's shard)", "optimizer state unsharded", "checkpoint optimizer shard",
		"optim-rank-NNNNN.safetensors, one file per rank",
		"the shard holds " + strconv.Itoa(half) + " of " + strconv.Itoa(ps.N) + " elements"} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
	if strings.Contains(r, "averaged gradients") {
		t.Errorf("report without the engine's rows names the gradient shard:\n%s", r)
	}
	// Stage 2: the engine's rows, the averaged gradient's shard and the host buffers.
	r = MemoryReportDDP(dev, ps, opt, &DDPMemory{GradShardElems: half, HostBuffers: 0, HostUnsharded: 4 * int64(ps.N), Path: "in place"})
	for _, want := range []string{"averaged gradients (rank's shard)", tensor.FormatBytes(4 * int64(half)),
		strconv.Itoa(half) + " of " + strconv.Itoa(ps.N) + " elements, in the gradient slab's owned ranges",
		"ddp host buffers", "unsharded " + tensor.FormatBytes(4*int64(ps.N)), "reduced in place"} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
}
