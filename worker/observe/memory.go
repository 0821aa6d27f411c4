package observe

// memory.go: --memory-report, where the peak of device memory went, and --check-leaks.

import (
	"fmt"
	"sort"
	"strings"

	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/model/tensor"
)

// MemoryReport is --memory-report's breakdown of device memory after the first steps: where the
// peak went, by kind, and the device's own summary.
func MemoryReport(dev tensor.Device, ps *model.Params, opt model.Optimizer) string {
	return MemoryReportDDP(dev, ps, opt, nil)
}

// DDPMemory is what the DDP engine holds besides the model's slabs, for the memory report's
// rows under ddp.shard_optimizer (ddp.Engine's Shard, HostBufferBytes, GradShardInPlace).
type DDPMemory struct {
	GradShardElems int   // elements of averaged gradient this rank keeps (its shard)
	HostBuffers    int64 // host bytes the engine holds for communication now
	HostUnsharded  int64 // what the host path holds unsharded (an f32 copy of the slab)
	// Path is how the gradients travel: "in place" (stage 2 on the CPU device: reduced in the
	// gradient slab itself), "staged" (the CUDA staged path: f16 through pinned memory), or
	// "host copies" (the buckets' f32 host buffers).
	Path string
}

// MemoryReportDDP is MemoryReport with the DDP engine's rows (dm nil: none).
func MemoryReportDDP(dev tensor.Device, ps *model.Params, opt model.Optimizer, dm *DDPMemory) string {
	st := dev.Stats()
	// The rows show the tensors' own bytes, as the settings line does (parameters 27.60 MiB
	// there and here); the allocator's rounding of the slabs to its block sizes is a row of its own.
	var master, weights, grads, optState, rounding int64
	grads = ps.Grad.Bytes()
	if ps.Half != nil {
		master = ps.MasterTensor().Bytes() // ddp.shard_master: the shard's (and the norms') only
		weights = ps.Half.Bytes()
	} else {
		weights = ps.Data.Bytes()
	}
	for _, b := range []int64{master, weights, grads} {
		if b > 0 {
			rounding += tensor.SizeClass(b) - b
		}
	}
	for _, s := range opt.State() {
		optState += s.T.Bytes()
	}
	static := master + weights + grads + optState + rounding
	var batch int64
	for _, l := range dev.Live() {
		if strings.HasPrefix(l.Tag, "batch.") {
			batch += l.Bytes
		}
	}
	activations := st.Peak - static - batch
	var b strings.Builder
	fmt.Fprintf(&b, "memory report (%s):\n", dev.Name())
	row := func(k string, v int64) {
		pct := 0.0
		if st.Peak > 0 {
			pct = 100 * float64(v) / float64(st.Peak)
		}
		fmt.Fprintf(&b, "  %-34s %12s  %5.1f%% of peak\n", k, tensor.FormatBytes(v), pct)
	}
	copyRow := "parameters (compute copy)"
	if ps.Half != nil {
		copyRow = "parameters (" + ps.Half.DType().String() + " compute copy)"
	}
	row(copyRow, weights)
	if master > 0 && ps.MasterSharded() { // ddp.shard_master (model/master_shard.go)
		row("master weights (rank's shard)", master)
		held := int(master / 4)
		fmt.Fprintf(&b, "  %-34s %12s  (the shard holds %d of %d elements, the norms' gains and biases whole: %s saved)\n", "master weights unsharded",
			tensor.FormatBytes(4*int64(ps.N)), held, ps.N, tensor.FormatBytes(4*int64(ps.N)-master))
	} else if master > 0 {
		row("master weights (f32)", master)
	}
	row("gradients (f32)", grads)
	if sh := model.ShardOf(opt); sh != nil { // ddp.shard_optimizer: this rank's part only
		row("optimizer state (rank's shard)", optState)
		whole := optState / int64(max(1, sh.N())) * int64(ps.N)
		fmt.Fprintf(&b, "  %-34s %12s  (the shard holds %d of %d elements: %s saved)\n", "optimizer state unsharded", tensor.FormatBytes(whole),
			sh.N(), ps.N, tensor.FormatBytes(whole-optState))
		// What a checkpoint writes of it (worker/checkpoint/shards.go): host memory, not the device's.
		fmt.Fprintf(&b, "  %-34s %12s  (host: this shard as optim-rank-NNNNN.safetensors, one file per rank; the writers hold every rank's, %s, while they write)\n",
			"checkpoint optimizer shard", tensor.FormatBytes(optState), tensor.FormatBytes(whole))
	} else {
		row("optimizer state", optState)
	}
	if dm != nil && dm.GradShardElems > 0 { // ddp.shard_optimizer's stage 2 (ddp/shard.go)
		where := "in the gradient slab's owned ranges; the rest is not averaged"
		fmt.Fprintf(&b, "  %-34s %12s  (%d of %d elements, %s)\n", "averaged gradients (rank's shard)",
			tensor.FormatBytes(4*int64(dm.GradShardElems)), dm.GradShardElems, ps.N, where)
		how := "host f32 copies of the buckets"
		switch dm.Path {
		case "in place":
			how = "reduced in place: no host copy of the gradients"
		case "staged":
			how = "f16 through pinned memory (the pinned row): no host f32 copy"
		}
		fmt.Fprintf(&b, "  %-34s %12s  (unsharded %s; %s)\n", "ddp host buffers", tensor.FormatBytes(dm.HostBuffers),
			tensor.FormatBytes(dm.HostUnsharded), how)
	}
	if rounding > 0 {
		row("allocator rounding of the slabs", rounding)
	}
	row("input batch", batch)
	row("activations + workspace at peak", activations)
	fmt.Fprintf(&b, "  %-34s %12s\n", "peak allocated", tensor.FormatBytes(st.Peak))
	fmt.Fprintf(&b, "  %-34s %12s\n", "fragmentation (reserved-allocated)", tensor.FormatBytes(st.Reserved-st.Allocated))
	if gs, ok := dev.(tensor.GradStager); ok && gs.PinnedBytes() > 0 {
		fmt.Fprintf(&b, "  %-34s %12s  (host, not device memory)\n", "pinned staging (ddp f16 gradients)", tensor.FormatBytes(gs.PinnedBytes()))
	}
	b.WriteString(tensor.MemorySummary(dev))
	return b.String()
}

// CheckLeaks (--check-leaks) fails when allocated memory is above baseline (what the end of the
// run's first step held) at the end of step, naming the tags of the live blocks.
func CheckLeaks(dev tensor.Device, baseline int64, step int) error {
	now := dev.Stats().Allocated
	if now <= baseline {
		return nil
	}
	tags := map[string]int64{}
	for _, l := range dev.Live() {
		tags[l.Tag] += l.Bytes
	}
	var names []string
	for t, n := range tags {
		names = append(names, fmt.Sprintf("%s (%s)", t, tensor.FormatBytes(n)))
	}
	sort.Strings(names)
	return fmt.Errorf("worker: memory leak at step %d: %s allocated above the end of the run's first step; live blocks: %s",
		step, tensor.FormatBytes(now-baseline), strings.Join(names, ", "))
}
