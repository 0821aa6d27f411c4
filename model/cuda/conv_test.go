//go:build cuda && cudnn

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/goddp/goddp/model/tensor"
)

// The convolutional network's operations against the CPU device, in the same layout (NCHW and
// NHWC: the CPU's NHWC is its NCHW arithmetic between transposes), f32 and f16, with
// cuRunCase's tolerances (relative L2 ≤ 1e-5 all-f32, ≤ 1e-2 with f16). Geometries: the 3×3
// "same" convolution, the strided 1×1 projection, the 7×7/2 stem, an odd 3×2 kernel; pools of
// 3×3/2 with padding (overlapping windows). Passed on H100s (sessions 12–19, -tags cuda,cudnn).

type convCase struct {
	N, C, H, W, OC int
	g              tensor.ConvGeom
}

var convCases = []convCase{
	{4, 8, 9, 9, 16, tensor.ConvGeom{KH: 3, KW: 3, Stride: 1, Pad: 1}},
	{3, 16, 8, 8, 32, tensor.ConvGeom{KH: 1, KW: 1, Stride: 2, Pad: 0}},
	{2, 3, 32, 30, 8, tensor.ConvGeom{KH: 7, KW: 7, Stride: 2, Pad: 3}},
	{2, 5, 7, 6, 4, tensor.ConvGeom{KH: 3, KW: 2, Stride: 2, Pad: 1}},
}

func convOpCases() []cuOpCase {
	var cs []cuOpCase
	add := func(name string, f func(m *cuMaker) []*tensor.Tensor) { cs = append(cs, cuOpCase{name, f}) }
	for _, l := range []tensor.Layout{tensor.NCHW, tensor.NHWC} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
			for _, k := range convCases {
				k, g := k, k.g
				g.Layout = l
				OH, OW := g.OutHW(k.H, k.W)
				s := fmt.Sprintf("%s/%s/%dx%d-%dx%ds%dp%d", l, dt, k.C, k.OC, g.KH, g.KW, g.Stride, g.Pad)
				add("Conv2d/"+s, func(m *cuMaker) []*tensor.Tensor {
					x, w, b := m.in(dt, l.Shape(k.N, k.C, k.H, k.W)...), m.in(dt, k.OC, k.C, g.KH, g.KW), m.in(dt, k.OC)
					y := m.out(dt, l.Shape(k.N, k.OC, OH, OW)...)
					m.dev.(tensor.ConvDevice).Conv2d(y, x, w, b, g)
					return []*tensor.Tensor{y}
				})
				add("Conv2dBackward/"+s, func(m *cuMaker) []*tensor.Tensor {
					x, w := m.in(dt, l.Shape(k.N, k.C, k.H, k.W)...), m.in(dt, k.OC, k.C, g.KH, g.KW)
					dy := m.in(dt, l.Shape(k.N, k.OC, OH, OW)...)
					dx := m.out(dt, x.Shape()...)
					dw, db := m.acc(tensor.F32, w.Shape()...), m.acc(tensor.F32, k.OC)
					m.dev.(tensor.ConvDevice).Conv2dBackward(dx, dw, db, dy, x, w, g)
					return []*tensor.Tensor{dx, dw, db}
				})
			}
			s := fmt.Sprintf("%s/%s", l, dt)
			const N, C, H, W = 4, 12, 11, 10
			for _, bc := range []int{C, 16} { // 16: channels in eights, the 8-wide kernels' case
				bs := s
				if bc != C {
					bs = fmt.Sprintf("%s/C%d", s, bc)
				}
				bn := func(m *cuMaker) (x, w, b *tensor.Tensor) {
					return m.in(dt, l.Shape(N, bc, H, W)...), m.in(tensor.F32, bc), m.in(tensor.F32, bc)
				}
				add("BatchNorm/"+bs, func(m *cuMaker) []*tensor.Tensor {
					x, w, b := bn(m)
					y, mean, rstd := m.out(dt, x.Shape()...), m.out(tensor.F32, bc), m.out(tensor.F32, bc)
					rm, rv := m.acc(tensor.F32, bc), m.in(tensor.F32, bc)
					m.dev.Fill(rv, 0.5) // a variance: > 0
					m.dev.(tensor.ConvDevice).BatchNorm(l, y, mean, rstd, rm, rv, x, w, b, 1e-5, 0.1)
					return []*tensor.Tensor{y, mean, rstd, rm, rv}
				})
				add("BatchNormInference/"+bs, func(m *cuMaker) []*tensor.Tensor {
					x, w, b := bn(m)
					rm, rv := m.in(tensor.F32, bc), m.in(tensor.F32, bc)
					m.dev.Fill(rv, 0.7)
					y := m.out(dt, x.Shape()...)
					m.dev.(tensor.ConvDevice).BatchNormInference(l, y, x, w, b, rm, rv, 1e-5)
					return []*tensor.Tensor{y}
				})
				add("BatchNormBackward/"+bs, func(m *cuMaker) []*tensor.Tensor {
					x, w, b := bn(m)
					y, mean, rstd := m.out(dt, x.Shape()...), m.out(tensor.F32, bc), m.out(tensor.F32, bc)
					cd := m.dev.(tensor.ConvDevice)
					cd.BatchNorm(l, y, mean, rstd, nil, nil, x, w, b, 1e-5, 0.1)
					dy := m.in(dt, x.Shape()...)
					dx, dw, db := m.out(dt, x.Shape()...), m.acc(tensor.F32, bc), m.acc(tensor.F32, bc)
					cd.BatchNormBackward(l, dx, dw, db, dy, x, w, mean, rstd)
					return []*tensor.Tensor{dx, dw, db}
				})
				add("SyncBatchNormOps/"+bs, func(m *cuMaker) []*tensor.Tensor {
					x, w, _ := bn(m)
					sb := m.dev.(tensor.SyncBatchNormDevice)
					mean, vr := m.out(tensor.F32, bc), m.out(tensor.F32, bc)
					sb.BatchNormStats(l, mean, vr, x)
					rstd := m.in(tensor.F32, bc)
					m.dev.Fill(rstd, 1.3)
					dy := m.in(dt, x.Shape()...)
					sdy, sdyx := m.out(tensor.F32, bc), m.out(tensor.F32, bc)
					sb.BatchNormBackwardReduce(l, sdy, sdyx, nil, nil, dy, x, mean, rstd)
					dx := m.out(dt, x.Shape()...)
					sb.BatchNormBackwardElemt(l, dx, dy, x, w, mean, rstd, sdy, sdyx, 3*N*H*W)
					return []*tensor.Tensor{mean, vr, sdy, sdyx, dx}
				})
			}
			for _, g := range []tensor.ConvGeom{{KH: 3, KW: 3, Stride: 2, Pad: 1}, {KH: 2, KW: 2, Stride: 2}, {KH: 3, KW: 3, Stride: 1, Pad: 1}} {
				g.Layout = l
				OH, OW := g.OutHW(H, W)
				ps := fmt.Sprintf("%s/%dx%ds%dp%d", s, g.KH, g.KW, g.Stride, g.Pad)
				add("MaxPool2d/"+ps, func(m *cuMaker) []*tensor.Tensor {
					x := m.in(dt, l.Shape(N, C, H, W)...)
					y, arg := m.out(dt, l.Shape(N, C, OH, OW)...), m.dev.Alloc(tensor.I32, "arg", l.Shape(N, C, OH, OW)...)
					m.allocs = append(m.allocs, arg)
					cd := m.dev.(tensor.ConvDevice)
					cd.MaxPool2d(y, arg, x, g)
					dy := m.in(dt, y.Shape()...)
					dx := m.out(dt, x.Shape()...)
					cd.MaxPool2dBackward(dx, dy, arg, g)
					args := make([]int32, arg.Len())
					m.dev.DownloadI32(args, arg)
					af := make([]float32, len(args))
					for i, a := range args {
						af[i] = float32(a)
					}
					argf := tensor.FromHost(m.dev, tensor.F32, "argf", af, arg.Shape()...)
					m.allocs = append(m.allocs, argf)
					return []*tensor.Tensor{y, argf, dx}
				})
			}
			add("GlobalAvgPool/"+s, func(m *cuMaker) []*tensor.Tensor {
				x := m.in(dt, l.Shape(N, C, H, W)...)
				y := m.out(dt, N, C)
				cd := m.dev.(tensor.ConvDevice)
				cd.GlobalAvgPool(l, y, x)
				dy := m.in(dt, N, C)
				dx := m.out(dt, x.Shape()...)
				cd.GlobalAvgPoolBackward(l, dx, dy)
				return []*tensor.Tensor{y, dx}
			})
		}
	}
	return cs
}

func TestCUDA_convOpsMatchCPU(t *testing.T) {
	g := gpu(t)
	for i, c := range convOpCases() {
		t.Run(c.name, func(t *testing.T) { cuRunCase(t, g, c, uint64(100+i)) })
	}
}

// GODDP_BN_SPLIT's path (k_chan_part, k_chan_fin) matches the CPU too: the batch norms' cases
// with the split forced and chunks of 64 rows, so their 4·11·10 = 440 rows are 7 chunks, the last
// one partial; and again with GODDP_BN_VEC's k_chan_part8 (the cases of 16 channels in NHWC).
func TestCUDA_bnSplitMatchesCPU(t *testing.T) {
	g := gpu(t)
	oldSplit, oldRows, oldVec := bnSplit, chanMinRows, bnVec
	bnSplit, chanMinRows = func() bool { return true }, 16 // 440 rows: 26 chunks of 17, the last of 15
	t.Cleanup(func() { bnSplit, chanMinRows, bnVec = oldSplit, oldRows, oldVec })
	for _, vec := range []bool{false, true} { // true: k_chan_part8 where NHWC has channels in eights
		bnVec = func() bool { return vec }
		n := 0
		for i, c := range convOpCases() {
			if strings.HasPrefix(c.name, "BatchNorm/") || strings.HasPrefix(c.name, "BatchNormBackward/") || strings.HasPrefix(c.name, "SyncBatchNormOps/") {
				n++
				t.Run(fmt.Sprintf("vec=%v/%s", vec, c.name), func(t *testing.T) { cuRunCase(t, g, c, uint64(100+i)) })
			}
		}
		if n != 24 {
			t.Errorf("%d batch-norm cases, want 24 (2 layouts × 2 dtypes × 2 channel counts × 3 ops)", n)
		}
	}
}

// planChan cuts every batch norm of ResNet-50 at batch 64 (NHWC f16) into chunks that cover its
// rows exactly, with at least chanTargetBlocks blocks where the rows allow chanMinRows a chunk —
// version 1's fixed 4096-row chunks gave the 2048-channel layers 8 blocks.
func TestCUDA_bnChanPlanFillsTheGPU(t *testing.T) {
	oldVec := bnVec
	t.Cleanup(func() { bnVec = oldVec })
	for _, vec := range []bool{false, true} {
		bnVec = func() bool { return vec }
		for _, k := range []struct{ C, HW int }{{64, 112}, {64, 56}, {256, 56}, {128, 28}, {512, 28}, {256, 14}, {1024, 14}, {512, 7}, {2048, 7}} {
			const N = 64
			M := N * k.HW * k.HW
			p := planChan(tensor.NHWC, k.C, M, nil, nil, nil) // no tensors: taken as aligned

			if p.vec != vec {
				t.Fatalf("C=%d: vec %v, want %v", k.C, p.vec, vec)
			}
			if p.S*p.R < M || (p.S-1)*p.R >= M {
				t.Errorf("C=%d M=%d: %d chunks of %d rows do not cover the rows exactly", k.C, M, p.S, p.R)
			}
			if blocks := p.S * p.tiles; blocks < chanTargetBlocks && p.R > 2*chanMinRows {
				t.Errorf("C=%d M=%d vec=%v: %d blocks (%d tiles × %d chunks of %d rows), want ≥ %d", k.C, M, vec, blocks, p.tiles, p.S, p.R, chanTargetBlocks)
			}
		}
	}
}

// The same convolution thrice gives the same bits (the plans' engines, or the legacy calls'
// algorithms, are chosen among cuDNN's deterministic ones).
func TestCUDA_convDeterministic(t *testing.T) {
	g := gpu(t)
	for _, l := range []tensor.Layout{tensor.NCHW, tensor.NHWC} {
		convBackwardRepeats(t, g, l, 5, 3)
	}
}

// convBackwardRepeats runs convCases[0]'s backward (f16, layout l) reps times on the same
// operands and fails on any bit of dx or dw that differs from the first run's.
func convBackwardRepeats(t *testing.T, g *Device, l tensor.Layout, seed uint64, reps int) {
	t.Helper()
	k := convCases[0]
	geom := k.g
	geom.Layout = l
	m := &cuMaker{dev: g, r: rand.New(rand.NewPCG(seed, 7))}
	defer m.free()
	x, w := m.in(tensor.F16, l.Shape(k.N, k.C, k.H, k.W)...), m.in(tensor.F16, k.OC, k.C, 3, 3)
	dy := m.in(tensor.F16, l.Shape(k.N, k.OC, k.H, k.W)...)
	var first []float32
	for rep := range reps {
		dx, dw := m.out(tensor.F16, x.Shape()...), m.acc(tensor.F32, w.Shape()...)
		g.Fill(dw, 0)
		g.Conv2dBackward(dx, dw, nil, dy, x, w, geom)
		got := append(tensor.ToHost(dx), tensor.ToHost(dw)...)
		if rep == 0 {
			first = got
			continue
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
				t.Fatalf("%s: run %d differs at %d: %v vs %v", l, rep, i, got[i], first[i])
			}
		}
	}
}

// GODDP_BN_VEC's 8-wide kernels (k_bn_apply8, k_bn_elemt8, k_relu8, k_relu_bwd8) give the scalar
// kernels' bits: a batch norm's forward and backward and ReLU's on NHWC images of 64 channels, f32
// and f16, with a ReLU backward written in place as the ResNet does.
func TestCUDA_bnVecSameBits(t *testing.T) {
	g := gpu(t)
	oldVec := bnVec
	t.Cleanup(func() { bnVec = oldVec })
	r := rand.New(rand.NewPCG(7, 7))
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		const N, H, W, C = 3, 5, 7, 64
		rnd := func(n int, scale float64) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r.NormFloat64() * scale)
			}
			return v
		}
		xs, dys, ws, bs := rnd(N*H*W*C, 2), rnd(N*H*W*C, 1), rnd(C, 1), rnd(C, 0.5)
		run := func(vec bool) [][]float32 {
			bnVec = func() bool { return vec }
			x := tensor.FromHost(g, dt, "x", xs, N, H, W, C)
			dy := tensor.FromHost(g, dt, "dy", dys, N, H, W, C)
			w := tensor.FromHost(g, tensor.F32, "w", ws, C)
			b := tensor.FromHost(g, tensor.F32, "b", bs, C)
			y, dx := g.Alloc(dt, "y", N, H, W, C), g.Alloc(dt, "dx", N, H, W, C)
			a, da := g.Alloc(dt, "a", N, H, W, C), g.Alloc(dt, "da", N, H, W, C)
			mean, rstd := g.Alloc(tensor.F32, "mean", C), g.Alloc(tensor.F32, "rstd", C)
			rm, rv := tensor.FromHost(g, tensor.F32, "rm", make([]float32, C), C), tensor.FromHost(g, tensor.F32, "rv", make([]float32, C), C)
			dw, db := tensor.FromHost(g, tensor.F32, "dw", make([]float32, C), C), tensor.FromHost(g, tensor.F32, "db", make([]float32, C), C)
			defer func() {
				for _, tt := range []*tensor.Tensor{x, dy, w, b, y, dx, a, da, mean, rstd, rm, rv, dw, db} {
					g.Free(tt)
				}
			}()
			g.BatchNorm(tensor.NHWC, y, mean, rstd, rm, rv, x, w, b, 1e-5, 0.1)
			g.ReLU(a, y)
			g.Copy(da, dy)
			g.ReLUBackward(da, da, a) // in place, as the ResNet's backward
			g.BatchNormBackward(tensor.NHWC, dx, dw, db, da, y, w, mean, rstd)
			return [][]float32{tensor.ToHost(y), tensor.ToHost(a), tensor.ToHost(da), tensor.ToHost(dx), tensor.ToHost(dw), tensor.ToHost(db)}
		}
		want, got := run(false), run(true)
		for k, name := range []string{"y", "relu", "relu backward", "dx", "dw", "db"} {
			for i := range want[k] {
				if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
					t.Fatalf("%s %s[%d]: 8-wide %g, scalar %g", dt, name, i, got[k][i], want[k][i])
				}
			}
		}
	}
}

// GODDP_BN_RELU's fusion (BatchNormReLU, BatchNormReLUBackward) gives the bits of the unfused
// pair — BatchNorm then ReLU; ReLU's backward in place then BatchNormBackward — on the split
// reductions, scalar and 8-wide, NHWC and NCHW, f32 and f16; and it leaves dy as it was.
func TestCUDA_bnReLUFusedSameBits(t *testing.T) {
	g := gpu(t)
	oldSplit, oldVec := bnSplit, bnVec
	bnSplit = func() bool { return true }
	t.Cleanup(func() { bnSplit, bnVec = oldSplit, oldVec })
	r := rand.New(rand.NewPCG(9, 9))
	for _, l := range []tensor.Layout{tensor.NHWC, tensor.NCHW} {
		for _, vec := range []bool{false, true} {
			for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
				bnVec = func() bool { return vec }
				N, C, H, W := 3, 64, 5, 7
				if l == tensor.NCHW {
					C = 12
				}
				shape := l.Shape(N, C, H, W)
				rnd := func(n int, scale float64) []float32 {
					v := make([]float32, n)
					for i := range v {
						v[i] = float32(r.NormFloat64() * scale)
					}
					return v
				}
				xs, dys, ws, bs, dw0 := rnd(N*H*W*C, 2), rnd(N*H*W*C, 1), rnd(C, 1), rnd(C, 0.5), rnd(C, 1)
				run := func(fused bool) [][]float32 {
					x := tensor.FromHost(g, dt, "x", xs, shape...)
					dy := tensor.FromHost(g, dt, "dy", dys, shape...)
					w := tensor.FromHost(g, tensor.F32, "w", ws, C)
					b := tensor.FromHost(g, tensor.F32, "b", bs, C)
					y, dx := g.Alloc(dt, "y", shape...), g.Alloc(dt, "dx", shape...)
					mean, rstd := g.Alloc(tensor.F32, "mean", C), g.Alloc(tensor.F32, "rstd", C)
					rm, rv := tensor.FromHost(g, tensor.F32, "rm", make([]float32, C), C), tensor.FromHost(g, tensor.F32, "rv", make([]float32, C), C)
					dw, db := tensor.FromHost(g, tensor.F32, "dw", dw0, C), tensor.FromHost(g, tensor.F32, "db", make([]float32, C), C)
					defer func() {
						for _, tt := range []*tensor.Tensor{x, dy, w, b, y, dx, mean, rstd, rm, rv, dw, db} {
							g.Free(tt)
						}
					}()
					if fused {
						g.BatchNormReLU(l, y, mean, rstd, rm, rv, x, w, b, 1e-5, 0.1)
						g.BatchNormReLUBackward(l, dx, dw, db, dy, y, x, w, mean, rstd)
						if got := tensor.ToHost(dy); dt == tensor.F32 {
							for i := range got {
								if got[i] != dys[i] {
									t.Fatalf("%s vec=%v %s: the fused backward changed dy[%d]", l, vec, dt, i)
								}
							}
						}
					} else {
						g.BatchNorm(l, y, mean, rstd, rm, rv, x, w, b, 1e-5, 0.1)
						g.ReLU(y, y)
						g.ReLUBackward(dy, dy, y)
						g.BatchNormBackward(l, dx, dw, db, dy, x, w, mean, rstd)
					}
					return [][]float32{tensor.ToHost(y), tensor.ToHost(mean), tensor.ToHost(rstd), tensor.ToHost(rm), tensor.ToHost(rv),
						tensor.ToHost(dx), tensor.ToHost(dw), tensor.ToHost(db)}
				}
				want, got := run(false), run(true)
				for k, name := range []string{"y", "mean", "rstd", "running mean", "running var", "dx", "dw", "db"} {
					for i := range want[k] {
						if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
							t.Fatalf("%s vec=%v %s %s[%d]: fused %g, unfused %g", l, vec, dt, name, i, got[k][i], want[k][i])
						}
					}
				}
			}
		}
	}
}

// GODDP_CUDNN_GRAPH's path (cached cuDNN execution plans) matches the CPU as the legacy calls do:
// every convolution case, forward and backward, both layouts, f32 and f16; the same case run
// twice gives the same bits (the plans' engines are deterministic); and the cache holds one plan
// per operation, shape and beta.
func TestCUDA_convGraphMatchesCPU(t *testing.T) {
	g := gpu(t)
	old := cudnnGraph
	cudnnGraph = func() bool { return true }
	t.Cleanup(func() { cudnnGraph = old })
	n := 0
	for i, c := range convOpCases() {
		if strings.HasPrefix(c.name, "Conv2d/") || strings.HasPrefix(c.name, "Conv2dBackward/") {
			n++
			t.Run(c.name, func(t *testing.T) { cuRunCase(t, g, c, uint64(200+i)) })
		}
	}
	if n == 0 {
		t.Fatal("no convolution cases")
	}
	g.conv.mu.Lock()
	plans, f16 := len(g.conv.plans), 0
	for k, p := range g.conv.plans {
		if p != nil && k.c.DType == 1 {
			f16++
		}
	}
	g.conv.mu.Unlock()
	if f16 == 0 {
		t.Fatal("the graph path ran no f16 convolution through a plan")
	}
	t.Logf("%d convolution cases, %d plans cached (%d f16); left to the legacy calls: %q", n, plans, f16, g.PlanMisses())
	convBackwardRepeats(t, g, tensor.NHWC, 8, 2)
	g.conv.mu.Lock()
	if len(g.conv.plans) != plans {
		t.Errorf("re-running a case grew the plan cache from %d to %d", plans, len(g.conv.plans))
	}
	g.conv.mu.Unlock()
}

// The ResNet's session-13 passes give the bits of what they replace: AddReLU (k_add_relu8) those
// of Add then ReLU and AddReLUBackward (k_add_relu_bwd8) those of Axpy then ReLUBackward, f32 and
// f16, 8-wide and (an odd length) the fallback; the 32-bit-index max
// pools and the 8-wide NHWC ones (k_maxpool8, k_maxpool_bwd8) those of the 64-bit ones, NHWC and
// NCHW, forward (y and arg) and backward.
func TestCUDA_fusedPassesSameBits(t *testing.T) {
	g := gpu(t)
	r := rand.New(rand.NewPCG(13, 13))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d]: %g, want %g", what, i, got[i], want[i])
			}
		}
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, n := range []int{8 * 1000, 8*1000 + 3} {
			as, bs := rnd(n), rnd(n)
			a, b := tensor.FromHost(g, dt, "a", as, n), tensor.FromHost(g, dt, "b", bs, n)
			fused, plain := g.Alloc(dt, "fused", n), g.Alloc(dt, "plain", n)
			g.AddReLU(fused, a, b)
			g.Add(plain, a, b)
			g.ReLU(plain, plain)
			same(fmt.Sprintf("%s AddReLU n=%d", dt, n), tensor.ToHost(fused), tensor.ToHost(plain))
			// backward: dx (here fused/plain, equal) += a, through a ReLU whose output is b's ReLU
			y := g.Alloc(dt, "y", n)
			g.ReLU(y, b)
			g.AddReLUBackward(fused, a, y)
			g.Axpy(plain, 1, a)
			g.ReLUBackward(plain, plain, y)
			same(fmt.Sprintf("%s AddReLUBackward n=%d", dt, n), tensor.ToHost(fused), tensor.ToHost(plain))
			g.Free(y)
			for _, tt := range []*tensor.Tensor{a, b, fused, plain} {
				g.Free(tt)
			}
		}
	}
	old, old8 := idx32Max, pool8On
	t.Cleanup(func() { idx32Max, pool8On = old, old8 })
	for _, l := range []tensor.Layout{tensor.NHWC, tensor.NCHW} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
			geo := tensor.ConvGeom{KH: 3, KW: 3, Stride: 2, Pad: 1, Layout: l}
			const N, C, H, W = 3, 16, 13, 12
			OH, OW := geo.OutHW(H, W)
			xs, dys := rnd(N*C*H*W), rnd(N*C*OH*OW)
			run := func(limit int, vec bool) [][]float32 {
				idx32Max, pool8On = limit, vec
				x := tensor.FromHost(g, dt, "x", xs, l.Shape(N, C, H, W)...)
				dy := tensor.FromHost(g, dt, "dy", dys, l.Shape(N, C, OH, OW)...)
				y, dx := g.Alloc(dt, "y", l.Shape(N, C, OH, OW)...), g.Alloc(dt, "dx", l.Shape(N, C, H, W)...)
				arg := g.Alloc(tensor.I32, "arg", l.Shape(N, C, OH, OW)...)
				defer func() {
					for _, tt := range []*tensor.Tensor{x, dy, y, dx, arg} {
						g.Free(tt)
					}
				}()
				g.MaxPool2d(y, arg, x, geo)
				g.MaxPool2dBackward(dx, dy, arg, geo)
				ai := make([]int32, arg.Len())
				g.DownloadI32(ai, arg)
				args := make([]float32, len(ai))
				for i, v := range ai {
					args[i] = float32(v)
				}
				return [][]float32{tensor.ToHost(y), args, tensor.ToHost(dx)}
			}
			want := run(0, false)
			for _, vec := range []bool{false, true} { // 32-bit scalar, then 8-wide (NHWC)
				got := run(1<<30, vec)
				for k, name := range []string{"y", "arg", "dx"} {
					same(fmt.Sprintf("%s %s max pool %s (32-bit, 8-wide %v)", l, dt, name, vec), got[k], want[k])
				}
			}
		}
	}
}

// CacheConvFilters: an NHWC convolution's forward and backward with the filter's channels-last
// copy cached give the bits of the uncached calls, the backward reuses the forward's copy (one
// k_w_krsc for both), and turning the cache off frees it (allocated back to its baseline).
func TestCUDA_convFilterCacheSameBits(t *testing.T) {
	g := gpu(t)
	r := rand.New(rand.NewPCG(21, 21))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} {
		geo := tensor.ConvGeom{KH: 3, KW: 3, Stride: 1, Pad: 1, Layout: tensor.NHWC}
		const N, C, H, W, K = 2, 16, 8, 8, 32
		xs, ws, dys := rnd(N*C*H*W), rnd(K*C*9), rnd(N*K*H*W)
		run := func(cache bool) ([][]float32, int) {
			x := tensor.FromHost(g, dt, "x", xs, N, H, W, C)
			w := tensor.FromHost(g, dt, "w", ws, K, C, 3, 3)
			dy := tensor.FromHost(g, dt, "dy", dys, N, H, W, K)
			y, dx := g.Alloc(dt, "y", N, H, W, K), g.Alloc(dt, "dx", N, H, W, C)
			dw := tensor.FromHost(g, tensor.F32, "dw", make([]float32, K*C*9), K, C, 3, 3)
			defer func() {
				for _, tt := range []*tensor.Tensor{x, w, dy, y, dx, dw} {
					g.Free(tt)
				}
			}()
			g.Sync()
			base := g.Stats().Allocated
			g.ProfileStart()
			g.CacheConvFilters(cache)
			g.Conv2d(y, x, w, nil, geo)
			g.Conv2dBackward(dx, dw, nil, dy, x, w, geo)
			g.CacheConvFilters(false)
			prof := g.ProfileStop()
			g.Sync()
			if a := g.Stats().Allocated; a != base {
				t.Errorf("%s cache %v: allocated %d after the cache's end, %d before", dt, cache, a, base)
			}
			copies := 0
			for _, line := range strings.Split(prof, "\n") {
				if f := strings.Fields(line); len(f) > 1 && f[0] == "k_w_krsc" {
					fmt.Sscan(f[1], &copies)
				}
			}
			return [][]float32{tensor.ToHost(y), tensor.ToHost(dx), tensor.ToHost(dw)}, copies
		}
		want, n0 := run(false)
		got, n1 := run(true)
		for k, name := range []string{"y", "dx", "dw"} {
			for i := range want[k] {
				if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
					t.Fatalf("%s %s[%d]: cached %g, uncached %g", dt, name, i, got[k][i], want[k][i])
				}
			}
		}
		if n0 != 2 || n1 != 1 {
			t.Errorf("%s: %d filter copies uncached (want 2), %d cached (want 1)", dt, n0, n1)
		}
	}
}
