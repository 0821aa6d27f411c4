package ddp

import (
	"sync"

	"github.com/goddp/goddp/model/cpu"
	"github.com/goddp/goddp/model/half"
	"github.com/goddp/goddp/model/tensor"
)

// The sharded staged path (shard_gpu.go) on the CPU: shardStagingCPU is stagingCPU whose plans
// also have tensor.ShardStaging, the way the CUDA device's have it (ReturnRange widens only the
// owned segment at Finish; the f16 weights go out and back through the plan's half buffers), so
// the engine's sharded staged code runs anywhere, under the race detector.
// shard_gpu_cuda_test.go runs the same training on the GPU.

type shardStagingCPU struct{ *cpu.Device }

var _ tensor.GradStager = shardStagingCPU{}

func (d shardStagingCPU) PinnedBytes() int64 { return 0 }

func (d shardStagingCPU) NewGradStaging(grad *tensor.Tensor, ranges [][2]int) (tensor.GradStaging, error) {
	base, err := stagingCPU(d).NewGradStaging(grad, ranges)
	if err != nil {
		return nil, err
	}
	return &cpuShardStaging{cpuStaging: base.(*cpuStaging), seg: make([]*[2]int, len(ranges))}, nil
}

// cpuShardStaging adds tensor.ShardStaging to cpuStaging.
type cpuShardStaging struct {
	*cpuStaging
	segMu sync.Mutex
	seg   []*[2]int // per bucket, the segment ReturnRange returned this step (nil: none)
}

var _ tensor.ShardStaging = (*cpuShardStaging)(nil)

func (s *cpuShardStaging) ReturnRange(i, lo, hi int) {
	s.segMu.Lock()
	s.seg[i] = &[2]int{lo, hi}
	s.segMu.Unlock()
}

func (s *cpuShardStaging) Finish() {
	s.cpuStaging.Finish()
	s.segMu.Lock()
	defer s.segMu.Unlock()
	for i, sg := range s.seg {
		if sg == nil {
			continue
		}
		lo, hi := sg[0], sg[1]
		x := make([]float32, hi-lo)
		half.Decode(x, s.half[i][lo:hi])
		s.dev.Upload(s.grad.View(s.ranges[i][0]+lo, hi-lo), x)
		s.seg[i] = nil
	}
}

func (s *cpuShardStaging) StageWeights(i int, w *tensor.Tensor, lo, hi int) []uint16 {
	x := make([]float32, hi-lo)
	s.dev.Download(x, w.View(s.ranges[i][0]+lo, hi-lo))
	half.Encode(s.half[i][lo:hi], x) // f16 values: exact
	return s.half[i]
}

func (s *cpuShardStaging) ReturnWeights(i int, w *tensor.Tensor) {
	r := s.ranges[i]
	x := make([]float32, r[1]-r[0])
	half.Decode(x, s.half[i])
	s.dev.Upload(w.View(r[0], r[1]-r[0]), x)
}
