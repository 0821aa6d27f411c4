//go:build !ddptesthooks

package main

import "github.com/goddp/goddp/worker"

// A binary built without -tags ddptesthooks (every shipped one) has no fault injection: the
// variables testhooks_env.go reads are ignored.

func testHooks(*worker.Options) {}

func injectedFault(error) bool { return false }
