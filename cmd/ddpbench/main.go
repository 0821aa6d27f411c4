// Command ddpbench benchmarks goddp's parts. Each subcommand lives in its own file and
// registers itself in init:
//
//	ddpbench allreduce --nproc 4 --sizes 1M,64M --wire f32,f16
package main

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/spf13/pflag"
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
	os.Exit(run(os.Args[1:]))
}

// run is ddpbench with its arguments, returning the exit status: 0 done (and for --help, of
// ddpbench or of any subcommand), 1 failed, 2 a usage error.
func run(args []string) int {
	if len(args) < 1 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		if len(args) < 1 {
			return 2
		}
		return 0
	}
	sc, ok := subcommands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "ddpbench: unknown subcommand %q\n\n", args[0])
		usage()
		return 2
	}
	if err := sc.run(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) { // the flag set printed its usage
			return 0
		}
		fmt.Fprintf(os.Stderr, "ddpbench %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
