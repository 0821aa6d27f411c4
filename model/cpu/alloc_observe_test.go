package cpu

import (
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

func TestPool_observerSeesEveryAllocAndFree(t *testing.T) {
	dev := New()
	var evs []tensor.AllocEvent
	dev.SetObserver(func(e tensor.AllocEvent) { evs = append(evs, e) })
	a := dev.Alloc(tensor.F32, "h.0.fc", 1000)
	b := dev.Alloc(tensor.F16, "logits", 10)
	dev.Free(a)
	dev.SetObserver(nil)
	dev.Free(b)
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3: %+v", len(evs), evs)
	}
	want := []tensor.AllocEvent{
		{Tag: "h.0.fc", Bytes: 4096, Allocated: 4096},
		{Tag: "logits", Bytes: 512, Allocated: 4608},
		{Free: true, Tag: "h.0.fc", Bytes: 4096, Allocated: 512},
	}
	for i := range want {
		if evs[i].Buffer == nil {
			t.Errorf("event %d has no buffer", i)
		}
		evs[i].Buffer = nil
		if evs[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, evs[i], want[i])
		}
	}
}
