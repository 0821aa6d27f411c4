// Command ddpbench benchmarks goddp's parts. Each subcommand lives in its own file and
// registers itself in init:
//
//	ddpbench allreduce --nproc 4 --sizes 1M,64M --wire f32,f16
package main

import (
	"fmt"
	"os"
	"sort"
)

// subcommand is one `ddpbench NAME ...`.
type subcommand struct {
	summary string
	hidden  bool // internal (e.g. worker processes ddpbench spawns of itself)
	run     func(args []string) error
}

var subcommands = map[string]subcommand{}

// register adds a subcommand; called from init in the subcommand's file.
func register(name string, sc subcommand) {
	if _, dup := subcommands[name]; dup {
		panic("ddpbench: subcommand registered twice: " + name)
	}
	subcommands[name] = sc
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: ddpbench <subcommand> [flags]\n\nsubcommands:")
	names := make([]string, 0, len(subcommands))
	for n, sc := range subcommands {
		if !sc.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", n, subcommands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\n`ddpbench <subcommand> --help` for its flags.")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	sc, ok := subcommands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "ddpbench: unknown subcommand %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := sc.run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "ddpbench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
