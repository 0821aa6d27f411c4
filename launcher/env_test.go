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

// torchrun's variables, with torchrun's values, when WorkerEnv.Torchrun is set; an inherited
// TORCHELASTIC_* or ROLE_* is replaced, OMP_NUM_THREADS passes through.
func TestBuildEnv_torchrun(t *testing.T) {
	base := []string{"PATH=/bin", "TORCHELASTIC_RUN_ID=stale", "ROLE_RANK=9", "TORCHELASTIC_ERROR_FILE=/parent/error.json",
		"TORCHELASTIC_USE_AGENT_STORE=True", "OMP_NUM_THREADS=4"}
	tests := []struct {
		name string
		e    WorkerEnv
		want []string
	}{
		{
			name: "second host of two, second restart, a log dir",
			e: WorkerEnv{Rank: 3, LocalRank: 1, WorldSize: 4, LocalWorldSize: 2, NodeRank: 1, NNodes: 2,
				MasterAddr: "10.0.0.1", MasterPort: 29500, Token: "ab", RestartCount: 2, MaxRestarts: 3,
				Torchrun: &TorchrunEnv{RunID: "job-7", Role: "trainer", ErrorFile: "/logs/job-7_x/attempt_2/1/error.json"}},
			want: []string{"DDP_MAX_RESTARTS=3", "DDP_RESTART_COUNT=2", "DDP_TOKEN=ab", "GROUP_RANK=1", "GROUP_WORLD_SIZE=2",
				"LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "NNODES=2", "NODE_RANK=1",
				"RANK=3", "ROLE_NAME=trainer", "ROLE_RANK=3", "ROLE_WORLD_SIZE=4",
				"TORCHELASTIC_ERROR_FILE=/logs/job-7_x/attempt_2/1/error.json", "TORCHELASTIC_MAX_RESTARTS=3",
				"TORCHELASTIC_RESTART_COUNT=2", "TORCHELASTIC_RUN_ID=job-7", "TORCHELASTIC_USE_AGENT_STORE=False", "WORLD_SIZE=4"},
		},
		{
			name: "one host, default role, no log dir: no error file",
			e: WorkerEnv{Rank: 0, LocalRank: 0, WorldSize: 1, LocalWorldSize: 1, NNodes: 1, MasterAddr: "127.0.0.1",
				MasterPort: 1, Token: "cd", Torchrun: &TorchrunEnv{RunID: "none"}},
			want: []string{"DDP_MAX_RESTARTS=0", "DDP_RESTART_COUNT=0", "DDP_TOKEN=cd", "GROUP_RANK=0", "GROUP_WORLD_SIZE=1",
				"LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1", "NNODES=1", "NODE_RANK=0",
				"RANK=0", "ROLE_NAME=default", "ROLE_RANK=0", "ROLE_WORLD_SIZE=1", "TORCHELASTIC_MAX_RESTARTS=0",
				"TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_USE_AGENT_STORE=False", "WORLD_SIZE=1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildEnv(base, tt.e)
			want := append([]string{"PATH=/bin", "OMP_NUM_THREADS=4"}, tt.want...)
			if !slices.Equal(got, want) {
				t.Errorf("BuildEnv:\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestDefaultOMPThreads(t *testing.T) {
	for _, tt := range []struct {
		base  []string
		nproc int
		want  []string
		added bool
	}{
		{[]string{"PATH=/bin"}, 2, []string{"PATH=/bin", "OMP_NUM_THREADS=1"}, true},
		{[]string{"PATH=/bin"}, 1, []string{"PATH=/bin"}, false},                                           // one worker: left alone, as torchrun
		{[]string{"OMP_NUM_THREADS=8", "PATH=/bin"}, 4, []string{"OMP_NUM_THREADS=8", "PATH=/bin"}, false}, // set: kept
		{[]string{"OMP_NUM_THREADS=", "PATH=/bin"}, 4, []string{"OMP_NUM_THREADS=", "PATH=/bin"}, false},   // set, even empty
		{[]string{"OMP_NUM_THREADSX=2"}, 2, []string{"OMP_NUM_THREADSX=2", "OMP_NUM_THREADS=1"}, true},
	} {
		base := slices.Clip(slices.Clone(tt.base))
		got, added := DefaultOMPThreads(base, tt.nproc)
		if !slices.Equal(got, tt.want) || added != tt.added || !slices.Equal(base, tt.base) {
			t.Errorf("DefaultOMPThreads(%q, %d) = %q, %v; want %q, %v (base untouched)", tt.base, tt.nproc, got, added, tt.want, tt.added)
		}
	}
}
