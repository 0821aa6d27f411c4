package main

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/goddp/launcher"
)

// withEnv replaces getenv (SLURM_*, PET_*, PYTHON_EXEC, DDP_CLUSTER_KEY) for one test.
func withEnv(t *testing.T, env map[string]string) {
	t.Helper()
	old := getenv
	getenv = func(k string) string { return env[k] }
	t.Cleanup(func() { getenv = old })
}

func noTrainer() (string, error) { return "", nil }

// Every torchrun flag in both spellings, with torchrun's meaning: what the parsed command line
// holds afterwards.
func TestParseArgs_torchrunFlags(t *testing.T) {
	withEnv(t, nil)
	for _, tt := range []struct {
		args  []string
		check func(c *cli) bool
	}{
		// Both spellings of torchrun's flags (and of ddplaunch's own).
		{[]string{"--nproc_per_node", "3"}, func(c *cli) bool { return c.nproc == "3" }},
		{[]string{"--nproc-per-node=3"}, func(c *cli) bool { return c.nproc == "3" }},
		{[]string{"--nproc_per_node=auto"}, func(c *cli) bool { return c.nproc == "auto" }},
		{[]string{"--max_restarts", "2"}, func(c *cli) bool { return c.opts.MaxRestarts == 2 }},
		{[]string{"--master_addr", "localhost", "--master_port", "29501"}, func(c *cli) bool {
			return c.opts.MasterAddr == "localhost" && c.opts.MasterPort == 29501 && c.multi.kind == rdzvLocal
		}},
		{[]string{"--log_dir", "/tmp/l"}, func(c *cli) bool { return c.opts.LogDir == "/tmp/l" }},
		{[]string{"--rdzv_id", "job-1"}, func(c *cli) bool { return c.multi.rdzvID == "job-1" && c.opts.RunID == "job-1" }},
		{[]string{"--node_rank", "0"}, func(c *cli) bool { return c.multi.nodeRank == 0 }},
		{[]string{"--cluster_key_file", "k", "--nnodes", "2", "--join", "h"}, func(c *cli) bool { return c.multi.keyFile == "k" }},
		// --standalone: one host, a local rendezvous on a free port, a fresh run id (a UUID).
		{[]string{"--standalone", "--nproc_per_node", "2"}, func(c *cli) bool {
			return c.multi.kind == rdzvLocal && c.opts.MasterPort == 0 && len(c.opts.RunID) == 36 && c.opts.RunID != "goddp"
		}},
		{[]string{"--standalone", "--nnodes", "1:1", "--node-rank", "0"}, func(c *cli) bool { return c.multi.kind == rdzvLocal }},
		// --rdzv-backend / --rdzv-endpoint on one host: the endpoint is MASTER_ADDR:MASTER_PORT.
		{[]string{"--rdzv-backend", "static", "--rdzv_endpoint", "127.0.0.1:29600"}, func(c *cli) bool {
			return c.multi.kind == rdzvLocal && c.opts.MasterAddr == "127.0.0.1" && c.opts.MasterPort == 29600
		}},
		{[]string{"--rdzv_backend=c10d", "--rdzv_endpoint=localhost"}, func(c *cli) bool {
			return c.opts.MasterAddr == "localhost" && c.opts.MasterPort == 29400 // c10d's default port
		}},
		{[]string{"--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1]:29401"}, func(c *cli) bool {
			return c.opts.MasterAddr == "::1" && c.opts.MasterPort == 29401
		}},
		// Static multi-host: --master-addr, or --rdzv-endpoint, with --node-rank; port 29500 by default.
		{[]string{"--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1", "--master_port", "29555"}, func(c *cli) bool {
			return c.multi.kind == rdzvStatic && c.multi.nodeRank == 1 && c.multi.masterAddr == "10.0.0.1" && c.multi.masterPort == 29555
		}},
		{[]string{"--nnodes", "3", "--node-rank", "2", "--master-addr", "h0"}, func(c *cli) bool {
			return c.multi.kind == rdzvStatic && c.multi.masterPort == 29500
		}},
		{[]string{"--nnodes", "2", "--node-rank", "0", "--rdzv-backend", "static", "--rdzv-endpoint", "h0:1234"}, func(c *cli) bool {
			return c.multi.kind == rdzvStatic && c.multi.masterAddr == "h0" && c.multi.masterPort == 1234
		}},
		{[]string{"--nnodes=2", "--node_rank=1", "--rdzv_backend=c10d", "--rdzv_endpoint=h0"}, func(c *cli) bool {
			return c.multi.kind == rdzvStatic && c.multi.masterAddr == "h0" && c.multi.masterPort == 29400
		}},
		{[]string{"--nnodes", "2", "--node-rank", "1", "--master-addr", "h0", "--cluster-key-file", "k", "--rdzv-timeout", "30s"}, func(c *cli) bool {
			return c.multi.kind == rdzvStatic && c.multi.rdzvTimeout == 30*time.Second
		}},
		// The gossip rendezvous as before, and by name.
		{[]string{"--nnodes", "2:3", "--join", "h"}, func(c *cli) bool { return c.multi.kind == rdzvGossip }},
		{[]string{"--rdzv-backend", "memberlist", "--nnodes", "1", "--join", "h"}, func(c *cli) bool { return c.multi.kind == rdzvGossip }},
		{[]string{"--nnodes", "2", "--join", "h", "--local_addr", "10.0.0.5"}, func(c *cli) bool { return c.multi.advertise == "10.0.0.5" }},
		// --rdzv-conf keys onto --rdzv-timeout and --rdzv-last-call.
		{[]string{"--rdzv_conf", "join_timeout=900,last_call_timeout=5"}, func(c *cli) bool {
			return c.multi.rdzvTimeout == 900*time.Second && c.multi.lastCall == 5*time.Second
		}},
		{[]string{"--rdzv-conf", "timeout=1.5"}, func(c *cli) bool { return c.multi.rdzvTimeout == 1500*time.Millisecond }},
		// --monitor-interval, --start-method: accepted with torchrun's values.
		{[]string{"--monitor_interval", "5", "--start_method", "fork"}, func(c *cli) bool { return c.tr.monitor == 5 && c.tr.startMethod == "fork" }},
		{[]string{"--monitor-interval=0.5", "--start-method=forkserver"}, func(c *cli) bool { return c.tr.monitor == 0.5 }},
		// --role: ROLE_NAME.
		{[]string{"--role", "trainer"}, func(c *cli) bool { return c.opts.Role == "trainer" }},
		{nil, func(c *cli) bool { return c.opts.Role == "default" && c.opts.RunID == "goddp" }},
		// --tee / --redirects: one value or per local rank; -t and -r.
		{[]string{"--tee", "3"}, func(c *cli) bool { return c.opts.Tee.For(0) == launcher.StdAll && c.opts.Tee.For(5) == launcher.StdAll }},
		{[]string{"-t", "0:3,1:0"}, func(c *cli) bool {
			return c.opts.Tee.For(0) == launcher.StdAll && c.opts.Tee.For(1) == launcher.StdNone
		}},
		{[]string{"--redirects", "1:2"}, func(c *cli) bool {
			return c.opts.Redirects.For(1) == launcher.StdErr && c.opts.Redirects.For(0) == launcher.StdNone
		}},
		{[]string{"-r", "3", "-t", "2"}, func(c *cli) bool {
			return c.opts.Redirects.For(0) == launcher.StdAll && c.opts.Tee.For(0) == launcher.StdErr
		}},
		{[]string{"--local_ranks_filter", "0,2"}, func(c *cli) bool { return slices.Equal(c.opts.ConsoleRanks, []int{0, 2}) }},
		{nil, func(c *cli) bool {
			return c.opts.ConsoleRanks == nil && c.opts.Redirects.IsZero() && c.opts.Tee.IsZero()
		}},
		// --signals-to-handle, --shutdown-timeout.
		{[]string{"--signals_to_handle", "SIGTERM,SIGUSR1,hup"}, func(c *cli) bool {
			return slices.Equal(c.signals, []os.Signal{syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGHUP})
		}},
		{nil, func(c *cli) bool { return slices.Equal(c.signals, []os.Signal{syscall.SIGTERM, syscall.SIGINT}) }},
		{[]string{"--shutdown_timeout", "3"}, func(c *cli) bool { return c.opts.Grace == 3*time.Second }},
		{[]string{"--event_log_handler", "null"}, func(c *cli) bool { return true }},
	} {
		c, err := parseArgs(append(slices.Clone(tt.args), "prog"), noTrainer)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if !tt.check(c) {
			t.Errorf("%q: parsed %+v (multi %+v, torchrun %+v)", tt.args, c.opts, c.multi, c.tr)
		}
	}
}

// PROGRAM: a .py file, -m MODULE and --run-path run through the interpreter with -u, as torchrun
// runs them; --no-python and anything else as it is.
func TestParseArgs_pythonProgram(t *testing.T) {
	for _, tt := range []struct {
		env      map[string]string
		args     []string
		wantProg string
		wantArgs []string
		via      bool
	}{
		{nil, []string{"train.py", "--lr", "1"}, "python3", []string{"-u", "train.py", "--lr", "1"}, true},
		{nil, []string{"--nproc_per_node", "2", "dir/train.py"}, "python3", []string{"-u", "dir/train.py"}, true},
		{nil, []string{"-m", "pkg.train", "--x"}, "python3", []string{"-u", "-m", "pkg.train", "--x"}, true},
		{nil, []string{"--module", "pkg.train"}, "python3", []string{"-u", "-m", "pkg.train"}, true},
		{nil, []string{"--run_path", "/abs/train"}, "python3", []string{"-u", "/abs/train"}, true},
		{nil, []string{"--run-path", "--no-python", "t.py"}, "python3", []string{"-u", "t.py"}, true}, // torchrun: --run-path wins
		{nil, []string{"--no_python", "train.py", "a"}, "train.py", []string{"a"}, false},
		{nil, []string{"sh", "-c", "x.py"}, "sh", []string{"-c", "x.py"}, false},
		{nil, []string{"./bin/train"}, "./bin/train", nil, false},
		{map[string]string{"PYTHON_EXEC": "/opt/py/bin/python"}, []string{"t.py"}, "/opt/py/bin/python", []string{"-u", "t.py"}, true},
	} {
		withEnv(t, tt.env)
		c, err := parseArgs(tt.args, noTrainer)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if c.opts.Program != tt.wantProg || !slices.Equal(c.opts.Args, tt.wantArgs) || c.viaPython != tt.via {
			t.Errorf("%q: %q %q (python %v), want %q %q (python %v)", tt.args, c.opts.Program, c.opts.Args, c.viaPython, tt.wantProg, tt.wantArgs, tt.via)
		}
	}
}

// torchrun's PET_* variables stand in for flags not given; the command line wins over them, and
// they win over Slurm's defaults.
func TestParseArgs_PETEnvironment(t *testing.T) {
	withEnv(t, map[string]string{
		"PET_NPROC_PER_NODE": "4", "PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.1.1.1",
		"PET_MASTER_PORT": "23456", "PET_MAX_RESTARTS": "3", "PET_TEE": "3", "PET_NO_PYTHON": "1",
		"SLURM_JOB_ID": "77", "SLURM_NNODES": "5", "SLURM_NODEID": "4", "SLURM_JOB_NODELIST": "n[1-5]",
	})
	c, err := parseArgs([]string{"--max-restarts", "1", "t.py"}, noTrainer)
	if err != nil {
		t.Fatal(err)
	}
	if c.nproc != "4" || c.multi.kind != rdzvStatic || c.multi.maxNodes != 2 || c.multi.nodeRank != 1 ||
		c.multi.masterAddr != "10.1.1.1" || c.multi.masterPort != 23456 || c.opts.MaxRestarts != 1 ||
		c.opts.Tee.For(0) != launcher.StdAll || c.opts.Program != "t.py" || c.multi.rdzvID != "slurm-77" {
		t.Errorf("parsed nproc %s, multi %+v, opts %+v", c.nproc, c.multi, c.opts)
	}
	withEnv(t, map[string]string{"PET_NPROC_PER_NODE": "many"})
	if _, err := parseArgs([]string{"prog"}, noTrainer); err != nil {
		t.Errorf("nproc is checked later (ResolveNProc), not by the flag: %v", err)
	}
	withEnv(t, map[string]string{"PET_MAX_RESTARTS": "x"})
	if _, err := parseArgs([]string{"prog"}, noTrainer); err == nil || !strings.Contains(err.Error(), "$PET_MAX_RESTARTS") {
		t.Errorf("a bad PET_ value: %v, want an error naming the variable", err)
	}
}

// What goddp cannot honour, and contradictions, are refused naming the flag and the way out;
// never silently ignored.
func TestParseArgs_torchrunRefusals(t *testing.T) {
	withEnv(t, nil)
	for _, tt := range []struct {
		args    []string
		wantErr []string
	}{
		{[]string{"--logs-specs", "x"}, []string{"--logs-specs is not supported", "--log-dir layout"}},
		{[]string{"--logs_specs=x"}, []string{"--logs-specs is not supported"}},
		{[]string{"--numa-binding", "node"}, []string{"--numa-binding", "numactl"}},
		{[]string{"--virtual-local-rank=true"}, []string{"--virtual-local-rank", "CUDA_VISIBLE_DEVICES"}},
		{[]string{"--duplicate-stdout-filters", "a"}, []string{"--duplicate-stdout-filters", "grep"}},
		{[]string{"--use_env=1"}, []string{"--use-env", "LOCAL_RANK"}},
		{[]string{"--event-log-handler", "console"}, []string{"--event-log-handler", "drop the flag"}},
		{[]string{"--no-such-flag"}, []string{"unknown flag: --no-such-flag", "torchrun's flags"}},
		{[]string{"--rdzv-backend", "etcd-v2"}, []string{"--rdzv-backend etcd-v2", "--join"}},
		{[]string{"--rdzv-backend", "zookeeper"}, []string{"--rdzv-backend \"zookeeper\""}},
		{[]string{"--rdzv-endpoint", "h0"}, []string{"--rdzv-endpoint \"h0\"", "HOST:PORT"}}, // static needs a port
		{[]string{"--rdzv-endpoint", "h0:99999"}, []string{"--rdzv-endpoint", "1..65535"}},
		{[]string{"--rdzv-endpoint", "h0:1", "--master-port", "2"}, []string{"give one"}},
		{[]string{"--rdzv-conf", "is_host=1"}, []string{"--rdzv-conf is_host", "join_timeout"}},
		{[]string{"--rdzv-conf", "join_timeout=x"}, []string{"join_timeout=\"x\""}},
		{[]string{"--rdzv-conf", "join_timeout=5", "--rdzv-timeout", "1m"}, []string{"give one"}},
		{[]string{"--rdzv-conf", "oops"}, []string{"key=value"}},
		{[]string{"--monitor-interval", "0"}, []string{"--monitor-interval 0"}},
		{[]string{"--monitor-interval", "-1"}, []string{"--monitor-interval -1"}},
		{[]string{"--start-method", "thread"}, []string{"--start-method \"thread\""}},
		{[]string{"--role", ""}, []string{"--role"}},
		{[]string{"--tee", "4"}, []string{"--tee \"4\""}},
		{[]string{"-r", "0:1,x"}, []string{"--redirects"}},
		{[]string{"--local-ranks-filter", "0,a"}, []string{"--local-ranks-filter"}},
		{[]string{"--signals-to-handle", "SIGKILL"}, []string{"--signals-to-handle", "SIGKILL"}},
		{[]string{"--shutdown-timeout", "0"}, []string{"--shutdown-timeout 0"}},
		{[]string{"--shutdown-timeout", "5", "--grace", "1s"}, []string{"give one"}},
		{[]string{"--local-addr", "1.2.3.4", "--advertise-addr", "1.2.3.5"}, []string{"give one"}},
		{[]string{"--standalone", "--nnodes", "2"}, []string{"--standalone is one host"}},
		{[]string{"--standalone", "--rdzv-endpoint", "h:1"}, []string{"--standalone", "drop --rdzv-endpoint"}},
		{[]string{"--standalone", "--master-port", "29500"}, []string{"drop --master-port"}},
		{[]string{"--standalone", "--node-rank", "1"}, []string{"--node-rank 1"}},
		{[]string{"-m", "--no-python", "mod"}, []string{"-m/--module and --no-python"}},
		{[]string{"-m", "--run-path", "mod"}, []string{"-m/--module and --run-path"}},
		// Several hosts.
		{[]string{"--nnodes", "2"}, []string{"needs --join", "--master-addr"}},
		{[]string{"--nnodes", "2", "--master-addr", "h0"}, []string{"needs --node-rank"}},
		{[]string{"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h0:29400"}, []string{"c10d without --node-rank", "--join"}},
		{[]string{"--nnodes", "2:3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h0", "--node-rank", "0"}, []string{"c10d with --nnodes 2:3", "--join"}},
		{[]string{"--nnodes", "2:3", "--node-rank", "0", "--master-addr", "h0"}, []string{"no elasticity"}},
		{[]string{"--nnodes", "2", "--node-rank", "0", "--master-addr", "h0", "--join", "h1"}, []string{"cannot go together"}},
		{[]string{"--nnodes", "2", "--node-rank", "0", "--master-addr", "h0", "--gossip", "wan"}, []string{"--gossip is a flag of the gossip rendezvous"}},
		{[]string{"--nnodes", "2", "--node-rank", "0", "--master-addr", "h0", "--bind", "0.0.0.0:7000"}, []string{"--bind is a flag of the gossip"}},
		{[]string{"--nnodes", "2", "--node-rank", "2", "--master-addr", "h0"}, []string{"--node-rank 2"}},
		{[]string{"--nnodes", "2", "--node-rank", "1", "--master-addr", "h0", "--master-port", "0"}, []string{"--master-port 0", "cannot work across hosts"}},
		{[]string{"--nnodes", "2", "--node-rank", "0", "--master-addr", "h0", "--tls-cert", "c"}, []string{"--tls-cert, --tls-key and --tls-ca"}},
	} {
		_, err := parseArgs(append(slices.Clone(tt.args), "prog"), noTrainer)
		for _, w := range tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %v, want one with %q", tt.args, err, w)
			}
		}
	}
	// Under --config, the python flags make no sense.
	if _, err := parseArgs([]string{"--config", "c.yaml", "-m"}, func() (string, error) { return "/bin/ddptrain", nil }); err == nil ||
		!strings.Contains(err.Error(), "are for a PROGRAM") {
		t.Errorf("--config with -m: %v", err)
	}
	// A Slurm job with --master-addr is static: Slurm's first host is not joined as a gossip peer.
	withEnv(t, map[string]string{"SLURM_JOB_ID": "5", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "n[1-2]"})
	c, err := parseArgs([]string{"--master-addr", "n1", "prog"}, noTrainer)
	if err != nil || c.multi.kind != rdzvStatic || c.multi.nodeRank != 1 || len(c.multi.join) != 0 {
		t.Errorf("Slurm + --master-addr: %v %+v, want static with node rank 1", err, c)
	}
}

// Hosts of a gossip job must agree on --role (every worker has the one role): it is in the hash.
func TestConfigHash_role(t *testing.T) {
	withEnv(t, nil)
	hash := func(args ...string) string {
		c, err := parseArgs(append(args, "prog", "a"), noTrainer)
		if err != nil {
			t.Fatal(err)
		}
		return configHash(c)
	}
	if hash() != hash("--role", "default") || hash() == hash("--role", "trainer") || hash("--role", "a") == hash("--role", "b") {
		t.Error("--role does not separate the hashes (or the default role changed the old hash)")
	}
}
