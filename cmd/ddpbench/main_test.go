package main

import (
	"os"
	"sort"
	"testing"
)

// Every subcommand's --help (and -h) prints its flags and exits 0, as ddpbench --help does; an
// unknown subcommand or no arguments is a usage error (2).
func TestRun_helpExitsZero(t *testing.T) {
	stderr := os.Stderr
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	os.Stderr = devnull
	defer func() { os.Stderr = stderr }()
	var names []string
	for n, sc := range subcommands {
		if !sc.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) < 3 {
		t.Fatalf("subcommands %v: want at least allreduce, plot, tokenize", names)
	}
	for _, n := range names {
		for _, h := range []string{"--help", "-h"} {
			if code := run([]string{n, h}); code != 0 {
				t.Errorf("ddpbench %s %s exits %d, want 0", n, h, code)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"help"}} {
		if code := run(args); code != 0 {
			t.Errorf("ddpbench %v exits %d, want 0", args, code)
		}
	}
	for _, args := range [][]string{nil, {"nosuch"}} {
		if code := run(args); code != 2 {
			t.Errorf("ddpbench %v exits %d, want 2", args, code)
		}
	}
}
