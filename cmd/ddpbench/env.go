package main

import "os"

// getenv is how ddpbench reads the environment, all of it: DDP_TRANSPORT (the default
// --transport), DDPBENCH_CPUPROFILE (a CPU profile per rank) and, through allreduce.ConfigFromEnv,
// the group's variables that `ddpbench allreduce` sets for its ranks.
var getenv = os.Getenv
