// Package launcher starts and supervises the worker processes of a goddp job on one host, the way
// torchrun does: cmd/ddplaunch is a thin flag parser around Run.
//
// # The flow of Run
//
//  1. Rendezvous: ask Options.Rendezvous for this attempt's Assignment (node rank, number of
//     nodes, world size, master address and port, job token). On one host that is
//     LocalRendezvous: node 0 of 1, 127.0.0.1, a fresh free port per attempt unless one is given.
//     On several hosts it is either torchrun's static rendezvous, StaticRendezvous (every host
//     is told its node rank and node rank 0's address; no elasticity; a host above node rank 0
//     waits for the master to listen), or the gossip one, MemberlistRendezvous (elastic, failure
//     detection). Both plug in here without touching the rest.
//  2. Environment: BuildEnv, a pure function, gives each worker the base environment plus the
//     variables below.
//  3. Supervise: start one process per local rank, each in its own process group (at most
//     MaxWorkersPerCPU per CPU without Options.Oversubscribe, CheckNProc; a signal or a failure
//     while they are being started stops the starting at once); prefix every output line with
//     "[rank N] " (and copy it to --log-dir/rank-N.log and, in torchrun's layout, to
//     --log-dir/RUN_ID_x/attempt_N/LOCAL_RANK/{stdout,stderr}.log; --redirects, --tee and
//     --local-ranks-filter decide what reaches the console); wait.
//  4. End: all exit 0, done. A worker that fails (non-zero exit or death by a signal) makes the
//     launcher SIGTERM every other worker's process group, SIGKILL it after the grace period,
//     report the root failure (Blame: the worker whose failure began first, not a peer's
//     follow-on error) with its status and last lines, the others in one line each, and then
//     either restart the whole group (--max-restarts; back to 1 with DDP_RESTART_COUNT+1) or exit
//     with the root failure's status (128+signal for a signal; ExitCode lists every code).
//     SIGINT/SIGTERM to the launcher are forwarded to every worker, followed by the same grace
//     and SIGKILL; they never cause a restart.
//
// # The contract with the worker
//
// Every worker gets, besides the launcher's environment (CUDA_VISIBLE_DEVICES passes through
// untouched):
//
//	RANK              global rank, 0 ≤ RANK < WORLD_SIZE; global rank = NODE_RANK·nproc + LOCAL_RANK
//	LOCAL_RANK        rank on this host, 0 ≤ LOCAL_RANK < LOCAL_WORLD_SIZE
//	WORLD_SIZE        workers in the job
//	LOCAL_WORLD_SIZE  workers on this host (--nproc-per-node)
//	NODE_RANK         this host's rank (0 on one host); GROUP_RANK is the same value (torchrun's name)
//	NNODES            hosts in the job
//	MASTER_ADDR       where rank 0 listens (default 127.0.0.1)
//	MASTER_PORT       rank 0's port (a free one per attempt when --master-port is not given)
//	DDP_TOKEN         64 hex digits (32 bytes from crypto/rand), fresh per job, the same for every
//	                  worker and every restart; peers must present it when they connect. On several
//	                  hosts it is derived from the cluster key and --rdzv-id (DeriveToken); the
//	                  static rendezvous derives one per attempt (StaticToken)
//	DDP_RESTART_COUNT 0, then 1, 2, ... after each restart (torchrun's TORCHELASTIC_RESTART_COUNT);
//	                  a worker that sees > 0 resumes from its latest checkpoint
//	DDP_MAX_RESTARTS  --max-restarts
//	DDP_PROGRESS_FD   only for rank 0 and only when the launcher's stderr is a terminal: "3"
//
// and torchrun's variables, with torchrun's values, so that a PyTorch script runs as under
// torchrun (WorkerEnv.Torchrun):
//
//	TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS   = DDP_RESTART_COUNT, DDP_MAX_RESTARTS
//	TORCHELASTIC_RUN_ID   the run id (--rdzv-id; a fresh UUID with --standalone)
//	TORCHELASTIC_USE_AGENT_STORE   False: global rank 0 serves MASTER_ADDR:MASTER_PORT itself
//	TORCHELASTIC_ERROR_FILE        with a log dir: attempt_N/LOCAL_RANK/error.json (PyTorch's @record
//	                               writes a failure there; the failure report prints its message)
//	GROUP_WORLD_SIZE      = NNODES
//	ROLE_NAME             --role (default "default")
//	ROLE_RANK, ROLE_WORLD_SIZE     = RANK, WORLD_SIZE (every worker of a job has the one role)
//	OMP_NUM_THREADS       passed through; 1 when unset and a host runs more than one worker, with
//	                      torchrun's warning (DefaultOMPThreads)
//
// A worker with GPUs uses GPU number LOCAL_RANK % (visible GPUs), counting within
// CUDA_VISIBLE_DEVICES; when there are more workers than GPUs the launcher says at start which
// local ranks share one.
//
// Progress: the launcher draws nothing itself. When its stderr is a terminal it hands that terminal
// to rank 0 as an extra file descriptor (exec.Cmd.ExtraFiles, so fd 3) and sets DDP_PROGRESS_FD=3;
// rank 0 draws its progress bar there (carriage returns and all) and everything else it prints goes
// through stdout/stderr, prefixed. Other ranks get no DDP_PROGRESS_FD and must draw no bar. A worker
// must not assume fd 3 exists without the variable; an inherited DDP_PROGRESS_FD is always removed.
// Workers run in their own process groups, i.e. in the terminal's background: a terminal with
// `stty tostop` would stop rank 0's writes, which is not the default.
//
// Stopping: a worker gets SIGTERM (or the SIGINT the launcher received) sent to its whole process
// group and has the grace period (--grace, default 10s) to exit, after which the group gets
// SIGKILL. A worker's stdin is /dev/null.
//
// # No orphans
//
// Each worker leads its own process group; whenever a worker exits, its group is SIGKILLed, so
// helper processes it started die with it, even ones that ignore SIGTERM. On Linux each worker also
// has Pdeathsig=SIGKILL, so workers die when the launcher is killed with SIGKILL; their own children
// are then only cleaned up if they watch their parent (a known limit: nothing runs in a SIGKILLed
// launcher). A grandchild that leaves the group (setsid) escapes this; the launcher then stops
// waiting for its output after a short drain period.
package launcher
