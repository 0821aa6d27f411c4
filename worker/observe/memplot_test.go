package observe

import (
	"testing"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/tensor"
)

func TestMemTimeline_seriesByLayer(t *testing.T) {
	dev := cpu.New()
	base := dev.Alloc(tensor.F32, "params", 128)
	tl := RecordMemory(dev)
	a := dev.Alloc(tensor.F32, "h.0.attn.q", 256)
	c := dev.Alloc(tensor.F32, "h.0.mlp.fc", 128)
	d := dev.Alloc(tensor.F16, "logits.chunk", 256)
	dev.Free(a)
	dev.Free(d)
	tl.Stop()
	dev.Free(c)
	total, layers, order := tl.series()
	if len(total) != 6 || total[0] != 512 || total[3] != 512+1024+512+512 || total[5] != 1024 {
		t.Fatalf("total = %v", total)
	}
	if order[0] != "h.0" || len(order) != 2 || layers["h.0"][2] != 1536 || layers["logits"][5] != 0 {
		t.Fatalf("order %v layers %v", order, layers)
	}
	dev.Free(base)
	if len(tl.events) != 5 {
		t.Fatalf("%d events recorded after stop", len(tl.events))
	}
}
