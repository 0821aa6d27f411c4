package model

// master_shard.go: the f32 master weights kept for part of the slab only (ddp.shard_master under
// ddp.shard_optimizer, issue 31; DeepSpeed ZeRO-1 partitions the fp32 master with the optimizer
// state). Under mixed precision forward and backward read the 16-bit copy, and each rank's
// optimizer updates only its shard's master (NewAdamWShard, NewSGDShard): the master of the other
// ranks' segments is read by nothing but the replica check and checkpoints, which gather it.
//
// ShardMaster keeps the master of the held ranges — the shard's ranges and every MasterRead
// parameter whole (the norms' gains and biases, which forward reads in f32; ddp all-gathers them
// after each step) — packed in slab order in one allocation (tagged params.shard), and frees the
// whole slab (Data becomes nil). Every element has one home: a held range is the union of the
// shard's ranges and the MasterRead parameters', merged where they touch. The views W of the
// parameters held whole point into the shard slab; the others' are nil, so a read of a master
// this rank does not hold fails loudly instead of reading stale values. MasterView is the
// master's elements [off, off+n) wherever they live, for the optimizers and ddp.
//
// What needs the whole master works on a whole one: Init runs before ShardMaster; loading
// weights (a resume, model.init_from) and broadcasting them run between UnshardMaster and
// ShardMaster again (the trainer does so during setup, before the first step); SHA256, Host,
// NamedWeights, LoadNamed and SyncHalf refuse a sharded master. The whole master's values are
// gathered (ddp.Engine.MasterHost) into host memory for the replica check and checkpoints.

import (
	"fmt"
	"sort"

	"github.com/goddp/goddp/model/tensor"
)

// heldMaster is the f32 master of part of the slab: ranges ascending and disjoint, packed in slab
// order into slab.
type heldMaster struct {
	shard  *Shard         // what ShardMaster was given (UnshardMaster returns it)
	ranges [][2]int       // held slab ranges [lo, hi)
	at     []int          // where each range starts in slab
	slab   *tensor.Tensor // (Σ hi−lo) f32
}

// heldRanges is the union of the shard's ranges and the MasterRead parameters' ranges, merged
// into ascending disjoint ranges (touching ones joined).
func heldRanges(ps *Params, sh *Shard) [][2]int {
	var rs [][2]int
	for _, r := range sh.Ranges {
		if r[1] > r[0] {
			rs = append(rs, r)
		}
	}
	for _, p := range ps.List {
		if p.MasterRead && p.Len() > 0 {
			rs = append(rs, [2]int{p.Offset, p.Offset + p.Len()})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i][0] < rs[j][0] })
	var out [][2]int
	for _, r := range rs {
		if k := len(out) - 1; k >= 0 && r[0] <= out[k][1] {
			out[k][1] = max(out[k][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// ShardMaster keeps the f32 master for sh's ranges and the MasterRead parameters only (the file's
// comment) and frees the whole slab. It needs the 16-bit compute copy (under fp32 forward reads
// the master as the weights) and a whole master; the optimizer must be built on the same shard.
func (ps *Params) ShardMaster(sh *Shard) error {
	switch {
	case sh == nil:
		return fmt.Errorf("model: sharding the f32 master on no shard")
	case ps.held != nil:
		return fmt.Errorf("model: the f32 master is sharded already")
	case ps.Data == nil:
		return fmt.Errorf("model: sharding the f32 master before Build")
	case ps.Half == nil:
		return fmt.Errorf("model: the f32 master can be sharded only under mixed precision (fp16, bf16): under fp32 forward reads it as the weights")
	}
	for _, r := range sh.Ranges {
		if r[0] < 0 || r[1] < r[0] || r[1] > ps.N {
			return fmt.Errorf("model: shard range [%d, %d) outside the slab's %d elements", r[0], r[1], ps.N)
		}
	}
	h := &heldMaster{shard: sh, ranges: heldRanges(ps, sh)}
	n := 0
	for _, r := range h.ranges {
		h.at = append(h.at, n)
		n += r[1] - r[0]
	}
	h.slab = ps.dev.Alloc(tensor.F32, "params.shard", max(n, 1))
	for i, r := range h.ranges {
		ps.dev.Copy(h.slab.View(h.at[i], r[1]-r[0]), ps.Data.View(r[0], r[1]-r[0]))
	}
	ps.dev.Free(ps.Data)
	ps.Data, ps.held = nil, h
	ps.pointMaster()
	return nil
}

// UnshardMaster makes the master whole again: a new whole slab holding the held values, zeros
// elsewhere (to be loaded or broadcast before anything reads them), and returns the shard
// ShardMaster was given, for ShardMaster after. A whole master: nil, nothing done.
func (ps *Params) UnshardMaster() *Shard {
	h := ps.held
	if h == nil {
		return nil
	}
	ps.Data = ps.dev.Alloc(tensor.F32, "params", ps.N)
	ps.dev.Fill(ps.Data, 0)
	for i, r := range h.ranges {
		ps.dev.Copy(ps.Data.View(r[0], r[1]-r[0]), h.slab.View(h.at[i], r[1]-r[0]))
	}
	ps.dev.Free(h.slab)
	ps.held = nil
	ps.pointMaster()
	return h.shard
}

// pointMaster points every parameter's W at its master: the whole slab, or the shard slab for
// the parameters held whole (nil for the others).
func (ps *Params) pointMaster() {
	for _, p := range ps.List {
		p.W = nil
		if ps.Data != nil {
			p.W = ps.Data.View(p.Offset, p.Shape...)
		} else if i := ps.held.find(p.Offset, p.Len()); i >= 0 {
			p.W = ps.held.slab.View(ps.held.at[i]+p.Offset-ps.held.ranges[i][0], p.Shape...)
		}
	}
}

// find is the held range that contains [off, off+n), or −1.
func (h *heldMaster) find(off, n int) int {
	i := sort.Search(len(h.ranges), func(i int) bool { return h.ranges[i][1] > off })
	if i < len(h.ranges) && h.ranges[i][0] <= off && off+n <= h.ranges[i][1] {
		return i
	}
	return -1
}

// MasterSharded reports whether the master is kept for part of the slab only (ShardMaster).
func (ps *Params) MasterSharded() bool { return ps.held != nil }

// MasterHeld is the slab ranges whose master this rank holds: [0, N) when whole.
func (ps *Params) MasterHeld() [][2]int {
	if ps.held == nil {
		return [][2]int{{0, ps.N}}
	}
	return append([][2]int(nil), ps.held.ranges...)
}

// MasterTensor is the tensor that holds the master: Data when whole, else the shard slab (its
// held elements packed), for the memory report.
func (ps *Params) MasterTensor() *tensor.Tensor {
	if ps.held != nil {
		return ps.held.slab
	}
	return ps.Data
}

// MasterView is the f32 master of slab elements [off, off+n): a view of Data, or of the shard
// slab when those elements are held (they must lie in one held range: an optimizer run on the
// shard, a MasterRead piece). A range not held is an engine bug: it panics naming it.
func (ps *Params) MasterView(off, n int) *tensor.Tensor {
	if ps.held == nil {
		return ps.Data.View(off, n)
	}
	i := ps.held.find(off, n)
	if i < 0 {
		panic(fmt.Sprintf("model: the f32 master of elements [%d, %d) is not held by this rank (sharded master, held %v)", off, off+n, ps.held.ranges))
	}
	return ps.held.slab.View(ps.held.at[i]+off-ps.held.ranges[i][0], n)
}

// mustBeWhole panics when the master is sharded: what is named needs every element.
func (ps *Params) mustBeWhole(what string) {
	if ps.held != nil {
		panic(fmt.Sprintf("model: Params.%s needs the whole f32 master, which is sharded (UnshardMaster, or gather it: ddp.Engine.MasterHost)", what))
	}
}

// NamedWeightsOf is NamedWeights read from whole, the master's values for the whole slab on the
// host (a sharded master gathered: ddp.Engine.MasterHost).
func (ps *Params) NamedWeightsOf(whole []float32) ([]NamedTensor, error) {
	if len(whole) != ps.N {
		return nil, fmt.Errorf("model: %d master values for a slab of %d elements", len(whole), ps.N)
	}
	out := make([]NamedTensor, 0, len(ps.List))
	for _, p := range ps.List {
		out = append(out, NamedTensor{Name: p.Name, DType: tensor.F32, Shape: append([]int(nil), p.Shape...),
			Data: F32Bytes(whole[p.Offset : p.Offset+p.Len()])})
	}
	return out, nil
}
