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

// A block allocated before the recording and freed during it (the last step's logits) leaves
// the layers' lines alone; AtPeak names each layer's blocks of the recording live at its highest
// point, largest first, and PeakReport prints them.
func TestMemTimeline_atPeak(t *testing.T) {
	dev := cpu.New()
	old := dev.Alloc(tensor.F32, "logits", 64)
	tl := RecordMemory(dev)
	dev.Free(old)                                  // prior: no layer goes below zero
	q := dev.Alloc(tensor.F32, "h.0.attn.q", 256)  // 1 KiB
	f := dev.Alloc(tensor.F32, "h.1.mlp.fc", 1024) // 4 KiB
	lg := dev.Alloc(tensor.F32, "logits", 128)     // 512 B: the peak is after it
	dev.Free(f)
	dev.Free(q)
	tl.Stop()
	defer dev.Free(lg)
	peak, layers := tl.AtPeak()
	if peak != 1024+4096+512 {
		t.Fatalf("peak %d, want %d", peak, 1024+4096+512)
	}
	want := []LayerBytes{{"h.1", 4096}, {"h.0", 1024}, {"logits", 512}}
	if len(layers) != len(want) {
		t.Fatalf("layers at the peak %v, want %v", layers, want)
	}
	for i := range want {
		if layers[i] != want[i] {
			t.Fatalf("layers at the peak %v, want %v", layers, want)
		}
	}
	_, byLayer, _ := tl.series()
	for l, s := range byLayer {
		for i, v := range s {
			if v < 0 {
				t.Fatalf("layer %s below zero at event %d: %v", l, i, s)
			}
		}
	}
	r := PeakReport(tl, 7, 2)
	for _, w := range []string{"step 7's peak: 5.50 KiB", "h.1", "h.0", "(1 more layers)"} {
		if !strings.Contains(r, w) {
			t.Errorf("report lacks %q:\n%s", w, r)
		}
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
