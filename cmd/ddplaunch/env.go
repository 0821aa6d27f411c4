package main

import "os"

// The environment ddplaunch reads, all of it through these two (tests replace getenv): torchrun's
// PET_* flags, SLURM_* of an allocation, PYTHON_EXEC, DDP_CLUSTER_KEY and CUDA_VISIBLE_DEVICES.
// The workers' environment is os.Environ() with the launcher's variables added (launcher.Run).
var (
	getenv    = os.Getenv
	lookupEnv = os.LookupEnv
)
