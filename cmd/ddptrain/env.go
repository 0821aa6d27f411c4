package main

import (
	"os"
	"strconv"
)

// envInt reads an integer environment variable (RANK, and the test hooks' variables in a binary
// built with -tags ddptesthooks); unset or malformed is 0. The only place ddptrain reads the
// environment: the trainer's own variables are read by worker (worker/env.go).
func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}
