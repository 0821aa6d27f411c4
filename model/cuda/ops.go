//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"github.com/goddp/goddp/model/cuda/cudadrv"
	"github.com/goddp/goddp/model/tensor"
)

// The CUDA device's operations other than the matrix products, in tensor.Device's order. Each
// checks shapes on the host (panicking like the CPU device), then enqueues its kernel(s). The
// kernels are in kernels.go.

// vec8 reports whether the 8-wide kernels apply to n elements: n a multiple of 8 below 2³¹, and
// every tensor's first element 16-byte aligned (views can start anywhere).
func vec8(n int, ts ...*tensor.Tensor) bool {
	if n%8 != 0 || n >= 1<<31 {
		return false
	}
	for _, t := range ts {
		if t != nil && dptr(t)%16 != 0 {
			return false
		}
	}
	return true
}

// ---- fills, copies, elementwise ----

func (d *Device) Fill(t *tensor.Tensor, v float32) {
	if t.Len() == 0 {
		return
	}
	if v == 0 {
		d.enter()
		defer d.leave()
		must(cudadrv.MemsetD8Async(dptr(t), 0, t.Bytes(), d.stream))
		return
	}
	d.launch1(kn("k_fill", t), t.Len(), ptra(t), dta(t), u64a(uint64(t.Len())), f32a(v))
}

func (d *Device) Copy(dst, src *tensor.Tensor) {
	tensor.CheckLen("Copy", dst, src)
	if dst.Len() == 0 {
		return
	}
	if dst.DType() == src.DType() {
		d.enter()
		defer d.leave()
		must(cudadrv.DtoD(dptr(dst), dptr(src), dst.Bytes(), d.stream))
		return
	}
	tensor.CheckFloat("Copy", dst, src)
	if dst.DType().Half() && src.DType().Half() { // f16 ↔ bf16: no module holds both, go through f32
		w := d.Alloc(tensor.F32, "cuda.copy.widen", src.Len())
		d.Copy(w, src)
		d.Copy(dst, w)
		d.Free(w)
		return
	}
	if vec8(dst.Len(), dst, src) {
		d.launch1(kn("k_cast8", dst, src), dst.Len()/8, ptra(dst), dta(dst), ptra(src), dta(src), i32a(dst.Len()/8))
		return
	}
	d.launch1(kn("k_cast", dst, src), dst.Len(), ptra(dst), dta(dst), ptra(src), dta(src), u64a(uint64(dst.Len())))
}

func (d *Device) RandNormal(t *tensor.Tensor, std float32, seed uint64) {
	tensor.CheckFloat("RandNormal", t)
	if t.Len() > 0 {
		d.launch1(kn("k_randnormal", t), t.Len(), ptra(t), dta(t), u64a(uint64(t.Len())), f32a(std), seed)
	}
}

func (d *Device) Scale(t *tensor.Tensor, s float32) {
	tensor.CheckFloat("Scale", t)
	if vec8(t.Len(), t) {
		d.launch1(kn("k_scale8", t), t.Len()/8, ptra(t), dta(t), i32a(t.Len()/8), f32a(s))
	} else if t.Len() > 0 {
		d.launch1(kn("k_scale", t), t.Len(), ptra(t), dta(t), u64a(uint64(t.Len())), f32a(s))
	}
}

func (d *Device) Axpy(y *tensor.Tensor, alpha float32, x *tensor.Tensor) {
	tensor.CheckLen("Axpy", y, x)
	tensor.CheckFloat("Axpy", y, x)
	if vec8(y.Len(), y, x) {
		d.launch1(kn("k_axpy8", y, x), y.Len()/8, ptra(y), dta(y), ptra(x), dta(x), i32a(y.Len()/8), f32a(alpha))
	} else if y.Len() > 0 {
		d.launch1(kn("k_axpy", y, x), y.Len(), ptra(y), dta(y), ptra(x), dta(x), u64a(uint64(y.Len())), f32a(alpha))
	}
}

func (d *Device) Add(out, a, b *tensor.Tensor) {
	tensor.CheckLen("Add", out, a, b)
	tensor.CheckFloat("Add", out, a, b)
	if vec8(out.Len(), out, a, b) {
		d.launch1(kn("k_add8", out, a, b), out.Len()/8, ptra(out), dta(out), ptra(a), dta(a), ptra(b), dta(b), i32a(out.Len()/8))
	} else if out.Len() > 0 {
		d.launch1(kn("k_add", out, a, b), out.Len(), ptra(out), dta(out), ptra(a), dta(a), ptra(b), dta(b), u64a(uint64(out.Len())))
	}
}

// ---- bias ----

func (d *Device) AddBias(y, bias *tensor.Tensor) {
	_, cols := tensor.MatDims(y)
	if bias.Len() != cols {
		panic(fmt.Sprintf("cuda: AddBias: %s has %d columns, bias %s", y, cols, bias))
	}
	tensor.CheckFloat("AddBias", y, bias)
	if cols%8 == 0 && vec8(y.Len(), y, bias) {
		d.launch1(kn("k_addbias8", y, bias), y.Len()/8, ptra(y), dta(y), ptra(bias), dta(bias), i32a(y.Len()/8), i32a(cols))
	} else if y.Len() > 0 {
		d.launch1(kn("k_addbias", y, bias), y.Len(), ptra(y), dta(y), ptra(bias), dta(bias), u64a(uint64(y.Len())), i32a(cols))
	}
}

// AddBiasGELU is tensor.BiasFolder's: k_addbias_gelu8 where the 8-wide kernels apply (else
// AddBias then GELU): the two passes' bits in one.
func (d *Device) AddBiasGELU(h, g, bias *tensor.Tensor) {
	_, cols := tensor.MatDims(h)
	tensor.CheckLen("AddBiasGELU", h, g)
	if bias.Len() != cols {
		panic(fmt.Sprintf("cuda: AddBiasGELU: %s has %d columns, bias %s", h, cols, bias))
	}
	tensor.CheckFloat("AddBiasGELU", h, g, bias)
	if cols%8 != 0 || !vec8(h.Len(), h, g, bias) {
		d.AddBias(h, bias)
		d.GELU(g, h)
		return
	}
	d.launch1(kn("k_addbias_gelu8", h, g, bias), h.Len()/8, ptra(h), dta(h), ptra(g), dta(g), ptra(bias), dta(bias), i32a(h.Len()/8), i32a(cols))
}

// AddBiasAdd is tensor.BiasFolder's: k_addbias_add8 where the 8-wide kernels apply (else y + bias
// into a temporary, then Add): out = x + (y + bias), y left as it was.
func (d *Device) AddBiasAdd(out, x, y, bias *tensor.Tensor) {
	_, cols := tensor.MatDims(y)
	tensor.CheckLen("AddBiasAdd", out, x, y)
	if bias.Len() != cols {
		panic(fmt.Sprintf("cuda: AddBiasAdd: %s has %d columns, bias %s", y, cols, bias))
	}
	tensor.CheckFloat("AddBiasAdd", out, x, y, bias)
	if cols%8 != 0 || !vec8(y.Len(), out, x, y, bias) {
		t := d.Alloc(y.DType(), "bias.fold", y.Shape()...)
		d.Copy(t, y)
		d.AddBias(t, bias)
		d.Add(out, x, t)
		d.Free(t)
		return
	}
	d.launch1(kn("k_addbias_add8", out, x, y, bias), y.Len()/8, ptra(out), dta(out), ptra(x), dta(x), ptra(y), dta(y), ptra(bias), dta(bias), i32a(y.Len()/8), i32a(cols))
}

// AddBiasAddLayerNorm is tensor.ResidualNormer's op: k_addbias_add_ln8_K writes out = x + (y +
// bias) and normalises the stored values from the registers — AddBiasAdd then LayerNorm's 8-wide
// kernel, their bits. Where LayerNorm would take another kernel (GODDP_LN_VEC=0, a width not
// 256·K ≤ 1024, unaligned tensors), the two operations.
func (d *Device) AddBiasAddLayerNorm(out, y2, mean, rstd, x, y, bias, w, b *tensor.Tensor, eps float32) {
	r, cols := tensor.MatDims(y)
	tensor.CheckLen("AddBiasAddLayerNorm", out, x, y, y2)
	if bias.Len() != cols || w.Len() != cols || b.Len() != cols || mean.Len() != r || rstd.Len() != r ||
		mean.DType() != tensor.F32 || rstd.DType() != tensor.F32 {
		panic(fmt.Sprintf("cuda: AddBiasAddLayerNorm shapes: y %s, bias %s, w %s, b %s, mean %s, rstd %s", y, bias, w, b, mean, rstd))
	}
	tensor.CheckFloat("AddBiasAddLayerNorm", out, y2, x, y, bias, w, b)
	k := cols / 256
	if r == 0 || !lnVec() || cols%256 != 0 || k > 4 || !vec8(8, out, y2, x, y, bias, w, b) {
		d.AddBiasAdd(out, x, y, bias)
		d.LayerNorm(y2, mean, rstd, out, w, b, eps)
		return
	}
	d.warpRows(kn(fmt.Sprintf("k_addbias_add_ln8_%d", k), out, y2, x, y, bias, w, b), r, ptra(out), dta(out), ptra(y2), dta(y2), ptra(mean), ptra(rstd),
		ptra(x), dta(x), ptra(y), dta(y), ptra(bias), dta(bias), ptra(w), dta(w), ptra(b), dta(b), i32a(r), i32a(cols), f32a(eps))
}

// FusesResidualNorm is tensor.ResidualNormer's switch: on unless GODDP_RESNORM_FOLD=0 (env.go; the
// default since session 19's whole suite on an H100).
func (d *Device) FusesResidualNorm() bool { return resNormFold() }

var _ tensor.ResidualNormer = (*Device)(nil)

// FoldsBias is tensor.BiasFolder's switch: on unless GODDP_BIAS_FOLD=0 (env.go; the default since
// session 18's whole suite on an H100).
func (d *Device) FoldsBias() bool { return biasFold() }

var _ tensor.BiasFolder = (*Device)(nil)

func (d *Device) BiasGrad(db, dy *tensor.Tensor) {
	r, cols := tensor.MatDims(dy)
	if db.Len() != cols {
		panic(fmt.Sprintf("cuda: BiasGrad: %s has %d columns, db %s", dy, cols, db))
	}
	tensor.CheckFloat("BiasGrad", db, dy)
	d.colSum(db, dy, r, cols)
}

// colSum adds the column sums of x (r,cols) into out (cols): partial sums over slices of rows, then
// one pass that adds them up in a fixed order (no atomics: the result does not depend on timing).
func (d *Device) colSum(out, x *tensor.Tensor, r, cols int) {
	if cols == 0 {
		return
	}
	cb := (cols + 31) / 32
	parts, rowsPer := d.colsumParts(r, cols)
	part := d.scratch(parts * cols)
	if colsumFused() {
		if cnt := d.colsumCounters(cb); cnt != 0 {
			d.launch(kn("k_colsum_partfin", x, out), [3]int{cb, parts, 1}, [3]int{32, 8, 1}, 0, ptra(part), ptra(x), dta(x), i32a(r), i32a(cols), i32a(rowsPer),
				ptra(out), dta(out), cnt)
			d.Free(part)
			return
		}
	}
	name, gx := "k_colsum_part", cb
	if colsumVec() && cols%8 == 0 && vec8(r*cols, x) {
		// the same parts (rowsPer from the scalar kernel's grid), so the same bits
		name, gx = "k_colsum_part8", (cols+255)/256
	}
	d.launch(kn(name, x), [3]int{gx, parts, 1}, [3]int{32, 8, 1}, 0, ptra(part), ptra(x), dta(x), i32a(r), i32a(cols), i32a(rowsPer))
	d.launch1(kn("k_colsum_finish", out), cols, ptra(out), dta(out), ptra(part), i32a(parts), i32a(cols), u64a(uint64(cols)))
	d.Free(part)
}

// colsumParts is how colSum splits r rows of cols columns: parts slices of rowsPer rows, from the
// scalar kernel's grid (32 columns a block) filling the GPU, times GODDP_COLSUM_SPLIT (env.go).
// Every kernel that writes column-sum parts takes it, so their parts are the same sums
// (k_colsum_part8, k_gelu_bwd_colsum8).
func (d *Device) colsumParts(r, cols int) (parts, rowsPer int) {
	cb := (cols + 31) / 32
	parts = max(1, min((r+63)/64, (d.sms*8*colsumSplit()+cb-1)/cb))
	rowsPer = max(1, (r+parts-1)/parts)
	return parts, rowsPer
}

// GELUBackwardBiasGrad is tensor.GELUBiasGrader's op: k_gelu_bwd_colsum8 writes dx and the column
// sums' parts in one pass, k_colsum_finish adds them into db — GELUBackward then BiasGrad(db, dx),
// their bits. Widths not a multiple of 8 and unaligned tensors take the two operations.
func (d *Device) GELUBackwardBiasGrad(dx, dy, x, db *tensor.Tensor) {
	tensor.CheckLen("GELUBackwardBiasGrad", dx, dy, x)
	tensor.CheckFloat("GELUBackwardBiasGrad", dx, dy, x, db)
	r, cols := tensor.MatDims(dx)
	if db.Len() != cols {
		panic(fmt.Sprintf("cuda: GELUBackwardBiasGrad: %s has %d columns, db %s", dx, cols, db))
	}
	if r == 0 || cols%8 != 0 || !vec8(r*cols, dx, dy, x) {
		d.GELUBackward(dx, dy, x)
		d.BiasGrad(db, dx)
		return
	}
	parts, rowsPer := d.colsumParts(r, cols)
	part := d.scratch(parts * cols)
	d.launch(kn("k_gelu_bwd_colsum8", dx, dy, x), [3]int{(cols + 255) / 256, parts, 1}, [3]int{32, 8, 1}, 0, ptra(part), ptra(dx), dta(dx),
		ptra(dy), dta(dy), ptra(x), dta(x), i32a(r), i32a(cols), i32a(rowsPer))
	d.launch1(kn("k_colsum_finish", db), cols, ptra(db), dta(db), ptra(part), i32a(parts), i32a(cols), u64a(uint64(cols)))
	d.Free(part)
}

// FusesGELUBiasGrad is tensor.GELUBiasGrader's switch: on unless GODDP_GELU_DB_FOLD=0 (env.go; the
// default since session 19's whole suite on an H100).
func (d *Device) FusesGELUBiasGrad() bool { return geluDBFold() }

var _ tensor.GELUBiasGrader = (*Device)(nil)

// colsumCounters is k_colsum_partfin's counters, n of them (one per column block), zero between
// launches (each kernel's last blocks set theirs back): device memory of their own (cuMemAlloc,
// not the pool: they live as long as the device, and the pool's accounting stays the model's),
// grown when a wider sum needs more, freed at Close. 0 when the allocation failed (the caller
// then takes the two launches).
func (d *Device) colsumCounters(n int) uint64 {
	if n <= d.colsumN {
		return d.colsumCnt
	}
	n = max(n, 2*d.colsumN, 1024)
	if d.colsumCnt != 0 {
		d.Sync() // no launch still counts on the old ones
		_ = cudadrv.MemFree(d.colsumCnt)
		d.colsumCnt, d.colsumN = 0, 0
	}
	p, err := cudadrv.MemAlloc(int64(4 * n))
	if err != nil {
		return 0
	}
	if err := cudadrv.MemsetD32Async(p, 0, int64(n), d.stream); err != nil {
		_ = cudadrv.MemFree(p)
		return 0
	}
	d.colsumCnt, d.colsumN = p, n
	return p
}

// ---- activations ----

func (d *Device) ReLU(y, x *tensor.Tensor) {
	tensor.CheckLen("ReLU", y, x)
	tensor.CheckFloat("ReLU", y, x)
	if bnVec() && vec8(y.Len(), y, x) {
		d.launch1(kn("k_relu8", y, x), y.Len()/8, ptra(y), dta(y), ptra(x), dta(x), i32a(y.Len()/8))
	} else if y.Len() > 0 {
		d.launch1(kn("k_relu", y, x), y.Len(), ptra(y), dta(y), ptra(x), dta(x), u64a(uint64(y.Len())))
	}
}

func (d *Device) ReLUBackward(dx, dy, y *tensor.Tensor) {
	tensor.CheckLen("ReLUBackward", dx, dy, y)
	tensor.CheckFloat("ReLUBackward", dx, dy, y)
	if bnVec() && vec8(dx.Len(), dx, dy, y) {
		d.launch1(kn("k_relu_bwd8", dx, dy, y), dx.Len()/8, ptra(dx), dta(dx), ptra(dy), dta(dy), ptra(y), dta(y), i32a(dx.Len()/8))
	} else if dx.Len() > 0 {
		d.launch1(kn("k_relu_bwd", dx, dy, y), dx.Len(), ptra(dx), dta(dx), ptra(dy), dta(dy), ptra(y), dta(y), u64a(uint64(dx.Len())))
	}
}

func (d *Device) GELU(y, x *tensor.Tensor) {
	tensor.CheckLen("GELU", y, x)
	tensor.CheckFloat("GELU", y, x)
	if vec8(y.Len(), y, x) {
		d.launch1(kn("k_gelu8", y, x), y.Len()/8, ptra(y), dta(y), ptra(x), dta(x), i32a(y.Len()/8))
	} else if y.Len() > 0 {
		d.launch1(kn("k_gelu", y, x), y.Len(), ptra(y), dta(y), ptra(x), dta(x), u64a(uint64(y.Len())))
	}
}

func (d *Device) GELUBackward(dx, dy, x *tensor.Tensor) {
	tensor.CheckLen("GELUBackward", dx, dy, x)
	tensor.CheckFloat("GELUBackward", dx, dy, x)
	if vec8(dx.Len(), dx, dy, x) {
		d.launch1(kn("k_gelu_bwd8", dx, dy, x), dx.Len()/8, ptra(dx), dta(dx), ptra(dy), dta(dy), ptra(x), dta(x), i32a(dx.Len()/8))
	} else if dx.Len() > 0 {
		d.launch1(kn("k_gelu_bwd", dx, dy, x), dx.Len(), ptra(dx), dta(dx), ptra(dy), dta(dy), ptra(x), dta(x), u64a(uint64(dx.Len())))
	}
}

func (d *Device) Dropout(y, x *tensor.Tensor, p float32, seed uint64) {
	tensor.CheckLen("Dropout", y, x)
	tensor.CheckFloat("Dropout", y, x)
	if y.Len() > 0 {
		d.launch1(kn("k_dropout", y, x), y.Len(), ptra(y), dta(y), ptra(x), dta(x), u64a(uint64(y.Len())), f32a(p), seed)
	}
}

func (d *Device) DropoutBackward(dx, dy *tensor.Tensor, p float32, seed uint64) {
	d.Dropout(dx, dy, p, seed)
}

// ---- layer norm ----

// warpRows launches a warp-per-row kernel: 8 rows per block of 256 threads.
func (d *Device) warpRows(name string, rows int, args ...uint64) {
	d.launch(name, [3]int{max(1, (rows+7)/8), 1, 1}, [3]int{256, 1, 1}, 0, args...)
}

func (d *Device) LayerNorm(y, mean, rstd, x, w, b *tensor.Tensor, eps float32) {
	r, cols := tensor.MatDims(x)
	tensor.CheckLen("LayerNorm", y, x)
	if mean.Len() != r || rstd.Len() != r || w.Len() != cols || b.Len() != cols || mean.DType() != tensor.F32 || rstd.DType() != tensor.F32 {
		panic(fmt.Sprintf("cuda: LayerNorm shapes: x %s, w %s, b %s, mean %s, rstd %s", x, w, b, mean, rstd))
	}
	tensor.CheckFloat("LayerNorm", y, x, w, b)
	if r == 0 {
		return
	}
	name := "k_layernorm"
	if k := cols / 256; lnVec() && cols%256 == 0 && k <= 4 && vec8(8, y, x, w, b) {
		name = fmt.Sprintf("k_ln_fwd8_%d", k) // the row in registers, 8 wide
	}
	d.warpRows(kn(name, y, x, w, b), r, ptra(y), dta(y), ptra(mean), ptra(rstd), ptra(x), dta(x), ptra(w), dta(w), ptra(b), dta(b),
		i32a(r), i32a(cols), f32a(eps))
}

func (d *Device) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd *tensor.Tensor) {
	r, cols := tensor.MatDims(x)
	tensor.CheckLen("LayerNormBackward", dx, dy, x)
	if mean.Len() != r || rstd.Len() != r || w.Len() != cols || dw.Len() != cols || db.Len() != cols {
		panic(fmt.Sprintf("cuda: LayerNormBackward shapes: x %s, w %s, dw %s, db %s, mean %s", x, w, dw, db, mean))
	}
	tensor.CheckFloat("LayerNormBackward", dx, dw, db, dy, x, w)
	shmem := 2 * cols * 4
	if shmem > 48<<10 {
		panic(fmt.Sprintf("cuda: LayerNormBackward supports up to 6144 columns, got %d", cols))
	}
	if r == 0 {
		return
	}
	if k := cols / 256; cols%256 == 0 && k <= 4 && vec8(8, dx, dy, x, w) {
		// 8-wide: dx by a warp per row, dw and db by columns into parts of rowsPer rows; no atomics.
		parts, rowsPer := d.lnParts(r, cols)
		part := d.scratch(parts * 2 * cols)
		if lnBwdFused() { // dx and the parts in one pass: the two kernels' bits
			name := "k_ln_bwd8f_%d"
			if lnBwdEarly() {
				name = "k_ln_bwd8fe_%d"
			}
			d.launch(kn(fmt.Sprintf(name, k), dx, dy, x, w), [3]int{1, parts, 1}, [3]int{32, 8, 1}, 0, ptra(dx), dta(dx), ptra(part),
				ptra(dy), dta(dy), ptra(x), dta(x), ptra(w), dta(w), ptra(mean), ptra(rstd), i32a(r), i32a(cols), i32a(rowsPer))
		} else {
			d.warpRows(kn(fmt.Sprintf("k_ln_bwd_dx8_%d", k), dx, dy, x, w), r, ptra(dx), dta(dx), ptra(dy), dta(dy), ptra(x), dta(x), ptra(w), dta(w),
				ptra(mean), ptra(rstd), i32a(r), i32a(cols))
			d.launch(kn("k_ln_dwdb8", dy, x), [3]int{(cols/8 + 31) / 32, parts, 1}, [3]int{32, 8, 1}, 0, ptra(part), ptra(dy), dta(dy), ptra(x), dta(x),
				ptra(mean), ptra(rstd), i32a(r), i32a(cols), i32a(rowsPer))
		}
		d.lnFinish(dw, db, part, parts, cols)
		d.Free(part)
		return
	}
	blocks := max(1, min((r+7)/8, d.sms*2))
	part := d.scratch(blocks * 2 * cols)
	kern := "k_layernorm_bwd" // shared-memory atomics per element
	switch {                  // a warp's row and its dw, db sums in registers
	case cols <= 256:
		kern = "k_layernorm_bwd_r8"
	case cols <= 768:
		kern = "k_layernorm_bwd_r24"
	case cols <= 1024:
		kern = "k_layernorm_bwd_r32"
	}
	d.launch(kn(kern, dx, dy, x, w), [3]int{blocks, 1, 1}, [3]int{256, 1, 1}, shmem, ptra(dx), dta(dx), ptra(part),
		ptra(dy), dta(dy), ptra(x), dta(x), ptra(w), dta(w), ptra(mean), ptra(rstd), i32a(r), i32a(cols))
	d.lnFinish(dw, db, part, blocks, cols)
	d.Free(part)
}

// lnParts is the 8-wide LayerNorm backward's grid: parts blocks of rowsPer rows each (k_ln_dwdb8's
// (cols/8 + 31)/32 column blocks times parts fill the SMs about 8 deep).
func (d *Device) lnParts(r, cols int) (parts, rowsPer int) {
	cb := (cols/8 + 31) / 32
	parts = max(1, min((r+63)/64, (d.sms*8+cb-1)/cb))
	return parts, (r + parts - 1) / parts
}

var _ tensor.LNBackwardColSummer = (*Device)(nil)

// FoldsLNColSums: a GPT sums its residual projections' bias gradients in the layer norms'
// backward (LayerNormBackwardColSum) under GODDP_LN_COLSUM=1 (env.go; not yet run on a GPU).
func (d *Device) FoldsLNColSums() bool { return lnColSum() }

// LayerNormBackwardColSum is LayerNormBackward that also adds the column sums of the dx it
// leaves, as stored, into s (C) — tensor.LNBackwardColSummer: a GPT's residual projections' bias
// gradients, so their weight gradients are plain GEMMs, not cublasLt's BGRADB ones. On the 8-wide
// one-pass path (the default's) one kernel does all: k_ln_bwd8fs_K, k_ln_bwd8fe_K's dx, dw and db
// bits with a third column part, then k_colsum_finish3 (dw's and db's finish bits); s within
// rounding of BiasGrad's (other groupings of the same f32 additions). Elsewhere the composition.
// Not yet run on a GPU.
func (d *Device) LayerNormBackwardColSum(dx, dw, db, dy, x, w, mean, rstd, s *tensor.Tensor) {
	r, cols := tensor.MatDims(x)
	k := cols / 256
	if cols%256 != 0 || k > 4 || !vec8(8, dx, dy, x, w) || !lnBwdFused() || !lnBwdEarly() || !colsumFused() || r == 0 ||
		s.Len() != cols || s.DType() != tensor.F32 || dw.DType() != db.DType() {
		tensor.ComposeLayerNormBackwardColSum(d, dx, dw, db, dy, x, w, mean, rstd, s)
		return
	}
	tensor.CheckLen("LayerNormBackwardColSum", dx, dy, x)
	if mean.Len() != r || rstd.Len() != r || w.Len() != cols || dw.Len() != cols || db.Len() != cols {
		panic(fmt.Sprintf("cuda: LayerNormBackwardColSum shapes: x %s, w %s, dw %s, db %s, mean %s", x, w, dw, db, mean))
	}
	tensor.CheckFloat("LayerNormBackwardColSum", dx, dw, db, dy, x, w)
	parts, rowsPer := d.lnParts(r, cols)
	part := d.scratch(parts * 3 * cols)
	d.launch(kn(fmt.Sprintf("k_ln_bwd8fs_%d", k), dx, dy, x, w), [3]int{1, parts, 1}, [3]int{32, 8, 1}, 0, ptra(dx), dta(dx), ptra(part),
		ptra(dy), dta(dy), ptra(x), dta(x), ptra(w), dta(w), ptra(mean), ptra(rstd), i32a(r), i32a(cols), i32a(rowsPer))
	d.launch1(kn("k_colsum_finish3", dw, db), 3*cols, ptra(dw), dta(dw), ptra(db), dta(db), ptra(s), dta(s), ptra(part), i32a(parts), i32a(cols))
	d.Free(part)
}

// lnFinish adds a LayerNorm backward's partial sums into dw and db: dw from the first half of each
// part's 2·cols values, db from the second; one launch of k_colsum_finish2 by
// default (GODDP_COLSUM_FUSED=0 off; the same sums in the same order), else k_colsum_finish for each.
func (d *Device) lnFinish(dw, db, part *tensor.Tensor, parts, cols int) {
	if colsumFused() && dw.DType() == db.DType() {
		d.launch1(kn("k_colsum_finish2", dw, db), 2*cols, ptra(dw), dta(dw), ptra(db), dta(db), ptra(part), i32a(parts), i32a(cols))
		return
	}
	d.launch1(kn("k_colsum_finish", dw), cols, ptra(dw), dta(dw), ptra(part), i32a(parts), i32a(cols), u64a(uint64(2*cols)))
	d.launch1(kn("k_colsum_finish", db), cols, ptra(db), dta(db), ptra(part)+uint64(4*cols), i32a(parts), i32a(cols), u64a(uint64(2*cols)))
}

// ---- embeddings ----

func (d *Device) Embedding(out, ids, wte, wpe *tensor.Tensor) {
	if len(ids.Shape()) != 2 || ids.DType() != tensor.I32 || out.Len() != ids.Len()*wte.Cols() {
		panic(fmt.Sprintf("cuda: Embedding shapes: out %s, ids %s, wte %s", out, ids, wte))
	}
	tt, cols := ids.Shape()[1], wte.Cols()
	wp, wdt := nilPtr, uint64(0)
	if wpe != nil {
		if wpe.Rows() < tt || wpe.Cols() != cols {
			panic(fmt.Sprintf("cuda: Embedding: wpe %s too small for T=%d", wpe, tt))
		}
		wp, wdt = ptra(wpe), dta(wpe)
	}
	tensor.CheckFloat("Embedding", out, wte)
	if out.Len() > 0 {
		d.launch1(kn("k_embedding", out, wte, wpe), out.Len(), ptra(out), dta(out), ptra(ids), ptra(wte), dta(wte), wp, wdt,
			u64a(uint64(out.Len())), i32a(tt), i32a(cols), i32a(wte.Rows()))
	}
}

func (d *Device) EmbeddingBackward(dwte, dwpe, dout, ids *tensor.Tensor) {
	if len(ids.Shape()) != 2 || ids.DType() != tensor.I32 || dout.Len() != ids.Len()*dwte.Cols() {
		panic(fmt.Sprintf("cuda: EmbeddingBackward shapes: dwte %s, dout %s, ids %s", dwte, dout, ids))
	}
	bb, tt, cols := ids.Shape()[0], ids.Shape()[1], dwte.Cols()
	tensor.CheckFloat("EmbeddingBackward", dwte, dout)
	if dout.Len() == 0 {
		return
	}
	if n, v := ids.Len(), dwte.Rows(); embSorted() && 4*v <= embSortMaxShared {
		// deterministic: the positions sorted by token, each token's rows added in order
		sorted := d.scratch(2*n + v) // int32: the positions by token, their tokens, each token's run end
		perm, toks, ends := ptra(sorted), ptra(sorted)+uint64(4*n), ptra(sorted)+uint64(8*n)
		d.allowDynShared("k_emb_sort", embSortMaxShared)
		d.launch("k_emb_sort", [3]int{1, 1, 1}, [3]int{1024, 1, 1}, 4*v, perm, toks, ends, ptra(ids), i32a(n), i32a(v))
		d.launch(kn("k_emb_bwd_sorted", dwte, dout), [3]int{n, (cols + 255) / 256, 1}, [3]int{256, 1, 1}, 0, ptra(dwte), dta(dwte), ptra(dout), dta(dout),
			perm, toks, ends, i32a(n), i32a(cols))
		d.Free(sorted)
	} else {
		d.launch1(kn("k_embedding_bwd_wte", dwte, dout), dout.Len(), ptra(dwte), dta(dwte), ptra(dout), dta(dout), ptra(ids), u64a(uint64(dout.Len())), i32a(cols))
	}
	if dwpe != nil {
		if dwpe.Rows() < tt || dwpe.Cols() != cols {
			panic(fmt.Sprintf("cuda: EmbeddingBackward: dwpe %s too small for T=%d", dwpe, tt))
		}
		d.launch1(kn("k_embedding_bwd_wpe", dwpe, dout), tt*cols, ptra(dwpe), dta(dwpe), ptra(dout), dta(dout), i32a(bb), i32a(tt), i32a(cols))
	}
}

// ---- softmax and attention layout ----

func (d *Device) Softmax(y, x *tensor.Tensor, scale float32, causal bool) {
	r, cols := tensor.MatDims(x)
	tensor.CheckLen("Softmax", y, x)
	if causal && (len(x.Shape()) < 2 || x.Dim(-2) != cols) {
		panic(fmt.Sprintf("cuda: causal Softmax wants (…,T,T), got %s", x))
	}
	tensor.CheckFloat("Softmax", y, x)
	if r == 0 {
		return
	}
	c := 0
	if causal {
		c = 1
	}
	if k := cols / 256; cols%256 == 0 && (k == 1 || k == 2 || k == 4 || k == 8) && vec8(8, y, x) {
		d.warpRows(kn(fmt.Sprintf("k_softmax8_%d", k), y, x), r, ptra(y), dta(y), ptra(x), dta(x), u64a(uint64(r)), i32a(cols), f32a(scale), i32a(c))
		return
	}
	d.warpRows(kn("k_softmax", y, x), r, ptra(y), dta(y), ptra(x), dta(x), u64a(uint64(r)), i32a(cols), f32a(scale), i32a(c))
}

func (d *Device) SoftmaxBackward(dx, dy, y *tensor.Tensor, scale float32) {
	r, cols := tensor.MatDims(y)
	tensor.CheckLen("SoftmaxBackward", dx, dy, y)
	tensor.CheckFloat("SoftmaxBackward", dx, dy, y)
	if r == 0 {
		return
	}
	if k := cols / 256; cols%256 == 0 && (k == 1 || k == 2 || k == 4 || k == 8) && vec8(8, dx, dy, y) {
		d.warpRows(kn(fmt.Sprintf("k_softmax_bwd8_%d", k), dx, dy, y), r, ptra(dx), dta(dx), ptra(dy), dta(dy), ptra(y), dta(y), u64a(uint64(r)), i32a(cols), f32a(scale))
		return
	}
	d.warpRows(kn("k_softmax_bwd", dx, dy, y), r, ptra(dx), dta(dx), ptra(dy), dta(dy), ptra(y), dta(y), u64a(uint64(r)), i32a(cols), f32a(scale))
}

func (d *Device) SplitQKV(q, k, v, qkv *tensor.Tensor) {
	_, h, t, hs := tensor.QKVDims("SplitQKV", q, k, v, qkv)
	tensor.CheckFloat("SplitQKV", q, k, v, qkv)
	if hs%8 == 0 && vec8(qkv.Len(), qkv, q, k, v) {
		d.launch1(kn("k_qkv8", qkv, q, k, v), qkv.Len()/8, ptra(qkv), dta(qkv), ptra(q), dta(q), ptra(k), dta(k), ptra(v), dta(v),
			i32a(qkv.Len()/8), i32a(t), i32a(h), i32a(hs), i32a(0))
	} else if qkv.Len() > 0 {
		d.launch1(kn("k_qkv", qkv, q, k, v), qkv.Len(), ptra(qkv), dta(qkv), ptra(q), dta(q), ptra(k), dta(k), ptra(v), dta(v),
			u64a(uint64(qkv.Len())), i32a(t), i32a(h), i32a(hs), i32a(0))
	}
}

func (d *Device) MergeQKV(dqkv, dq, dk, dv *tensor.Tensor) {
	_, h, t, hs := tensor.QKVDims("MergeQKV", dq, dk, dv, dqkv)
	tensor.CheckFloat("MergeQKV", dqkv, dq, dk, dv)
	if hs%8 == 0 && vec8(dqkv.Len(), dqkv, dq, dk, dv) {
		d.launch1(kn("k_qkv8", dqkv, dq, dk, dv), dqkv.Len()/8, ptra(dqkv), dta(dqkv), ptra(dq), dta(dq), ptra(dk), dta(dk), ptra(dv), dta(dv),
			i32a(dqkv.Len()/8), i32a(t), i32a(h), i32a(hs), i32a(1))
	} else if dqkv.Len() > 0 {
		d.launch1(kn("k_qkv", dqkv, dq, dk, dv), dqkv.Len(), ptra(dqkv), dta(dqkv), ptra(dq), dta(dq), ptra(dk), dta(dk), ptra(dv), dta(dv),
			u64a(uint64(dqkv.Len())), i32a(t), i32a(h), i32a(hs), i32a(1))
	}
}

func (d *Device) Permute0213(dst, src *tensor.Tensor) {
	if len(src.Shape()) != 4 || len(dst.Shape()) != 4 {
		panic(fmt.Sprintf("cuda: Permute0213 wants 4-D tensors: dst %s, src %s", dst, src))
	}
	a, b, cc, dd := src.Shape()[0], src.Shape()[1], src.Shape()[2], src.Shape()[3]
	if dst.Shape()[0] != a || dst.Shape()[1] != cc || dst.Shape()[2] != b || dst.Shape()[3] != dd {
		panic(fmt.Sprintf("cuda: Permute0213: dst %s is not src %s with dims 1 and 2 swapped", dst, src))
	}
	tensor.CheckFloat("Permute0213", dst, src)
	if dd%8 == 0 && vec8(dst.Len(), dst, src) {
		d.launch1(kn("k_permute0213_8", dst, src), dst.Len()/8, ptra(dst), dta(dst), ptra(src), dta(src), i32a(dst.Len()/8), i32a(b), i32a(cc), i32a(dd))
	} else if dst.Len() > 0 {
		d.launch1(kn("k_permute0213", dst, src), dst.Len(), ptra(dst), dta(dst), ptra(src), dta(src), u64a(uint64(dst.Len())), i32a(b), i32a(cc), i32a(dd))
	}
}

// ---- loss ----

func (d *Device) CrossEntropy(losses, logits, targets *tensor.Tensor) {
	r, v := tensor.MatDims(logits)
	if losses.Len() != r || targets.Len() != r || losses.DType() != tensor.F32 || targets.DType() != tensor.I32 {
		panic(fmt.Sprintf("cuda: CrossEntropy shapes: losses %s, logits %s, targets %s", losses, logits, targets))
	}
	tensor.CheckFloat("CrossEntropy", logits)
	if r > 0 {
		d.launch(kn("k_xent", logits), [3]int{r, 1, 1}, [3]int{512, 1, 1}, 0, ptra(losses), nilPtr, 0, ptra(logits), dta(logits),
			ptra(targets), i32a(v), f32a(0), i32a(0), vecArg(v%8 == 0 && vec8(8, logits)))
	}
}

func (d *Device) CrossEntropyBackward(dlogits, logits, targets *tensor.Tensor, scale float32) {
	r, v := tensor.MatDims(logits)
	tensor.CheckLen("CrossEntropyBackward", dlogits, logits)
	if targets.Len() != r || targets.DType() != tensor.I32 {
		panic(fmt.Sprintf("cuda: CrossEntropyBackward shapes: logits %s, targets %s", logits, targets))
	}
	tensor.CheckFloat("CrossEntropyBackward", dlogits, logits)
	if r > 0 && !d.xentRowOnce(nil, dlogits, logits, targets, scale) {
		d.launch(kn("k_xent", dlogits, logits), [3]int{r, 1, 1}, [3]int{512, 1, 1}, 0, nilPtr, ptra(dlogits), dta(dlogits), ptra(logits), dta(logits),
			ptra(targets), i32a(v), f32a(scale), i32a(1), vecArg(v%8 == 0 && vec8(8, logits, dlogits)))
	}
}

// xentSmemMax is the most shared memory k_xent_sm takes a block: two blocks an SM on Hopper
// (227 KiB a block at most, 228 KiB an SM, 1 KiB of it the system's a block) and Ampere (164 KiB an
// SM: one block there). Rows of more than 56 Ki 16-bit logits take k_xent.
const xentSmemMax = 112 << 10

// embSortMaxShared is the most shared memory k_emb_sort's counts take (one int a vocabulary row):
// Hopper's and Ampere's opt-in limit less its static 128 bytes and some room. Vocabularies over
// ~56 Ki rows keep the atomic adds.
const embSortMaxShared = 220 << 10

// allowDynShared lets kernel name (its f16 module's, or bf16's by kn's suffix) ask for up to bytes
// of dynamic shared memory (more than 48 KiB needs it), with the most shared memory the SM has as
// its carveout; once per kernel and size.
func (d *Device) allowDynShared(name string, bytes int) {
	if d.dynShared[name] >= bytes {
		return
	}
	f, ok := d.fn(name)
	if !ok {
		panic(fmt.Sprintf("cuda: no kernel %q", name))
	}
	d.enter()
	err := f.SetMaxDynamicShared(bytes)
	if err == nil {
		err = f.SetCarveout(100)
	}
	d.leave()
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", name, err))
	}
	d.dynShared[name] = bytes
}

// xentRowOnce launches k_xent_sm for the cross-entropy's gradient (with the losses when losses is
// not nil) by default (GODDP_XENT_SMEM=0 off) where the logits suit it — 16-bit, rows of a multiple of 8 that
// fit xentSmemMax, 16-byte aligned, the gradient of their dtype — and reports whether it did.
func (d *Device) xentRowOnce(losses, dlogits, logits, targets *tensor.Tensor, scale float32) bool {
	r, v := tensor.MatDims(logits)
	dt := logits.DType()
	if !xentSmem() || (dt != tensor.F16 && dt != tensor.BF16) || dlogits.DType() != dt || v%8 != 0 || 2*v > xentSmemMax || !vec8(8, logits, dlogits) {
		return false
	}
	name := kn("k_xent_sm", dlogits, logits)
	bytes := 2 * v
	d.allowDynShared(name, xentSmemMax) // two blocks an SM need the most shared memory the SM has
	lp := nilPtr
	if losses != nil {
		lp = ptra(losses)
	}
	d.launch(name, [3]int{r, 1, 1}, [3]int{512, 1, 1}, bytes, lp, ptra(dlogits), dta(dlogits), ptra(logits), dta(logits),
		ptra(targets), i32a(v), f32a(scale))
	return true
}

// CrossEntropyWithGrad is CrossEntropy then CrossEntropyBackward (tensor.CrossEntropyGrad):
// one launch of k_xent writes the losses in its gradient pass, reading the logits twice instead of
// three times (the same arithmetic: the same bits); GODDP_XENT_FUSED=0 keeps the two launches.
// dlogits may alias logits.
func (d *Device) CrossEntropyWithGrad(losses, dlogits, logits, targets *tensor.Tensor, scale float32) {
	if !xentFused() {
		d.CrossEntropy(losses, logits, targets)
		d.CrossEntropyBackward(dlogits, logits, targets, scale)
		return
	}
	d.crossEntropyOneLaunch(losses, dlogits, logits, targets, scale)
}

// crossEntropyOneLaunch is CrossEntropyWithGrad's one launch.
func (d *Device) crossEntropyOneLaunch(losses, dlogits, logits, targets *tensor.Tensor, scale float32) {
	r, v := tensor.MatDims(logits)
	tensor.CheckLen("CrossEntropyWithGrad", dlogits, logits)
	if losses.Len() != r || targets.Len() != r || losses.DType() != tensor.F32 || targets.DType() != tensor.I32 {
		panic(fmt.Sprintf("cuda: CrossEntropyWithGrad shapes: losses %s, logits %s, targets %s", losses, logits, targets))
	}
	tensor.CheckFloat("CrossEntropyWithGrad", dlogits, logits)
	if r > 0 && !d.xentRowOnce(losses, dlogits, logits, targets, scale) {
		d.launch(kn("k_xent", dlogits, logits), [3]int{r, 1, 1}, [3]int{512, 1, 1}, 0, ptra(losses), ptra(dlogits), dta(dlogits), ptra(logits), dta(logits),
			ptra(targets), i32a(v), f32a(scale), i32a(1), vecArg(v%8 == 0 && vec8(8, logits, dlogits)))
	}
}

func (d *Device) ArgMax(out, x *tensor.Tensor) {
	r, cols := tensor.MatDims(x)
	if out.Len() != r || out.DType() != tensor.I32 {
		panic(fmt.Sprintf("cuda: ArgMax: out %s for %s", out, x))
	}
	tensor.CheckFloat("ArgMax", x)
	if r > 0 {
		d.launch(kn("k_argmax", x), [3]int{r, 1, 1}, [3]int{256, 1, 1}, 0, ptra(out), ptra(x), dta(x), i32a(cols))
	}
}

// ---- reductions, scaling, optimizers ----

func (d *Device) sum(out, x *tensor.Tensor, sq int) {
	if out.DType() != tensor.F32 || out.Len() < 1 {
		panic(fmt.Sprintf("cuda: Sum/SumSquares into %s", out))
	}
	tensor.CheckFloat("Sum", x)
	if x.Len() == 0 {
		return
	}
	blocks := d.sumBlocks(x.Len())
	part := d.scratch(2 * blocks) // doubles
	d.launch(kn("k_sum_part", x), [3]int{blocks, 1, 1}, [3]int{256, 1, 1}, 0, ptra(part), ptra(x), dta(x), u64a(uint64(x.Len())), i32a(sq))
	d.launch("k_sum_finish", [3]int{1, 1, 1}, [3]int{256, 1, 1}, 0, ptra(out), ptra(part), i32a(blocks))
	d.Free(part)
}

func (d *Device) SumSquares(out, x *tensor.Tensor) { d.sum(out, x, 1) }

// sumBlocks is k_sum_part's grid for n elements (256 threads a block): every sum of squares whose
// bits must agree (SumSquares, SumSquaresF64, UnscaleCheckSumSquares) takes this one.
func (d *Device) sumBlocks(n int) int { return max(1, min((n+1023)/1024, d.sms*4)) }

// UnscaleCheckSumSquares is tensor.UnscaleSquarer: k_unscale_sumsq on d.sum's grid, then
// k_sum_finish — UnscaleCheck then SumSquares in one read of x, the same bits. f32 x only (the
// gradient slab); other dtypes take the two passes.
func (d *Device) UnscaleCheckSumSquares(x *tensor.Tensor, inv float32, found, sq *tensor.Tensor) {
	if x.DType() != tensor.F32 {
		d.UnscaleCheck(x, inv, found)
		d.SumSquares(sq, x)
		return
	}
	if found.DType() != tensor.F32 || found.Len() < 1 || sq.DType() != tensor.F32 || sq.Len() < 1 {
		panic(fmt.Sprintf("cuda: UnscaleCheckSumSquares: found %s, sq %s", found, sq))
	}
	if x.Len() == 0 {
		return
	}
	blocks := d.sumBlocks(x.Len()) // d.sum's grid: its bits
	part := d.scratch(2 * blocks)  // doubles
	d.launch("k_unscale_sumsq", [3]int{blocks, 1, 1}, [3]int{256, 1, 1}, 0, ptra(part), ptra(x), u64a(uint64(x.Len())), f32a(inv), ptra(found))
	d.launch("k_sum_finish", [3]int{1, 1, 1}, [3]int{256, 1, 1}, 0, ptra(sq), ptra(part), i32a(blocks))
	d.Free(part)
}

// FusesUnscaleSquares is tensor.UnscaleSquarer's switch: on unless GODDP_CLIP_FUSED=0 (env.go).
func (d *Device) FusesUnscaleSquares() bool { return clipFused() }

var _ tensor.UnscaleSquarer = (*Device)(nil)

// CheckUnscaled is tensor.UnscaleFolder: with sq, k_check_sumsq on d.sum's grid then
// k_sum_finish — UnscaleCheckSumSquares's flag and bits without its store; without, k_check —
// UnscaleCheck's flag without its store. x is read once and left as it was. f32 x only.
func (d *Device) CheckUnscaled(x *tensor.Tensor, inv float32, found, sq *tensor.Tensor) {
	f32Only("CheckUnscaled", x)
	if found.DType() != tensor.F32 || found.Len() < 1 || (sq != nil && (sq.DType() != tensor.F32 || sq.Len() < 1)) {
		panic(fmt.Sprintf("cuda: CheckUnscaled: found %s, sq %v", found, sq))
	}
	if x.Len() == 0 {
		return
	}
	if sq == nil {
		d.launch1("k_check", x.Len(), ptra(x), u64a(uint64(x.Len())), f32a(inv), ptra(found))
		return
	}
	blocks := d.sumBlocks(x.Len()) // k_unscale_sumsq's grid: its bits
	part := d.scratch(2 * blocks)  // doubles
	d.launch("k_check_sumsq", [3]int{blocks, 1, 1}, [3]int{256, 1, 1}, 0, ptra(part), ptra(x), u64a(uint64(x.Len())), f32a(inv), ptra(found))
	d.launch("k_sum_finish", [3]int{1, 1, 1}, [3]int{256, 1, 1}, 0, ptra(sq), ptra(part), i32a(blocks))
	d.Free(part)
}

// FoldsUnscale is tensor.UnscaleFolder's switch: unless GODDP_UNSCALE_FOLD=0 (env.go; the default
// since session 21's H100 run). AdamW and AdamWRuns honour AdamWArgs.Unscale through k_adamw_us
// and k_adamw_multi_us (k_adamw and k_adamw_multi, without it, serve the sharded step and =0).
func (d *Device) FoldsUnscale() bool { return unscaleFold() }

var _ tensor.UnscaleFolder = (*Device)(nil)

func (d *Device) Sum(out, x *tensor.Tensor) { d.sum(out, x, 0) }

var _ tensor.SquareSummer = (*Device)(nil)

// SumSquaresF64 is tensor.SquareSummer: per x, k_sum_part's float64 block partials, added by
// k_sum_finish64 into one double on the device (in xs's order); one download at the end.
func (d *Device) SumSquaresF64(xs []*tensor.Tensor) float64 {
	acc := d.scratch(2) // one double, as two f32 words
	d.Fill(acc, 0)
	for _, x := range xs {
		tensor.CheckFloat("SumSquaresF64", x)
		if x.Len() == 0 {
			continue
		}
		blocks := d.sumBlocks(x.Len())
		part := d.scratch(2 * blocks) // doubles
		d.launch(kn("k_sum_part", x), [3]int{blocks, 1, 1}, [3]int{256, 1, 1}, 0, ptra(part), ptra(x), dta(x), u64a(uint64(x.Len())), i32a(1))
		d.launch("k_sum_finish64", [3]int{1, 1, 1}, [3]int{256, 1, 1}, 0, ptra(acc), ptra(part), i32a(blocks))
		d.Free(part)
	}
	var h [2]float32
	d.Download(h[:], acc)
	d.Free(acc)
	return math.Float64frombits(uint64(math.Float32bits(h[0])) | uint64(math.Float32bits(h[1]))<<32)
}

func (d *Device) UnscaleCheck(x *tensor.Tensor, inv float32, found *tensor.Tensor) {
	tensor.CheckFloat("UnscaleCheck", x)
	if found.DType() != tensor.F32 || found.Len() < 1 {
		panic(fmt.Sprintf("cuda: UnscaleCheck: found %s", found))
	}
	if x.Len() > 0 {
		d.launch1(kn("k_unscale", x), x.Len(), ptra(x), dta(x), u64a(uint64(x.Len())), f32a(inv), ptra(found))
	}
}

func f32Only(op string, ts ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil && t.DType() != tensor.F32 {
			panic(fmt.Sprintf("cuda: %s: %s is not f32", op, t))
		}
	}
}

func (d *Device) AdamW(p, g, m, v, half *tensor.Tensor, a tensor.AdamWArgs) {
	tensor.CheckLen("AdamW", p, g, m, v)
	f32Only("AdamW", p, g, m, v)
	hp := halfArg("AdamW", p, half)
	if p.Len() > 0 {
		args := []uint64{ptra(p), ptra(g), ptra(m), ptra(v), hp, u64a(uint64(p.Len())),
			f32a(a.LR), f32a(a.Beta1), f32a(a.Beta2), f32a(a.Eps), f32a(a.WeightDecay), f32a(a.BiasCorr1), f32a(a.BiasCorr2)}
		name := "k_adamw"
		if a.Unscale != 0 { // the unscale folded in: k_adamw_us (not yet run on a GPU)
			name, args = "k_adamw_us", append(args, f32a(a.Unscale))
		}
		d.launch1(kn(name, half), p.Len(), append(args, f32a(gradScale(a)))...)
	}
}

// AdamWTable packs runs for k_adamw_multi: one int64 per run, its start offset times 2 plus its
// decay flag, as an I32 tensor of 2·len(runs) words (little-endian halves).
func (d *Device) AdamWTable(runs []tensor.AdamWRun) *tensor.Tensor {
	if len(runs) == 0 {
		return nil
	}
	words := make([]int32, 2*len(runs))
	for i, r := range runs {
		e := uint64(r.Off) << 1
		if r.Decay {
			e |= 1
		}
		words[2*i] = int32(uint32(e))
		words[2*i+1] = int32(uint32(e >> 32))
	}
	t := d.Alloc(tensor.I32, "adamw.runs", len(words))
	d.UploadI32(t, words)
	return t
}

// AdamWRuns is AdamW over whole slabs in one launch of k_adamw_multi, which applies the weight
// decay per run from table (AdamWTable of runs) and otherwise does k_adamw's arithmetic.
func (d *Device) AdamWRuns(p, g, m, v, half *tensor.Tensor, runs []tensor.AdamWRun, table *tensor.Tensor, a tensor.AdamWArgs) {
	tensor.CheckLen("AdamW", p, g, m, v)
	f32Only("AdamW", p, g, m, v)
	hp := halfArg("AdamW", p, half)
	if p.Len() == 0 {
		return
	}
	checkRuns("AdamWRuns", p, runs, table)
	args := []uint64{ptra(p), ptra(g), ptra(m), ptra(v), hp, u64a(uint64(p.Len())), ptra(table), i32a(len(runs)),
		f32a(a.LR), f32a(a.Beta1), f32a(a.Beta2), f32a(a.Eps), f32a(a.WeightDecay), f32a(a.BiasCorr1), f32a(a.BiasCorr2)}
	name := "k_adamw_multi"
	if a.Unscale != 0 { // the unscale folded in: k_adamw_multi_us (not yet run on a GPU)
		name, args = "k_adamw_multi_us", append(args, f32a(a.Unscale))
	}
	d.launch1(kn(name, half), p.Len(), append(args, f32a(gradScale(a)))...)
}

var _ tensor.MultiAdamW = (*Device)(nil)

// gradScale is the kernels' gs: AdamWArgs.GradScale, 1 when it is 0 (none; g·1 is g, bit for bit).
func gradScale(a tensor.AdamWArgs) float32 {
	if a.GradScale == 0 {
		return 1
	}
	return a.GradScale
}

// GradScaledAdamW is tensor.GradScaledAdamW's switch: on unless GODDP_CLIP_FUSED=0 (env.go): the
// optimizer folds gradient clipping into its step (the kernels always honour AdamWArgs.GradScale).
func (d *Device) GradScaledAdamW() bool { return clipFused() }

var _ tensor.GradScaledAdamW = (*Device)(nil)

// SGDRuns is SGD over whole slabs in one launch of k_sgd_multi (table: AdamWTable of runs), the
// weight decay per run, otherwise k_sgd's arithmetic: 108 launches a ResNet-50 step become one.
func (d *Device) SGDRuns(p, g, mom, half *tensor.Tensor, runs []tensor.AdamWRun, table *tensor.Tensor, a tensor.SGDArgs) {
	tensor.CheckLen("SGD", p, g)
	f32Only("SGD", p, g, mom)
	mp := nilPtr
	if mom != nil {
		tensor.CheckLen("SGD", p, mom)
		mp = ptra(mom)
	}
	hp := halfArg("SGD", p, half)
	if p.Len() == 0 {
		return
	}
	checkRuns("SGDRuns", p, runs, table)
	d.launch1(kn("k_sgd_multi", half), p.Len(), ptra(p), ptra(g), mp, hp, u64a(uint64(p.Len())), ptra(table), i32a(len(runs)),
		f32a(a.LR), f32a(a.Momentum), f32a(a.WeightDecay), i32a(b2i(a.Nesterov)))
}

// FusesSGD is tensor.MultiSGD's switch: on unless GODDP_SGD_MULTI=0 (env.go; the whole `-tags
// cuda` suite passed with it on an H100 in session 17).
func (d *Device) FusesSGD() bool { return sgdMulti() }

var _ tensor.MultiSGD = (*Device)(nil)

// halfArg is an optimizer's 16-bit copy as a kernel argument (nil: none), checked against p.
func halfArg(op string, p, half *tensor.Tensor) uint64 {
	if half == nil {
		return nilPtr
	}
	tensor.CheckLen(op, p, half)
	if !half.DType().Half() {
		panic(fmt.Sprintf("cuda: %s: half copy %s is not f16 or bf16", op, half))
	}
	return ptra(half)
}

// checkRuns panics unless runs partition [0, p.Len()) in order and table is their AdamWTable.
func checkRuns(op string, p *tensor.Tensor, runs []tensor.AdamWRun, table *tensor.Tensor) {
	end := 0
	for _, r := range runs {
		if r.Off != end || r.N < 0 {
			panic(fmt.Sprintf("cuda: %s: run %+v does not follow offset %d", op, r, end))
		}
		end += r.N
	}
	if end != p.Len() || table == nil || table.DType() != tensor.I32 || table.Len() != 2*len(runs) {
		panic(fmt.Sprintf("cuda: %s: %d runs over %d elements, table %v, for %s", op, len(runs), end, table, p))
	}
}

// b2i is a kernel's int flag.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (d *Device) SGD(p, g, mom, half *tensor.Tensor, a tensor.SGDArgs) {
	tensor.CheckLen("SGD", p, g)
	f32Only("SGD", p, g, mom)
	mp := nilPtr
	if mom != nil {
		tensor.CheckLen("SGD", p, mom)
		mp = ptra(mom)
	}
	hp := halfArg("SGD", p, half)
	if p.Len() > 0 {
		d.launch1(kn("k_sgd", half), p.Len(), ptra(p), ptra(g), mp, hp, u64a(uint64(p.Len())), f32a(a.LR), f32a(a.Momentum), f32a(a.WeightDecay), i32a(b2i(a.Nesterov)))
	}
}

func vecArg(ok bool) uint64 {
	if ok {
		return 1
	}
	return 0
}
