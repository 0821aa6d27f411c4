//go:build !ddptesthooks

package main

import (
	"testing"

	"github.com/goddp/goddp/worker"
)

// The shipped build ignores the fault-injection variables: no hook is set however they are.
func TestTestHooks_notInTheShippedBuild(t *testing.T) {
	t.Setenv("DDP_FAIL_AT_STEP", "2")
	t.Setenv("DDP_INJECT_INF_STEP", "2")
	var opt worker.Options
	testHooks(&opt)
	if opt.FaultHook != nil || opt.InjectInf != nil {
		t.Fatal("a build without -tags ddptesthooks set a fault hook from the environment")
	}
}
