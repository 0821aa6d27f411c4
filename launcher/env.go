package launcher

import (
	"sort"
	"strconv"
	"strings"
)

// Environment variable names a worker receives. torchrun's names where torchrun has one; the DDP_
// ones are goddp's. ONLY APPEND: trainers in the field read these names.
const (
	EnvRank           = "RANK"              // global rank, 0 ≤ RANK < WORLD_SIZE
	EnvLocalRank      = "LOCAL_RANK"        // rank on this host; a GPU worker uses GPU LOCAL_RANK % visible GPUs
	EnvWorldSize      = "WORLD_SIZE"        // workers in the job, all hosts
	EnvLocalWorldSize = "LOCAL_WORLD_SIZE"  // workers on this host (--nproc-per-node)
	EnvNodeRank       = "NODE_RANK"         // this host's rank, 0 ≤ NODE_RANK < NNODES
	EnvGroupRank      = "GROUP_RANK"        // torchrun's name for the node rank; same value
	EnvNNodes         = "NNODES"            // hosts in the job
	EnvMasterAddr     = "MASTER_ADDR"       // where rank 0 listens
	EnvMasterPort     = "MASTER_PORT"       // the port rank 0 listens on
	EnvToken          = "DDP_TOKEN"         // shared secret of this job (hex); peers must present it
	EnvRestartCount   = "DDP_RESTART_COUNT" // restarts so far: 0 on the first attempt (TORCHELASTIC_RESTART_COUNT)
	EnvMaxRestarts    = "DDP_MAX_RESTARTS"  // --max-restarts (TORCHELASTIC_MAX_RESTARTS)
	EnvProgressFD     = "DDP_PROGRESS_FD"   // set for the one worker that draws the progress bar: fd to draw on
	EnvHeartbeatFD    = "DDP_HEARTBEAT_FD"  // fd a worker may write a byte to every second: then silence is a hang
)

// ProgressFD is the file descriptor the progress worker finds the launcher's terminal on:
// exec.Cmd.ExtraFiles[0] is always fd 3 in the child.
const ProgressFD = 3

// WorkerEnv is everything that distinguishes one worker's environment. It is plain data so that
// BuildEnv is a pure function.
type WorkerEnv struct {
	Rank           int
	LocalRank      int
	WorldSize      int
	LocalWorldSize int
	NodeRank       int
	NNodes         int
	MasterAddr     string
	MasterPort     int
	Token          string
	RestartCount   int
	MaxRestarts    int
	// ProgressFD is the fd number of the progress terminal in the worker, 0 for none.
	ProgressFD int
}

// Vars returns the variables Run sets for one worker, sorted by name.
func (e WorkerEnv) Vars() []string {
	kv := map[string]string{
		EnvRank:           strconv.Itoa(e.Rank),
		EnvLocalRank:      strconv.Itoa(e.LocalRank),
		EnvWorldSize:      strconv.Itoa(e.WorldSize),
		EnvLocalWorldSize: strconv.Itoa(e.LocalWorldSize),
		EnvNodeRank:       strconv.Itoa(e.NodeRank),
		EnvGroupRank:      strconv.Itoa(e.NodeRank),
		EnvNNodes:         strconv.Itoa(e.NNodes),
		EnvMasterAddr:     e.MasterAddr,
		EnvMasterPort:     strconv.Itoa(e.MasterPort),
		EnvToken:          e.Token,
		EnvRestartCount:   strconv.Itoa(e.RestartCount),
		EnvMaxRestarts:    strconv.Itoa(e.MaxRestarts),
	}
	if e.ProgressFD > 0 {
		kv[EnvProgressFD] = strconv.Itoa(e.ProgressFD)
	}
	out := make([]string, 0, len(kv))
	for k, v := range kv {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// managedVars are the names BuildEnv owns: any value of theirs in the base environment is dropped,
// so a launcher started from inside another job (or by a trainer that set DDP_PROGRESS_FD) does not
// leak stale values into its workers.
var managedVars = map[string]bool{
	EnvRank: true, EnvLocalRank: true, EnvWorldSize: true, EnvLocalWorldSize: true,
	EnvNodeRank: true, EnvGroupRank: true, EnvNNodes: true, EnvMasterAddr: true, EnvMasterPort: true,
	EnvToken: true, EnvRestartCount: true, EnvMaxRestarts: true, EnvProgressFD: true,
}

// BuildEnv returns base (in "KEY=value" form, as os.Environ gives it) without the variables the
// launcher manages, followed by e's variables. Everything else, CUDA_VISIBLE_DEVICES included, passes
// through unchanged. base is not modified.
func BuildEnv(base []string, e WorkerEnv) []string {
	out := make([]string, 0, len(base)+16)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if managedVars[k] {
			continue
		}
		out = append(out, kv)
	}
	return append(out, e.Vars()...)
}
