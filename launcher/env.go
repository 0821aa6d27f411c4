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

	// torchrun's elastic-agent variables (WorkerEnv.Torchrun), with torchrun's values.
	EnvTorchelasticRestartCount  = "TORCHELASTIC_RESTART_COUNT"   // = DDP_RESTART_COUNT
	EnvTorchelasticMaxRestarts   = "TORCHELASTIC_MAX_RESTARTS"    // = DDP_MAX_RESTARTS
	EnvTorchelasticRunID         = "TORCHELASTIC_RUN_ID"          // --rdzv-id (a fresh id with --standalone)
	EnvTorchelasticUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE" // always False: rank 0 serves MASTER_PORT itself
	EnvTorchelasticErrorFile     = "TORCHELASTIC_ERROR_FILE"      // with a log dir: where a failing worker writes error.json
	EnvGroupWorldSize            = "GROUP_WORLD_SIZE"             // hosts in the job (= NNODES)
	EnvRoleName                  = "ROLE_NAME"                    // --role (default "default")
	EnvRoleRank                  = "ROLE_RANK"                    // rank among the workers of the role: every worker has the one role, so = RANK
	EnvRoleWorldSize             = "ROLE_WORLD_SIZE"              // workers of the role: = WORLD_SIZE

	// EnvOMPNumThreads is not managed: it passes through, and DefaultOMPThreads sets it to 1 when
	// it is unset and a host runs more than one worker, as torchrun does.
	EnvOMPNumThreads = "OMP_NUM_THREADS"
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
	// Torchrun, when not nil, adds the variables torchrun's elastic agent sets, so that a PyTorch
	// script (or anything written for torchrun) finds them; Run always sets it. nil gives goddp's
	// variables alone.
	Torchrun *TorchrunEnv
}

// TorchrunEnv is what torchrun's variables need beyond the rest of WorkerEnv: TORCHELASTIC_RUN_ID,
// ROLE_NAME and TORCHELASTIC_ERROR_FILE. The others follow from WorkerEnv (the restart counts,
// GROUP_WORLD_SIZE = NNodes; ROLE_RANK and ROLE_WORLD_SIZE = RANK and WORLD_SIZE, since every
// worker of a goddp job has the same role), and TORCHELASTIC_USE_AGENT_STORE is False: there is no
// agent store, global rank 0 serves MASTER_ADDR:MASTER_PORT itself (a PyTorch rank 0 hosts its
// TCPStore there, as under torchrun's c10d backend).
type TorchrunEnv struct {
	RunID     string // TORCHELASTIC_RUN_ID
	Role      string // ROLE_NAME; "" = "default", torchrun's default
	ErrorFile string // TORCHELASTIC_ERROR_FILE; "" = not set (no log dir)
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
	if t := e.Torchrun; t != nil {
		role := t.Role
		if role == "" {
			role = DefaultRole
		}
		kv[EnvTorchelasticRestartCount] = strconv.Itoa(e.RestartCount)
		kv[EnvTorchelasticMaxRestarts] = strconv.Itoa(e.MaxRestarts)
		kv[EnvTorchelasticRunID] = t.RunID
		kv[EnvTorchelasticUseAgentStore] = "False"
		kv[EnvGroupWorldSize] = strconv.Itoa(e.NNodes)
		kv[EnvRoleName] = role
		kv[EnvRoleRank] = strconv.Itoa(e.Rank)
		kv[EnvRoleWorldSize] = strconv.Itoa(e.WorldSize)
		if t.ErrorFile != "" {
			kv[EnvTorchelasticErrorFile] = t.ErrorFile
		}
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
	EnvTorchelasticRestartCount: true, EnvTorchelasticMaxRestarts: true, EnvTorchelasticRunID: true,
	EnvTorchelasticUseAgentStore: true, EnvTorchelasticErrorFile: true, EnvGroupWorldSize: true,
	EnvRoleName: true, EnvRoleRank: true, EnvRoleWorldSize: true,
}

// DefaultRole is ROLE_NAME when --role is not given, as with torchrun.
const DefaultRole = "default"

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

// DefaultOMPThreads is torchrun's OpenMP default: with more than one worker per host and no
// OMP_NUM_THREADS in base, every worker gets OMP_NUM_THREADS=1, so that N workers with an OpenMP
// runtime each (PyTorch on the CPU, NumPy) do not start N × CPUs threads. It returns base with the
// variable appended (a new slice; base is not modified) and true, or base itself and false when
// nothing was added. goddp's own trainer does not read it.
func DefaultOMPThreads(base []string, nproc int) ([]string, bool) {
	if nproc <= 1 {
		return base, false
	}
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); k == EnvOMPNumThreads {
			return base, false
		}
	}
	out := make([]string, len(base), len(base)+1)
	copy(out, base)
	return append(out, EnvOMPNumThreads+"=1"), true
}
