//go:build cuda

package ddp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model/cuda"
	"github.com/goddp/goddp/model/tensor"
)

// ipcRank runs the device all-reduce once on rank r's values against the host ring over comm: f32
// Sum and Avg must be the ring's bits (the plan adds in the ring's order); f16 Avg within 2e-3
// relative L2 of the ring's f16 wire (the ring rounds each hop to half, the device once). It
// returns the sha256 of the device results, to compare across ranks.
func ipcRank(t *testing.T, r int, comm Comm, count int) string {
	d, err := cuda.New(0)
	if err != nil {
		t.Errorf("rank %d: cuda.New(0): %v", r, err)
		return ""
	}
	defer d.Close()
	ctx := context.Background()
	in := make([]float32, count)
	for i := range in {
		in[i] = float32(math.Sin(float64(i)*0.01+float64(r))) * float32(1+r%3)
	}
	h := sha256.New()
	for _, c := range []struct {
		dt  tensor.DType
		avg bool
	}{{tensor.F32, false}, {tensor.F32, true}, {tensor.F16, true}} {
		buf := d.Alloc(c.dt, "ipc", count)
		red, err := NewDeviceReducer(ctx, d, buf, comm)
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
			return ""
		}
		d.Upload(buf, in)
		red.AllReduce(c.avg)
		got := make([]float32, count)
		d.Download(got, buf)
		ring := append([]float32{}, in...)
		op, wire := allreduce.Sum, allreduce.WireF32
		if c.avg {
			op = allreduce.Avg
		}
		if c.dt == tensor.F16 {
			wire = allreduce.WireF16
		}
		if err := comm.AllReduce(ctx, ring, op, wire); err != nil { // also the barrier before Close
			t.Errorf("rank %d: %v", r, err)
			return ""
		}
		red.Close()
		d.Free(buf)
		var dSq, refSq float64
		for i := range got {
			if c.dt == tensor.F32 && math.Float32bits(got[i]) != math.Float32bits(ring[i]) {
				t.Errorf("rank %d %s avg=%v [%d]: device %g, host ring %g", r, c.dt, c.avg, i, got[i], ring[i])
				return ""
			}
			dSq += float64(got[i]-ring[i]) * float64(got[i]-ring[i])
			refSq += float64(ring[i]) * float64(ring[i])
		}
		if rel := math.Sqrt(dSq / refSq); rel > 2e-3 {
			t.Errorf("rank %d %s: relative L2 distance to the host ring %.2e > 2e-3", r, c.dt, rel)
		}
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 4*count))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Goroutine ranks sharing GPU 0 (each its own Device and streams), the handles over in-process
// groups: every rank ends with the same bits, the host ring's for f32.
func TestCUDAIPC_goroutineRanks(t *testing.T) {
	ipcWaits(t, func(t *testing.T) {
		for _, W := range []int{2, 3, 4} {
			sums := inprocWorld(t, W, 1, func(r int, comm Comm, _ []Comm) string { return ipcRank(t, r, comm, 300007) })
			for r, s := range sums {
				if s == "" || s != sums[0] {
					t.Fatalf("W=%d rank %d: results %q differ from rank 0's %q", W, r, s, sums[0])
				}
			}
		}
	})
}

// ipcWaits runs f once for each way the device path's ranks wait for each other
// (GODDP_IPC_WAIT, model/cuda/ipc_pace.go): in the kernel (the default) and by the stream. The
// variable is the process's, so ranks run as processes inherit it.
func ipcWaits(t *testing.T, f func(t *testing.T)) {
	for _, w := range []string{"kernel", "stream"} {
		t.Run("wait="+w, func(t *testing.T) {
			t.Setenv("GODDP_IPC_WAIT", w)
			f(t)
		})
	}
}

// Two processes sharing GPU 0: the handles cross the loopback group (cuIpcOpenMemHandle in the
// other process), the results are the host ring's and the same bits in both. The test binary runs
// itself as the two ranks.
func TestCUDAIPC_twoProcesses(t *testing.T) {
	if rank := os.Getenv("GODDP_IPC_TEST_RANK"); rank != "" {
		g := rankGroupFromEnv(t)
		if s := ipcRank(t, g.Rank(), g, 1<<20+3); s != "" {
			fmt.Printf("IPC-RESULT %s\n", s)
		}
		return
	}
	ipcWaits(t, func(t *testing.T) {
		outs, errs, _ := runSelfAsRanks(t, 2, "GODDP_IPC_TEST_RANK", "ipc-test", "TestCUDAIPC_twoProcesses")
		var sums []string
		for r := range 2 {
			if errs[r] != nil {
				t.Fatalf("rank %d: %v\n%s", r, errs[r], outs[r])
			}
			i := strings.Index(outs[r], "IPC-RESULT ")
			if i < 0 {
				t.Fatalf("rank %d printed no result:\n%s", r, outs[r])
			}
			sums = append(sums, strings.Fields(outs[r][i:])[1])
		}
		if sums[0] != sums[1] {
			t.Fatalf("the two processes' results differ: %s, %s", sums[0], sums[1])
		}
	})
}

// mirrorRank is one rank of TestCUDAPeerMirror_twoProcesses: an f16 tensor of n values of its own,
// shared (tensor.PeerMirror, handles over comm), then each rank copies the other ranks' halves
// (allreduce.Segment's) into its tensor; it returns "" after an error, else "ok" when its tensor
// holds every rank's segment as that rank wrote it (f16 values of the form rank + i/64: exact).
func mirrorRank(t *testing.T, r int, comm Comm, n int) string {
	d, err := cuda.New(0)
	if err != nil {
		t.Errorf("rank %d: cuda.New(0): %v", r, err)
		return ""
	}
	defer d.Close()
	W := comm.Size()
	val := func(q, i int) float32 { return float32(q) + float32(i%64)/64 }
	mine := make([]float32, n)
	for i := range mine {
		mine[i] = val(r, i)
	}
	x := d.Alloc(tensor.F16, "mirror", n)
	defer d.Free(x)
	d.Upload(x, mine)
	d.Sync() // landed before a peer can copy it (the handle exchange follows)
	m, err := d.NewPeerMirror(x, r, W)
	if err != nil {
		t.Errorf("rank %d: %v", r, err)
		return ""
	}
	all, err := exchangeHandles(context.Background(), comm, m.Handle(), nil, "share its tensor")
	if err == nil {
		err = m.Connect(all)
	}
	if err != nil {
		t.Errorf("rank %d: %v", r, err)
		return ""
	}
	for q := range W {
		lo, hi := allreduce.Segment(n, W, q)
		m.Pull(q, lo, hi)
	}
	got := make([]float32, n)
	d.Download(got, x)
	if err := m.Close(); err != nil {
		t.Errorf("rank %d: Close: %v", r, err)
	}
	if _, err := comm.AllGather(context.Background(), []byte{1}); err != nil { // no rank frees x while a peer copies it
		t.Errorf("rank %d: %v", r, err)
	}
	for q := range W {
		lo, hi := allreduce.Segment(n, W, q)
		for i := lo; i < hi; i++ {
			if got[i] != val(q, i) {
				t.Errorf("rank %d: element %d (rank %d's segment) is %g, want %g", r, i, q, got[i], val(q, i))
				return ""
			}
		}
	}
	return "ok"
}

// tensor.PeerMirror across two processes on GPU 0 (ddp.shard_gather: device's copies: each maps
// the other's tensor by cuIpcOpenMemHandle and copies its segment device to device), an odd length.
// Not yet run on a GPU.
func TestCUDAPeerMirror_twoProcesses(t *testing.T) {
	if os.Getenv("GODDP_MIRROR_TEST_RANK") != "" {
		g := rankGroupFromEnv(t)
		fmt.Printf("MIRROR-RESULT %s\n", mirrorRank(t, g.Rank(), g, 1<<20+3))
		return
	}
	outs, errs, _ := runSelfAsRanks(t, 2, "GODDP_MIRROR_TEST_RANK", "mirror-test", "TestCUDAPeerMirror_twoProcesses")
	for r := range 2 {
		if errs[r] != nil || !strings.Contains(outs[r], "MIRROR-RESULT ok") {
			t.Fatalf("rank %d: %v\n%s", r, errs[r], outs[r])
		}
	}
}
