//go:build cuda

package cuda

import (
	"runtime"
	"testing"
	"time"

	"github.com/goddp/goddp/model/tensor"
)

// A fence waits for the compute stream's work before it: after Wait it is done and the work's
// results are there; Done polled from another goroutine turns true; spent fences give their event
// back, so a loop of fences uses one event, and dropped ones give it back when collected.
func TestCUDA_fence(t *testing.T) {
	g := gpu(t)
	x := g.Alloc(tensor.F32, "x", 1<<22)
	defer g.Free(x)
	g.Fill(x, 1)
	for range 40 {
		g.Scale(x, 2)
	}
	f := g.Fence()
	f.Wait()
	if !f.Done() {
		t.Fatal("a fence is not done after Wait")
	}
	f.Wait() // spent: returns at once
	want := float32(1)
	for range 40 {
		want *= 2
	}
	if got := tensor.ToHost(x.View(x.Len()-1, 1))[0]; got != want {
		t.Fatalf("after the fence x = %v, want %v", got, want)
	}

	g.Scale(x, 1)
	f2 := g.Fence()
	done := make(chan bool)
	go func() { // the comm goroutine's way: poll
		deadline := time.Now().Add(10 * time.Second)
		for !f2.Done() {
			if time.Now().After(deadline) {
				done <- false
				return
			}
			runtime.Gosched()
		}
		done <- true
	}()
	if !<-done {
		t.Fatal("Done never turned true")
	}

	n := g.fenceEvents()
	for range 100 {
		g.Fence().Wait()
	}
	if got := g.fenceEvents(); got != n {
		t.Fatalf("%d free events after 100 waited fences, %d before: events are not recycled", got, n)
	}
	for range 3 {
		g.Fence() // dropped unspent: takes one of the n free events, or a new one
	}
	wantFree := max(n, 3) // every event the three took comes back
	deadline := time.Now().Add(5 * time.Second)
	for g.fenceEvents() < wantFree && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := g.fenceEvents(); got != wantFree {
		t.Fatalf("%d free events after dropping 3 fences (%d before), want %d", got, n, wantFree)
	}
	g.Sync()
}
