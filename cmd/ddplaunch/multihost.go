package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goddp/goddp/launcher"
	"github.com/spf13/pflag"
)

// getenv reads the environment (SLURM_*, DDP_CLUSTER_KEY); tests replace it.
var getenv = os.Getenv

// multiFlags are the multi-host flags (docs/multihost.md).
type multiFlags struct {
	enabled                bool
	allowMinority          bool
	minNodes, maxNodes     int
	nodeRank               int // -1 = auto
	join                   []string
	rdzvID                 string
	bind, advertise        string
	keyFile                string
	rdzvTimeout            time.Duration
	lastCall               time.Duration
	gossip                 string
	tlsCert, tlsKey, tlsCA string
}

// resolve applies the SLURM_* defaults to flags not given, parses --nnodes and --node-rank, and
// decides whether the job is multi-host (MAX > 1 or --join).
func (m *multiFlags) resolve(fs *pflag.FlagSet, c *cli, getenv func(string) string) error {
	if getenv("SLURM_JOB_ID") != "" {
		if !fs.Changed("nnodes") && getenv("SLURM_NNODES") != "" {
			c.nnodes = getenv("SLURM_NNODES")
		}
		if !fs.Changed("node-rank") && getenv("SLURM_NODEID") != "" {
			c.nodeRank = getenv("SLURM_NODEID")
		}
		if !fs.Changed("rdzv-id") {
			m.rdzvID = "slurm-" + getenv("SLURM_JOB_ID")
		}
		if !fs.Changed("join") {
			if h := firstSlurmHost(getenv("SLURM_JOB_NODELIST")); h != "" {
				m.join = []string{h}
			}
		}
	}
	var err error
	if m.minNodes, m.maxNodes, err = parseNNodes(c.nnodes); err != nil {
		return err
	}
	m.nodeRank = -1
	if c.nodeRank != "auto" && c.nodeRank != "" {
		r, err := strconv.Atoi(c.nodeRank)
		if err != nil || r < 0 {
			return fmt.Errorf("--node-rank %q: want a number ≥ 0 or auto", c.nodeRank)
		}
		if r >= m.maxNodes {
			return fmt.Errorf("--node-rank %d: want below --nnodes %d", r, m.maxNodes)
		}
		m.nodeRank = r
	}
	if err := m.check(); err != nil { // also on one host: a nonsense value is refused, not ignored
		return err
	}
	m.enabled = m.maxNodes > 1 || len(m.join) > 0
	if !m.enabled {
		if m.tlsCert != "" || m.tlsKey != "" || m.tlsCA != "" || m.keyFile != "" {
			return fmt.Errorf("--tls-*/--cluster-key-file are for multi-host jobs (--nnodes > 1 with --join)")
		}
		return nil
	}
	if err := launcher.CheckNNodes(m.minNodes, m.maxNodes, m.allowMinority); err != nil {
		return err
	}
	if (m.tlsCert == "") != (m.tlsKey == "") || (m.tlsCert != "" && m.tlsCA == "") {
		return fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together")
	}
	if m.minNodes > 1 && len(m.join) == 0 {
		return fmt.Errorf("--nnodes %s: a multi-host job needs --join HOST[:PORT] (any host of the job, this one included)", c.nnodes)
	}
	if _, err := launcher.ClusterConfigByName(m.gossip); err != nil {
		return fmt.Errorf("--gossip %q: want lan, wan or local", m.gossip)
	}
	return nil
}

// checkFlags refuses negative or nonsense values of the launcher's own flags, naming the flag
// (issue 22); resolve checks the multi-host ones. Nothing is silently replaced by a default.
func checkFlags(c *cli) error {
	o := &c.opts
	switch {
	case o.MaxRestarts < 0:
		return fmt.Errorf("--max-restarts %d: want 0 or more", o.MaxRestarts)
	case o.MasterPort < 0 || o.MasterPort > 65535:
		return fmt.Errorf("--master-port %d: want 0..65535 (0: a free port)", o.MasterPort)
	case o.Grace <= 0:
		return fmt.Errorf("--grace %v: want a duration above 0, e.g. 10s", o.Grace)
	case strings.TrimSpace(o.MasterAddr) == "" || strings.ContainsAny(o.MasterAddr, " \t\n"):
		return fmt.Errorf("--master-addr %q: want a host name or IP", o.MasterAddr)
	}
	return nil
}

// check refuses nonsense values of the multi-host flags, naming the flag.
func (m *multiFlags) check() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--rdzv-timeout", m.rdzvTimeout}, {"--rdzv-last-call", m.lastCall}} {
		if d.v <= 0 {
			return fmt.Errorf("%s %v: want a duration above 0", d.name, d.v)
		}
	}
	if err := launcher.CheckJobID(m.rdzvID); err != nil {
		return err
	}
	if err := checkHostPort("--bind", m.bind, true); err != nil {
		return err
	}
	if host, _, _ := net.SplitHostPort(m.bind); host != "" && net.ParseIP(host) == nil {
		return fmt.Errorf("--bind %q: want IP:PORT (an IP of this host, or 0.0.0.0)", m.bind)
	}
	for _, j := range m.join {
		if err := checkHostPort("--join", j, false); err != nil {
			return err
		}
	}
	if m.advertise != "" && net.ParseIP(m.advertise) == nil {
		return fmt.Errorf("--advertise-addr %q: want an IP", m.advertise)
	}
	return nil
}

// checkHostPort checks one HOST[:PORT] value of flag; the port, when given (always when
// needPort), must be 1..65535.
func checkHostPort(flag, v string, needPort bool) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		if needPort || strings.TrimSpace(v) == "" || strings.Count(v, ":") == 1 {
			return fmt.Errorf("%s %q: want HOST:PORT", flag, v)
		}
		host, port = strings.Trim(v, "[]"), "-" // a name or an IPv6 address without a port
	}
	if p, err := strconv.Atoi(port); port != "-" && (err != nil || p < 1 || p > 65535) {
		return fmt.Errorf("%s %q: port %q: want 1..65535", flag, v, port)
	}
	if strings.TrimSpace(host) == "" && flag == "--join" {
		return fmt.Errorf("%s %q: no host", flag, v)
	}
	return nil
}

// parseNNodes parses M or MIN:MAX.
func parseNNodes(s string) (int, int, error) {
	lo, hi, elastic := strings.Cut(s, ":")
	a, err1 := strconv.Atoi(lo)
	b := a
	var err2 error
	if elastic {
		b, err2 = strconv.Atoi(hi)
	}
	if err1 != nil || err2 != nil || a < 1 || b < a {
		return 0, 0, fmt.Errorf("--nnodes %q: want M or MIN:MAX with 1 ≤ MIN ≤ MAX", s)
	}
	return a, b, nil
}

// firstSlurmHost returns the first host of a Slurm node list: "node[01-04,07],gpu3" → "node01".
func firstSlurmHost(list string) string {
	list = strings.TrimSpace(list)
	if list == "" {
		return ""
	}
	end := len(list)
	if i := strings.IndexAny(list, ",["); i >= 0 {
		end = i
	}
	prefix := list[:end]
	if end == len(list) || list[end] == ',' {
		return prefix
	}
	rest := list[end+1:]
	j := strings.IndexAny(rest, ",-]")
	if j < 0 {
		return prefix
	}
	return prefix + rest[:j]
}

// rendezvous builds the memberlist rendezvous and the extra worker environment (TLS files).
func (m *multiFlags) rendezvous(c *cli, nproc, gpus int) (launcher.Rendezvous, []string, error) {
	key, err := launcher.LoadClusterKey(m.keyFile, getenv)
	if err != nil {
		return nil, nil, err
	}
	cc, _ := launcher.ClusterConfigByName(m.gossip)
	hash := configHash(c)
	var env []string
	for _, f := range []struct{ name, path string }{
		{"DDP_TLS_CERT", m.tlsCert}, {"DDP_TLS_KEY", m.tlsKey}, {"DDP_TLS_CA", m.tlsCA},
	} {
		if f.path == "" {
			continue
		}
		abs, err := filepath.Abs(f.path)
		if err != nil {
			return nil, nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, nil, fmt.Errorf("--tls: %w", err)
		}
		env = append(env, f.name+"="+abs)
	}
	r, err := launcher.NewMemberlistRendezvous(launcher.MemberlistConfig{
		Job: m.rdzvID, MinNodes: m.minNodes, MaxNodes: m.maxNodes, NodeRank: m.nodeRank, AllowMinority: m.allowMinority,
		NProc: nproc, GPUs: gpus, ConfigHash: hash,
		Bind: m.bind, Advertise: m.advertise, Join: m.join, Key: key,
		Cluster: cc, RdzvTimeout: m.rdzvTimeout, LastCall: m.lastCall, MasterPort: c.opts.MasterPort,
	})
	if err != nil {
		return nil, nil, err
	}
	return r, env, nil
}

// configHash is the hash hosts must agree on: config.Config.Hash of the --config run (config and
// model shape, without host-local paths; loaded by run), or of the program's base name and
// arguments.
func configHash(c *cli) string {
	if c.loaded != nil {
		return c.loaded.Hash()
	}
	h := sha256.New()
	h.Write([]byte(filepath.Base(c.opts.Program)))
	for _, a := range c.opts.Args {
		h.Write([]byte{0})
		h.Write([]byte(a))
	}
	return hex.EncodeToString(h.Sum(nil))
}
