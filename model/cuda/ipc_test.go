//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// ipcPlan is the ring's schedule (allreduce.Segment, allreduce.ReduceOrder; ddp.DevicePlan builds
// it from them) written out here, since model imports nothing of allreduce: rank r reduces the
// ring's owned segment r+1 and adds the ranks' values in the order r+1, r+2, …, r.
func ipcPlan(count, size, rank int) tensor.IPCPlan {
	seg := func(i int) [2]int {
		return [2]int{int(int64(count) * int64(i) / int64(size)), int(int64(count) * int64(i+1) / int64(size))}
	}
	p := tensor.IPCPlan{Rank: rank, Size: size}
	for r := range size {
		p.Segments = append(p.Segments, seg((r+1)%size))
	}
	for k := range size {
		p.Order = append(p.Order, (rank+1+k)%size)
	}
	return p
}

// ipcBits uploads and downloads a buffer's raw elements (f32 bits or 16-bit bits as uint32s).
func ipcUpload(d *Device, t *tensor.Tensor, v []float32) {
	switch t.DType() {
	case tensor.F32:
		d.Upload(t, v)
	case tensor.F16:
		h := make([]uint16, len(v))
		half.Encode(h, v)
		d.htod(t, unsafe.Pointer(&h[0]), t.Bytes())
	case tensor.BF16:
		h := make([]uint16, len(v))
		half.EncodeBF16(h, v)
		d.htod(t, unsafe.Pointer(&h[0]), t.Bytes())
	}
}

func ipcDownload(d *Device, t *tensor.Tensor) []float32 {
	out := make([]float32, t.Len())
	switch t.DType() {
	case tensor.F32:
		d.Download(out, t)
	default:
		h := make([]uint16, t.Len())
		d.dtoh(unsafe.Pointer(&h[0]), t)
		if t.DType() == tensor.F16 {
			half.Decode(out, h)
		} else {
			half.DecodeBF16(out, h)
		}
	}
	return out
}

// roundTo rounds an f32 value to dt as the kernel's store does.
func roundTo(dt tensor.DType, v float32) float32 {
	switch dt {
	case tensor.F16:
		return half.ToFloat32(half.FromFloat32(v))
	case tensor.BF16:
		return half.BF16ToFloat32(half.BF16FromFloat32(v))
	}
	return v
}

// ipcWaits runs f once for each way the ranks can wait for each other (GODDP_IPC_WAIT): in the
// kernel (the default) and by the stream (ipc_pace.go).
func ipcWaits(t *testing.T, f func(t *testing.T)) {
	for _, w := range []string{"kernel", "stream"} {
		t.Run("wait="+w, func(t *testing.T) {
			t.Setenv("GODDP_IPC_WAIT", w)
			f(t)
		})
	}
}

// ipcWorld opens size Devices on GPU 0 (each rank its own streams, as processes sharing the GPU
// have), a buffer and a reducer on each, and connects them.
func ipcWorld(t *testing.T, size, count int, dt tensor.DType) ([]*Device, []*tensor.Tensor, []tensor.IPCReducer) {
	t.Helper()
	devs := make([]*Device, size)
	bufs := make([]*tensor.Tensor, size)
	reds := make([]tensor.IPCReducer, size)
	handles := make([][]byte, size)
	for r := range size {
		d, err := New(0)
		if err != nil {
			t.Fatal(err)
		}
		devs[r] = d
		bufs[r] = d.Alloc(dt, "ipc", count)
		if reds[r], err = d.NewIPCReducer(bufs[r], ipcPlan(count, size, r)); err != nil {
			t.Fatal(err)
		}
		handles[r] = reds[r].Handle()
	}
	for r := range size {
		if err := reds[r].Connect(handles); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for r := range size {
			devs[r].Sync()
		}
		for r := range size {
			reds[r].Close()
			devs[r].Free(bufs[r])
			devs[r].Close()
		}
	})
	return devs, bufs, reds
}

// ipcStreams makes a side stream on each device, closed when the test ends (before ipcWorld's
// reducers: cleanups run last first).
func ipcStreams(t *testing.T, devs []*Device) []tensor.IPCStream {
	t.Helper()
	streams := make([]tensor.IPCStream, len(devs))
	for r, d := range devs {
		s, err := d.NewIPCStream()
		if err != nil {
			t.Fatal(err)
		}
		streams[r] = s
		t.Cleanup(func() { s.Close() })
	}
	return streams
}

// 1–4 ranks sharing the GPU (goroutine ranks, each a Device of its own), f32/f16/bf16, odd sizes:
// every rank ends with the same bits, and they are exactly the f32 sum in the plan's order (the
// host ring's order), divided or scaled for Avg as allreduce does, rounded once to the dtype —
// for f32 the host ring's own bits (allreduce's TestReduceOrder_isTheRingsOrder) — and within the
// dtype's rounding of the float64 sum.
func TestCUDA_ipcAllReduce(t *testing.T) { ipcWaits(t, testIPCAllReduce) }

func testIPCAllReduce(t *testing.T) {
	for _, size := range []int{1, 2, 3, 4} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			for _, count := range []int{1, 7, 100003} {
				t.Run(fmt.Sprintf("n%d/%s/%d", size, dt, count), func(t *testing.T) {
					devs, bufs, reds := ipcWorld(t, size, count, dt)
					rng := rand.New(rand.NewPCG(uint64(size), uint64(count)))
					for _, avg := range []bool{false, true} {
						in := make([][]float32, size)
						for r := range in {
							in[r] = make([]float32, count)
							for i := range in[r] {
								in[r][i] = roundTo(dt, float32(rng.NormFloat64()))
							}
							ipcUpload(devs[r], bufs[r], in[r])
						}
						for r := range size {
							reds[r].AllReduce(avg) // enqueued on every rank's stream before any waits
						}
						out := make([][]float32, size)
						for r := range size {
							out[r] = ipcDownload(devs[r], bufs[r])
						}
						scale, div := float32(1), float32(1)
						if avg && dt == tensor.F32 {
							div = float32(size)
						} else if avg {
							scale = 1 / float32(size)
						}
						u := map[tensor.DType]float64{tensor.F32: 1.0 / (1 << 23), tensor.F16: 1.0 / (1 << 10), tensor.BF16: 1.0 / (1 << 7)}[dt]
						for owner := range size {
							p := ipcPlan(count, size, owner)
							s := p.Segments[owner]
							for i := s[0]; i < s[1]; i++ {
								want := float32(in[p.Order[0]][i] * scale)
								var f64, abs float64
								for k, q := range p.Order {
									if k > 0 {
										want = float32(want + float32(in[q][i]*scale))
									}
									f64 += float64(in[q][i]) * float64(scale)
									abs += math.Abs(float64(in[q][i]) * float64(scale))
								}
								want = roundTo(dt, float32(want/div))
								f64 /= float64(div)
								for r := range size {
									if math.Float32bits(out[r][i]) != math.Float32bits(want) {
										t.Fatalf("avg=%v [%d] rank %d: %g, want %g (the sum in the ring's order)", avg, i, r, out[r][i], want)
									}
								}
								if d := math.Abs(float64(want) - f64); d > float64(size+1)*abs*u {
									t.Fatalf("avg=%v [%d]: %g, float64 sum %g", avg, i, want, f64)
								}
							}
						}
					}
				})
			}
		}
	}
}

// Many all-reduces back to back with no host wait between them (the flags pace the ranks): f32
// Sum of small integers is exact, so after k rounds every element is size^(k-1) · Σ inputs.
func TestCUDA_ipcAllReduceBackToBack(t *testing.T) { ipcWaits(t, testIPCAllReduceBackToBack) }

func testIPCAllReduceBackToBack(t *testing.T) {
	const size, count, rounds = 3, 65537, 6
	devs, bufs, reds := ipcWorld(t, size, count, tensor.F32)
	in := make([][]float32, size)
	for r := range in {
		in[r] = make([]float32, count)
		for i := range in[r] {
			in[r][i] = float32((i+r)%7 - 3)
		}
		ipcUpload(devs[r], bufs[r], in[r])
	}
	for range rounds {
		for r := range size {
			reds[r].AllReduce(false)
		}
	}
	for r := range size {
		out := ipcDownload(devs[r], bufs[r])
		for i, v := range out {
			want := float32(in[0][i]+in[1][i]+in[2][i]) * float32(math.Pow(size, rounds-1))
			if v != want {
				t.Fatalf("rank %d [%d] = %g after %d rounds, want %g", r, i, v, rounds, want)
			}
		}
	}
}

// The halves apart (tensor.IPCHalfReducer, the device path across hosts), on side streams:
// ReduceScatter leaves in each rank's pinned segment exactly the bits the whole all-reduce
// would (the plan-order f32 sum, scaled, rounded once); whatever each rank then writes into its
// pinned segment (here: its own marker values, as the ring between hosts would write its
// result) is what AllGather puts into that segment on every rank. Twice, back to back, so the
// second round's meetings wait for their own launch numbers. Passed on an H100 under both waits
// (session 19's whole suite).
func TestCUDA_ipcHalves(t *testing.T) { ipcWaits(t, testIPCHalves) }

func testIPCHalves(t *testing.T) {
	for _, size := range []int{2, 3} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			t.Run(fmt.Sprintf("n%d/%s", size, dt), func(t *testing.T) {
				const count = 70001
				devs, bufs, reds := ipcWorld(t, size, count, dt)
				streams := ipcStreams(t, devs)
				pins := make([][]byte, size)
				halves := make([]tensor.IPCHalfReducer, size)
				for r := range size {
					var err error
					halves[r] = reds[r].(tensor.IPCHalfReducer)
					if pins[r], err = halves[r].PinSegment(); err != nil {
						t.Fatal(err)
					}
					p := ipcPlan(count, size, r)
					if want := (p.Segments[r][1] - p.Segments[r][0]) * dt.Size(); len(pins[r]) != want {
						t.Fatalf("rank %d: pinned segment of %d bytes, want %d", r, len(pins[r]), want)
					}
				}
				rng := rand.New(rand.NewPCG(uint64(size), uint64(dt)))
				for round := range 2 {
					in := make([][]float32, size)
					for r := range size {
						in[r] = make([]float32, count)
						for i := range in[r] {
							in[r][i] = roundTo(dt, float32(rng.NormFloat64()))
						}
						ipcUpload(devs[r], bufs[r], in[r])
						streams[r].Fork()
					}
					fs := make([]tensor.Fence, size)
					for r := range size {
						fs[r] = halves[r].ReduceScatter(streams[r], 1, 1)
					}
					for r := range size {
						fs[r].Wait()
						p := ipcPlan(count, size, r)
						s := p.Segments[r]
						got := model.BytesFloat(dt, pins[r])
						for i := s[0]; i < s[1]; i++ {
							want := in[p.Order[0]][i]
							for _, q := range p.Order[1:] {
								want = float32(want + in[q][i])
							}
							if want = roundTo(dt, want); math.Float32bits(got[i-s[0]]) != math.Float32bits(want) {
								t.Fatalf("round %d rank %d [%d]: pinned %g, want %g (the plan-order sum)", round, r, i, got[i-s[0]], want)
							}
						}
						mark := make([]float32, len(got))
						for i := range mark {
							mark[i] = float32(4*(r+1)) + float32((i+round)%8)/4 // exact in bf16 too
						}
						copy(pins[r], model.FloatBytes(dt, mark))
					}
					for r := range size {
						fs[r] = halves[r].AllGather(streams[r])
					}
					for r := range size {
						fs[r].Wait()
						streams[r].Join()
						out := ipcDownload(devs[r], bufs[r])
						for q := range size {
							s := ipcPlan(count, size, q).Segments[q]
							for i := s[0]; i < s[1]; i++ {
								if want := float32(4*(q+1)) + float32((i-s[0]+round)%8)/4; out[i] != want {
									t.Fatalf("round %d rank %d [%d] (rank %d's segment) = %g, want %g", round, r, i, q, out[i], want)
								}
							}
						}
					}
				}
			})
		}
	}
}

// A rank whose peer never launches: its all-reduce on a side stream does not finish; Abort makes
// it finish within a second (the kernel's waits give up, or the stream's are released) and
// Stalled names the peer. The peer, launching afterwards, must not take the aborted rank as
// arrived: its own all-reduce does not finish either until it aborts too.
func TestCUDA_ipcAbortNamesThePeer(t *testing.T) {
	ipcWaits(t, func(t *testing.T) {
		const size, count = 3, 4099
		devs, _, reds := ipcWorld(t, size, count, tensor.F16)
		streams := ipcStreams(t, devs)
		async := func(r int) tensor.IPCAsyncReducer { return reds[r].(tensor.IPCAsyncReducer) }
		waitDone := func(f tensor.Fence, within time.Duration) bool {
			for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(time.Millisecond) {
				if f.Done() {
					return true
				}
			}
			return f.Done()
		}
		f0 := async(0).Launch(streams[0], 1, 1)
		f1 := async(1).Launch(streams[1], 1, 1) // rank 2 never launches
		if waitDone(f0, 200*time.Millisecond) || f1.Done() {
			t.Fatal("an all-reduce finished without rank 2")
		}
		if q := async(0).Stalled(); q != -1 {
			t.Fatalf("Stalled before Abort: %d, want -1", q)
		}
		async(0).Abort()
		if !waitDone(f0, time.Second) {
			t.Fatal("rank 0's all-reduce still running 1 s after Abort")
		}
		if q := async(0).Stalled(); q != 2 {
			t.Fatalf("rank 0 gave up on rank %d, want 2 (the one that never launched)", q)
		}
		f2 := async(2).Launch(streams[2], 1, 1) // late: rank 0 has given up
		if waitDone(f2, 200*time.Millisecond) {
			t.Fatal("rank 2's all-reduce finished though rank 0 had aborted")
		}
		for _, r := range []int{1, 2} {
			async(r).Abort()
		}
		for r, f := range []tensor.Fence{f1, f2} {
			if !waitDone(f, time.Second) {
				t.Fatalf("rank %d's all-reduce still running 1 s after Abort", r+1)
			}
		}
		if q := async(2).Stalled(); q != 0 {
			t.Fatalf("rank 2 gave up on rank %d, want 0 (the one that had aborted)", q)
		}
	})
}

// Ranks that wait in different ways cannot meet: Connect refuses, naming the variable.
func TestCUDA_ipcWaitsMustAgree(t *testing.T) {
	const count = 64
	var handles [][]byte
	var reds []tensor.IPCReducer
	for r, w := range []string{"kernel", "stream"} {
		t.Setenv("GODDP_IPC_WAIT", w)
		d, err := New(0)
		if err != nil {
			t.Fatal(err)
		}
		buf := d.Alloc(tensor.F32, "ipc", count)
		red, err := d.NewIPCReducer(buf, ipcPlan(count, 2, r))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { red.Close(); d.Free(buf); d.Close() })
		reds, handles = append(reds, red), append(handles, red.Handle())
	}
	err := reds[0].Connect(handles)
	if err == nil || !strings.Contains(err.Error(), "GODDP_IPC_WAIT") {
		t.Fatalf("Connect of a kernel-paced rank to a stream-paced one: %v, want an error naming GODDP_IPC_WAIT", err)
	}
	t.Setenv("GODDP_IPC_WAIT", "sometimes")
	d, err := New(0)
	if err != nil { // refused already at New (CUDA_DEVICE_MAX_CONNECTIONS follows the wait: env.go)
		if !strings.Contains(err.Error(), "GODDP_IPC_WAIT") {
			t.Fatalf("New with GODDP_IPC_WAIT=sometimes: %v, want an error naming it", err)
		}
		return
	}
	defer d.Close()
	buf := d.Alloc(tensor.F32, "ipc", count)
	defer d.Free(buf)
	if _, err := d.NewIPCReducer(buf, ipcPlan(count, 1, 0)); err == nil || !strings.Contains(err.Error(), "GODDP_IPC_WAIT") {
		t.Fatalf("GODDP_IPC_WAIT=sometimes: %v, want an error naming it", err)
	}
}
