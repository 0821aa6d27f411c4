package observe

import (
	"strings"
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

// The memory plot's ticks: integers on the event axis, every major tick labelled.
func TestMemTicks_integerAndLabelled(t *testing.T) {
	var labels []string
	for _, tk := range (Ticks{Integer: true}).Ticks(0, 250) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0 50 100 150 200 250" {
		t.Errorf("event axis 0..250: labels %q", got)
	}
	labels = labels[:0]
	for _, tk := range (Ticks{}).Ticks(0, 1.5) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0.0 0.2 0.4 0.6 0.8 1.0 1.2 1.4" {
		t.Errorf("value axis 0..1.5: labels %q", got)
	}
}
