package worker

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/goddp/goddp/model/tensor"
)

// sharedgpu.go: whether every rank of the world sees one GPU, the same one — the case the `auto`
// values of ddp.intra_host, ddp.shard_gather and ddp.shard_reduce take copies between the devices
// for (measured: ranks sharing one GPU). Each rank's own count is not enough: ranks started with
// different CUDA_VISIBLE_DEVICES (one GPU each, by a launcher of the user's) each see one GPU, but
// not the same one, and ranks that disagreed would not all enter the collective that sets the
// copies up. So the ranks agree once, in startEngine: an all-gather of each rank's count and
// CUDA_VISIBLE_DEVICES (agreeSharedGPU), the same answer on every rank.

// gpuAgreement is the ranks' answer: one is true where every rank sees exactly one GPU under the
// same CUDA_VISIBLE_DEVICES; why says otherwise which rank differs.
type gpuAgreement struct {
	one bool
	why string
}

// agreeSharedGPU makes the agreement (t.gpuAgree) where the auto values could use it: several
// ranks on a device that maps its peers' memory. Alike on every rank (the world's size and the
// device's kind are), so every rank takes part in the all-gather or none does.
func (t *Trainer) agreeSharedGPU(ctx context.Context) error {
	if _, ok := t.dev.(tensor.PeerMirrorDevice); !ok || t.env.WorldSize < 2 || t.group == nil {
		return nil
	}
	n, err := gpuCount()
	if err != nil {
		n = -1
	}
	all, err := t.group.AllGather(ctx, []byte(strconv.Itoa(n)+"\x00"+visibleDevicesEnv()))
	if err != nil {
		return fmt.Errorf("worker: the ranks' GPUs: %w", err)
	}
	reports := make([]string, len(all))
	for r, b := range all {
		reports[r] = string(b)
	}
	a := sharedGPUFrom(reports)
	t.gpuAgree = &a
	return nil
}

// sharedGPUFrom is the agreement from every rank's report ("COUNT\x00CUDA_VISIBLE_DEVICES", by
// rank; a count of -1: could not count).
func sharedGPUFrom(reports []string) gpuAgreement {
	var vis0 string
	for r, s := range reports {
		count, vis, _ := strings.Cut(s, "\x00")
		n, err := strconv.Atoi(count)
		switch {
		case err != nil || n < 0:
			return gpuAgreement{why: fmt.Sprintf("rank %d could not count its GPUs", r)}
		case n != 1:
			return gpuAgreement{why: fmt.Sprintf("rank %d sees %d GPUs", r, n)}
		case r == 0:
			vis0 = vis
		case vis != vis0:
			return gpuAgreement{why: fmt.Sprintf("rank %d sees CUDA_VISIBLE_DEVICES=%q, rank 0 %q: not the same GPU", r, vis, vis0)}
		}
	}
	return gpuAgreement{one: true, why: "every rank sees the same one GPU"}
}

// oneSharedGPU is the agreement (agreeSharedGPU), or where none was made (a Trainer built by a
// test) this rank's own count alone.
func (t *Trainer) oneSharedGPU() (bool, string) {
	if t.gpuAgree != nil {
		return t.gpuAgree.one, t.gpuAgree.why
	}
	n, err := gpuCount()
	switch {
	case err != nil:
		return false, fmt.Sprintf("the GPUs could not be counted (%v)", err)
	case n != 1:
		return false, fmt.Sprintf("this rank sees %d GPUs", n)
	}
	return true, "this rank sees one GPU"
}
