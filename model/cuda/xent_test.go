//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// CrossEntropyWithGrad's one launch (GODDP_XENT_FUSED=1) gives the bits of CrossEntropy then
// CrossEntropyBackward: the losses and the gradient, in place (dlogits aliasing logits, as the loss
// head calls it) and apart, f32 and f16 logits, vocabularies that take the 8-wide path (5008,
// 50304) and one that does not (5003), an ignored row.
func TestCUDA_crossEntropyWithGradSameBits(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(3, 11))
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, V := range []int{5003, 5008, 50304} {
			for _, inPlace := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/V%d/inplace=%v", dt, V, inPlace), func(t *testing.T) {
					const R = 37
					host, targets := xentCase(d, r, R, V)
					defer d.Free(targets)
					run := func(one bool) ([]float32, []float32) {
						logits := tensor.FromHost(d, dt, "logits", host, R, V)
						defer d.Free(logits)
						dl := logits
						if !inPlace {
							dl = d.Alloc(dt, "dlogits", R, V)
							defer d.Free(dl)
						}
						losses := d.Alloc(tensor.F32, "losses", R)
						defer d.Free(losses)
						if one {
							d.crossEntropyOneLaunch(losses, dl, logits, targets, 0.125)
						} else {
							d.CrossEntropy(losses, logits, targets)
							d.CrossEntropyBackward(dl, logits, targets, 0.125)
						}
						return tensor.ToHost(losses), tensor.ToHost(dl)
					}
					l2, g2 := run(false)
					l1, g1 := run(true)
					for i := range l2 {
						if l1[i] != l2[i] {
							t.Fatalf("loss of row %d: one launch %g, two %g", i, l1[i], l2[i])
						}
					}
					for i := range g2 {
						if g1[i] != g2[i] {
							t.Fatalf("gradient element %d (row %d): one launch %g, two %g", i, i/V, g1[i], g2[i])
						}
					}
					if l1[5] != 0 || g1[5*V] != 0 {
						t.Errorf("the ignored row: loss %g, gradient %g, want 0", l1[5], g1[5*V])
					}
				})
			}
		}
	}
}

// GODDP_XENT_SMEM=1's cross-entropy gradient (k_xent_sm: each row of 16-bit logits read once, kept
// in shared memory) gives k_xent's bits: the losses and the gradient of the one launch and of
// CrossEntropyBackward, in place and apart, f16 and bf16, vocabularies that take it (5008, GPT-2's
// 50304, 57344 = the most a block's 112 KiB holds, more rows than two waves of blocks) and ones
// that keep k_xent (5003: not a multiple of 8; 57352: over the 112 KiB), an ignored row. The
// kernel must fit two blocks an SM on Hopper at 50304 (its occupancy is logged).
func TestCUDA_xentSmemSameBits(t *testing.T) {
	d := gpu(t)
	r := rand.New(rand.NewPCG(5, 13))
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		if dt == tensor.BF16 && tensor.CheckCompute(d, dt) != nil {
			continue
		}
		for _, V := range []int{5003, 5008, 50304, 57344, 57352} {
			for _, inPlace := range []bool{true, false} {
				for _, withLoss := range []bool{true, false} {
					t.Run(fmt.Sprintf("%s/V%d/inplace=%v/loss=%v", dt, V, inPlace, withLoss), func(t *testing.T) {
						R := 37
						if V == 50304 {
							R = 300
						}
						host, targets := xentCase(d, r, R, V)
						defer d.Free(targets)
						run := func(on string) ([]float32, []float32) {
							t.Setenv("GODDP_XENT_SMEM", on)
							logits := tensor.FromHost(d, dt, "logits", host, R, V)
							defer d.Free(logits)
							dl := logits
							if !inPlace {
								dl = d.Alloc(dt, "dlogits", R, V)
								defer d.Free(dl)
							}
							losses := d.Alloc(tensor.F32, "losses", R)
							defer d.Free(losses)
							d.Fill(losses, 0)
							if withLoss {
								d.crossEntropyOneLaunch(losses, dl, logits, targets, 0.125)
							} else {
								d.CrossEntropyBackward(dl, logits, targets, 0.125)
							}
							return tensor.ToHost(losses), tensor.ToHost(dl)
						}
						l0, g0 := run("0")
						l1, g1 := run("1")
						for i := range l0 {
							if math.Float32bits(l1[i]) != math.Float32bits(l0[i]) {
								t.Fatalf("loss of row %d: row once %g, k_xent %g", i, l1[i], l0[i])
							}
						}
						for i := range g0 {
							if math.Float32bits(g1[i]) != math.Float32bits(g0[i]) {
								t.Fatalf("gradient element %d (row %d): row once %g, k_xent %g", i, i/V, g1[i], g0[i])
							}
						}
						if g1[5*V] != 0 || (withLoss && l1[5] != 0) {
							t.Errorf("the ignored row: loss %g, gradient %g, want 0", l1[5], g1[5*V])
						}
					})
				}
			}
		}
		probe := d.Alloc(dt, "probe", 8)
		if name := kn("k_xent_sm", probe); d.dynShared[name] == 0 {
			t.Errorf("%s: k_xent_sm never ran", dt)
		}
		d.Free(probe)
	}
	res, err := d.KernelResources("k_xent_sm", 512, 2*50304)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("k_xent_sm at V 50304: %d registers, %d local bytes, %d blocks/SM", res.Registers, res.LocalBytes, res.BlocksPerSM)
	if res.BlocksPerSM < 1 || res.LocalBytes != 0 {
		t.Errorf("k_xent_sm: %d blocks an SM, %d local bytes (spills)", res.BlocksPerSM, res.LocalBytes)
	}
}

// xentCase is a cross-entropy test's R rows of V logits (N(0, 9)) and its targets on d: random,
// row 5 ignored (-1), row 6 the last column.
func xentCase(d *Device, r *rand.Rand, R, V int) ([]float32, *tensor.Tensor) {
	host, tg := xentData(r, R, V)
	targets := d.Alloc(tensor.I32, "targets", R)
	d.UploadI32(targets, tg)
	return host, targets
}

// xentData is xentCase's logits and targets on the host.
func xentData(r *rand.Rand, R, V int) ([]float32, []int32) {
	host := make([]float32, R*V)
	for i := range host {
		host[i] = float32(r.NormFloat64() * 3)
	}
	tg := make([]int32, R)
	for i := range tg {
		tg[i] = int32(r.IntN(V))
	}
	tg[5], tg[6] = -1, int32(V-1)
	return host, tg
}

// GODDP_XENT_EX2=1 (the cross-entropy's exponentials by ex2.approx.ftz, kernelOptions): a device
// of its own (the option is compiled in at load) gives the losses and the gradient of
// CrossEntropyWithGrad within a bound of the default device's — the losses 2^-16 relative, an f32
// gradient 2^-16 relative, an f16 one within one f16 rounding (2^-10 relative, or 2^-24 among
// f16's subnormals: an H100 showed one such step, 1.8835e-05 against 1.8895e-05) — on the 8-wide vocabulary of GPT-2 (50304: k_xent_sm,
// and k_xent's vector path with f32 logits) and one that is not (5003), an ignored row; and not
// bit for bit the same everywhere (else the option compiled nothing in). Passed on an H100 (session 21).
func TestCUDA_xentEx2WithinBound(t *testing.T) {
	ref, d := optionDevices(t, "GODDP_XENT_EX2")
	r := rand.New(rand.NewPCG(7, 13))
	run := func(dev *Device, dt tensor.DType, host []float32, tg []int32, R, V int) (loss, grad []float32) {
		targets := dev.Alloc(tensor.I32, "targets", R)
		dev.UploadI32(targets, tg)
		logits := tensor.FromHost(dev, dt, "logits", host, R, V)
		losses := dev.Alloc(tensor.F32, "losses", R)
		dev.CrossEntropyWithGrad(losses, logits, logits, targets, 0.125) // in place, as the loss head calls it
		loss, grad = tensor.ToHost(losses), tensor.ToHost(logits)
		for _, x := range []*tensor.Tensor{targets, logits, losses} {
			dev.Free(x)
		}
		return loss, grad
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, V := range []int{5003, 50304} {
			const R = 19
			host, tg := xentData(r, R, V)
			wl, wg := run(ref, dt, host, tg, R, V)
			gl, gg := run(d, dt, host, tg, R, V)
			rel, abs := 1.0/(1<<16), 1e-9
			if dt == tensor.F16 {
				rel, abs = 1.0/(1<<10), 1.0/(1<<24) // one f16 rounding: 2^-24 apart below 2^-14 (subnormals)
			}
			differ := 0
			for i := range wl {
				if diff := math.Abs(float64(wl[i] - gl[i])); diff > 1e-6+math.Abs(float64(wl[i]))/(1<<16) {
					t.Fatalf("%s V%d: loss of row %d: expf's %g, ex2's %g", dt, V, i, wl[i], gl[i])
				}
			}
			for i := range wg {
				if wg[i] != gg[i] {
					differ++
				}
				if diff := math.Abs(float64(wg[i] - gg[i])); diff > abs+math.Abs(float64(wg[i]))*rel {
					t.Fatalf("%s V%d: gradient element %d (row %d): expf's %g, ex2's %g", dt, V, i, i/V, wg[i], gg[i])
				}
			}
			if gl[5] != 0 || gg[5*V] != 0 {
				t.Errorf("%s V%d: the ignored row: loss %g, gradient %g, want 0", dt, V, gl[5], gg[5*V])
			}
			t.Logf("%s V%d: %d of %d gradient values differ from expf's", dt, V, differ, len(wg))
			if dt == tensor.F32 && differ == 0 {
				t.Errorf("%s V%d: every value is expf's: the option compiled nothing in", dt, V)
			}
		}
	}
}
