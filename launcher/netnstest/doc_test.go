// Package netnstest runs multi-host ddplaunch jobs on one machine: each "host" is a network
// namespace (ip netns) with its own veth link to a bridge in a switch namespace, running its own
// bin/ddplaunch with 2 CPU workers. It needs root and iproute2, and skips with a message otherwise.
//
// Every namespace is named ddpt<pid>-<test>-<role>; t.Cleanup kills the processes the test started
// and deletes its namespaces (links and the bridge go with them), and each run first sweeps
// namespaces left by runs whose process is gone.
package netnstest
