package ddp

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/cpu"
)

// The device path across hosts on the CPU (fakeIPCDev standing in for the CUDA IPC reducer, its
// halves apart): two hosts of two ranks, the engine's groups each rank's allreduce.Hierarchy.
// Every replica ends bit-identical; with the f32 wire the run is ddp.hierarchical's bit for bit
// (the host's sum in the ring's order divided by its ranks, then the same ring between hosts: the
// same additions), and with a 16-bit wire its loss curve is within the wire's rounding of it (the
// device rounds the host's sum once, the host ring at every hop). Against the flat ring over the
// same four ranks (the host path, no hierarchy), whose sums are added in another order: the loss
// curve within 1e-5 relative with the f32 wire (f32 rounding of sums of four; equal in this
// run), and within the wire's unit with 16 bits (2e-3 f16, 2e-2 bf16; seen 1.5e-5 and 1.4e-4).
func TestEngineDevice_acrossHostsLikeHierarchical(t *testing.T) {
	for _, wire := range []allreduce.Wire{allreduce.WireF32, allreduce.WireF16, allreduce.WireBF16} {
		t.Run(wire.String(), func(t *testing.T) {
			const hosts, local, steps, b = 2, 2, 5, 4
			W := hosts * local
			d := makeData(W * b * steps)
			run := func(device bool) []trainOut {
				hub := newFakeHub()
				return hierWorld(t, hosts, local, func(r int, comm Comm) trainOut {
					h, l, err := trainDeviceHosts(t, fakeIPCDev{Device: cpu.New(), hub: hub}, r, W, hosts, comm, d, steps, b, wire, device, -1, nil)
					if err != nil {
						t.Errorf("device %v rank %d: %v", device, r, err)
					}
					return trainOut{hash: h, losses: l}
				})
			}
			dev, hier := run(true), run(false)
			flat := make([]trainOut, W)
			eachRank(t, W, func(r int, g *allreduce.Group) {
				h, l, err := trainDevice(t, cpu.New(), r, W, g, d, steps, b, wire, false, -1, nil)
				if err != nil {
					t.Errorf("flat rank %d: %v", r, err)
				}
				flat[r] = trainOut{hash: h, losses: l}
			})
			if t.Failed() {
				return
			}
			flatTol := map[allreduce.Wire]float64{allreduce.WireF32: 1e-5, allreduce.WireF16: 2e-3, allreduce.WireBF16: 2e-2}[wire]
			for s := range flat[0].losses {
				a, f := dev[0].losses[s], flat[0].losses[s]
				if rel := abs(a-f) / max(abs(f), 1e-12); rel > flatTol {
					t.Errorf("step %d: loss %g on the device path across hosts, %g on the flat ring (rel %.2g > %g)", s, a, f, rel, flatTol)
				}
			}
			for r := range dev {
				if dev[r].hash == "" || dev[r].hash != dev[0].hash {
					t.Fatalf("rank %d's param_sha256 %q differs from rank 0's %q on the device path", r, dev[r].hash, dev[0].hash)
				}
			}
			if dev[0].losses[steps-1] >= dev[0].losses[0] {
				t.Fatalf("loss did not fall: %v", dev[0].losses)
			}
			if wire == allreduce.WireF32 && dev[0].hash != hier[0].hash {
				t.Fatalf("param_sha256 %.12s… on the device path, %.12s… hierarchical on the host rings (want the same bits)", dev[0].hash, hier[0].hash)
			}
			tol := map[allreduce.Wire]float64{allreduce.WireF32: 0, allreduce.WireF16: 2e-3, allreduce.WireBF16: 2e-2}[wire]
			for s := range dev[0].losses {
				a, h := dev[0].losses[s], hier[0].losses[s]
				if rel := abs(a-h) / max(abs(h), 1e-12); rel > tol {
					t.Errorf("step %d: loss %g on the device path, %g hierarchical (rel %.2g > %g)", s, a, h, rel, tol)
				}
			}
		})
	}
}

// UseDevice across hosts needs the Hierarchy's rings: the world's flat groups are refused on
// every rank, in one line, without hanging.
func TestEngineDevice_acrossHostsNeedsRings(t *testing.T) {
	hub := newFakeHub()
	const W = 4
	d := makeData(W * 4)
	eachRank(t, W, func(r int, g *allreduce.Group) {
		_, _, err := trainDeviceHosts(t, fakeIPCDev{Device: cpu.New(), hub: hub}, r, W, 2, g, d, 1, 4, allreduce.WireF16, true, -1, nil)
		if err == nil || !strings.Contains(err.Error(), "not the rings inside and between 2 hosts") || strings.Contains(err.Error(), "\n") {
			t.Errorf("rank %d: got %v", r, err)
		}
	})
}

// A rank that stops, between steps or in the middle of a reduce half on the device (its kernel
// never arrives again), on the other host from some of the survivors: every other rank's step
// fails within 15 s with an error naming it, and nothing hangs — the rank on its host through
// the device path's control plane, the ranks on the other host through the rings between hosts
// and the abort each ring passes on to the other.
func TestEngineDevice_acrossHostsStoppedRankNamed(t *testing.T) {
	for _, midKernel := range []bool{false, true} {
		t.Run(fmt.Sprintf("midKernel=%v", midKernel), func(t *testing.T) {
			const hosts, local, steps, b, dead = 2, 2, 6, 4, 3
			W := hosts * local
			d := makeData(W * b * steps)
			hub := newFakeHub()
			type res struct {
				err  error
				took time.Duration
			}
			out := hierWorldKill(t, hosts, local, func(r int, comm Comm, kill func()) res {
				dev := fakeIPCDev{Device: cpu.New(), hub: hub}
				stop := -1
				if r == dead {
					if midKernel {
						dev.hangAfter = 5 // every bucket's fifth launch: step 2's reduce half (two launches a step)
					} else {
						stop = 2
					}
				}
				start := time.Now()
				_, _, err := trainDeviceHosts(t, dev, r, W, hosts, comm, d, steps, b, allreduce.WireF16, true, stop, nil)
				if r == dead {
					kill()
					return res{}
				}
				return res{err, time.Since(start)}
			})
			for r, o := range out {
				if r == dead {
					continue
				}
				if o.err == nil {
					t.Errorf("rank %d finished although rank %d stopped", r, dead)
					continue
				}
				if !strings.Contains(o.err.Error(), fmt.Sprintf("rank %d", dead)) {
					t.Errorf("rank %d's error does not name rank %d: %v", r, dead, o.err)
				}
				t.Logf("rank %d after %s: %v", r, o.took.Round(time.Millisecond), o.err)
				if o.took > 15*time.Second {
					t.Errorf("rank %d failed after %s (want within 15 s)", r, o.took)
				}
			}
		})
	}
}
