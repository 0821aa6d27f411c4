package main

// subcommands.go: `ddptrain NAME ...` besides training. Each subcommand lives in its own file and
// registers itself in init; run (main.go) hands it the arguments after its name. Training itself
// stays the bare `ddptrain --config FILE`.

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// subcommand is one `ddptrain NAME ...`: run returns the exit status (exitUsage for bad flags).
type subcommand struct {
	summary string
	run     func(args []string) int
}

var subcommands = map[string]subcommand{}

// register adds a subcommand; called from init in the subcommand's file.
func register(name string, sc subcommand) {
	if _, dup := subcommands[name]; dup {
		panic("ddptrain: subcommand registered twice: " + name)
	}
	subcommands[name] = sc
}

// runSubcommand runs args[0]'s subcommand when there is one (ok false: train).
func runSubcommand(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	sc, ok := subcommands[args[0]]
	if !ok {
		return 0, false
	}
	return sc.run(args[1:]), true
}

// subcommandUsage lists the subcommands for ddptrain's usage text.
func subcommandUsage() string {
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "       ddptrain %-8s %s\n", n, subcommands[n].summary)
	}
	return b.String()
}

// fail prints err for subcommand name and returns code.
func fail(name string, code int, err error) int {
	fmt.Fprintf(os.Stderr, "ddptrain %s: %v\n", name, err)
	return code
}
