package launcher

import (
	"slices"
	"testing"
)

func TestBuildEnv(t *testing.T) {
	base := []string{
		"PATH=/bin", "CUDA_VISIBLE_DEVICES=2,3", "RANK=9", "DDP_PROGRESS_FD=3",
		"MASTER_PORT=1", "HOME=/root", "LOCAL_RANKING=keep",
	}
	tests := []struct {
		name string
		e    WorkerEnv
		want []string // after the passed-through base variables
	}{
		{
			name: "rank 1 of 2 on one host",
			e: WorkerEnv{Rank: 1, LocalRank: 1, WorldSize: 2, LocalWorldSize: 2, NNodes: 1,
				MasterAddr: "127.0.0.1", MasterPort: 29500, Token: "ab", RestartCount: 0, MaxRestarts: 3},
			want: []string{"DDP_MAX_RESTARTS=3", "DDP_RESTART_COUNT=0", "DDP_TOKEN=ab", "GROUP_RANK=0",
				"LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500",
				"NNODES=1", "NODE_RANK=0", "RANK=1", "WORLD_SIZE=2"},
		},
		{
			name: "rank 0 with the progress fd, second restart",
			e: WorkerEnv{Rank: 0, LocalRank: 0, WorldSize: 1, LocalWorldSize: 1, NNodes: 1,
				MasterAddr: "10.0.0.1", MasterPort: 1234, Token: "cd", RestartCount: 2, MaxRestarts: 2, ProgressFD: 3},
			want: []string{"DDP_MAX_RESTARTS=2", "DDP_PROGRESS_FD=3", "DDP_RESTART_COUNT=2", "DDP_TOKEN=cd",
				"GROUP_RANK=0", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=10.0.0.1",
				"MASTER_PORT=1234", "NNODES=1", "NODE_RANK=0", "RANK=0", "WORLD_SIZE=1"},
		},
		{
			name: "second host of three, four per host",
			e: WorkerEnv{Rank: 6, LocalRank: 2, WorldSize: 12, LocalWorldSize: 4, NodeRank: 1, NNodes: 3,
				MasterAddr: "h0", MasterPort: 29500, Token: "ef"},
			want: []string{"DDP_MAX_RESTARTS=0", "DDP_RESTART_COUNT=0", "DDP_TOKEN=ef", "GROUP_RANK=1",
				"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=h0", "MASTER_PORT=29500",
				"NNODES=3", "NODE_RANK=1", "RANK=6", "WORLD_SIZE=12"},
		},
	}
	kept := []string{"PATH=/bin", "CUDA_VISIBLE_DEVICES=2,3", "HOME=/root", "LOCAL_RANKING=keep"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			baseCopy := slices.Clone(base)
			got := BuildEnv(base, tt.e)
			want := append(slices.Clone(kept), tt.want...)
			if !slices.Equal(got, want) {
				t.Errorf("BuildEnv:\n got %q\nwant %q", got, want)
			}
			if !slices.Equal(base, baseCopy) {
				t.Errorf("BuildEnv modified its base")
			}
		})
	}
}
