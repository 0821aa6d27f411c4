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
	for _, want := range []string{"optimizer state (rank's shard)", "optimizer state unsharded",
		"the shard holds " + strconv.Itoa(half) + " of " + strconv.Itoa(ps.N) + " elements"} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
}
