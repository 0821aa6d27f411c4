package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goddp/goddp/launcher"
	"github.com/spf13/pflag"
)

// The rendezvous kinds ddplaunch chooses from its flags (multiFlags.resolve).
const (
	rdzvLocal  = "local"      // one host: launcher.LocalRendezvous
	rdzvStatic = "static"     // fixed hosts, torchrun's static rendezvous: launcher.StaticRendezvous
	rdzvGossip = "memberlist" // gossip, elastic: launcher.MemberlistRendezvous
)

// multiFlags are the multi-host flags (docs/multihost.md).
type multiFlags struct {
	kind                   string // rdzvLocal, rdzvStatic or rdzvGossip
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
	masterAddr             string // static: node rank 0's host
	masterPort             int    // static: its port
}

// gossipOnly are the flags of the gossip rendezvous alone: a static job refuses them rather
// than ignore them.
var gossipOnly = []string{"join", "bind", "advertise-addr", "local-addr", "gossip", "rdzv-last-call", "allow-minority"}

// resolve decides the rendezvous and checks its flags. --standalone is one host. A job of several
// hosts uses the gossip rendezvous with --join (or --rdzv-backend memberlist), torchrun's static
// one with --master-addr, --rdzv-endpoint or --rdzv-backend static|c10d and a --node-rank on each
// host. Under Slurm, SLURM_* fill --nnodes, --node-rank, --rdzv-id and (unless static) --join when
// they are not given.
func (m *multiFlags) resolve(fs *pflag.FlagSet, c *cli, getenv func(string) string) error {
	t := &c.tr
	switch t.backend {
	case "", backendStatic, backendC10d, backendGossip:
	case "etcd", "etcd-v2":
		return fmt.Errorf("--rdzv-backend %s: goddp has no etcd rendezvous; use --rdzv-backend static (fixed hosts: "+
			"--node-rank and --master-addr on each) or --join HOST (goddp's gossip rendezvous, elastic with --nnodes MIN:MAX)", t.backend)
	default:
		return fmt.Errorf("--rdzv-backend %q: want static, c10d or memberlist", t.backend)
	}
	if t.standalone {
		return m.resolveStandalone(fs, c)
	}
	c.opts.RunID = m.rdzvID
	static := t.backend == backendStatic || t.backend == backendC10d || fs.Changed("rdzv-endpoint") || fs.Changed("master-addr")
	if getenv("SLURM_JOB_ID") != "" {
		if !fs.Changed("nnodes") && getenv("SLURM_NNODES") != "" {
			c.nnodes = getenv("SLURM_NNODES")
		}
		if !fs.Changed("node-rank") && getenv("SLURM_NODEID") != "" {
			c.nodeRank = getenv("SLURM_NODEID")
		}
		if !fs.Changed("rdzv-id") {
			m.rdzvID = "slurm-" + getenv("SLURM_JOB_ID")
			c.opts.RunID = m.rdzvID
		}
		if !fs.Changed("join") && !static {
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
	if len(m.join) > 0 || t.backend == backendGossip {
		if static {
			return fmt.Errorf("--join (the gossip rendezvous) and --rdzv-backend static|c10d, --rdzv-endpoint or --master-addr " +
				"(the static one) cannot go together: with --join, node rank 0's --advertise-addr is MASTER_ADDR; give one kind")
		}
		return m.resolveGossip(c)
	}
	if m.maxNodes == 1 {
		m.kind = rdzvLocal
		if m.tlsCert != "" || m.tlsKey != "" || m.tlsCA != "" || m.keyFile != "" {
			return fmt.Errorf("--tls-*/--cluster-key-file are for multi-host jobs (--nnodes > 1 with --join)")
		}
		if fs.Changed("rdzv-endpoint") {
			return m.endpoint(fs, c)
		}
		return nil
	}
	if !static {
		return fmt.Errorf("--nnodes %s: a multi-host job needs --join HOST[:PORT] (goddp's gossip rendezvous: any host of the job, "+
			"this one included), or --master-addr HOST (node rank 0's) and --node-rank R on every host (torchrun's static rendezvous)", c.nnodes)
	}
	return m.resolveStatic(fs, c)
}

// resolveGossip checks the flags of the memberlist rendezvous.
func (m *multiFlags) resolveGossip(c *cli) error {
	m.kind = rdzvGossip
	if err := launcher.CheckNNodes(m.minNodes, m.maxNodes, m.allowMinority); err != nil {
		return err
	}
	if err := m.checkTLS(); err != nil {
		return err
	}
	if m.minNodes > 1 && len(m.join) == 0 {
		return fmt.Errorf("--nnodes %s: a multi-host job needs --join HOST[:PORT] (any host of the job, this one included)", c.nnodes)
	}
	if _, err := launcher.ClusterConfigByName(m.gossip); err != nil {
		return fmt.Errorf("--gossip %q: want lan, wan or local", m.gossip)
	}
	return nil
}

func (m *multiFlags) checkTLS() error {
	if (m.tlsCert == "") != (m.tlsKey == "") || (m.tlsCert != "" && m.tlsCA == "") {
		return fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together")
	}
	return nil
}

// resolveStatic checks the flags of torchrun's static rendezvous: a fixed --nnodes N, this
// host's --node-rank, and node rank 0's address (--rdzv-endpoint, or --master-addr and
// --master-port, 29500 when not given, as torchrun's).
func (m *multiFlags) resolveStatic(fs *pflag.FlagSet, c *cli) error {
	c10d := c.tr.backend == backendC10d
	if m.minNodes != m.maxNodes {
		if c10d {
			return fmt.Errorf("--rdzv-backend c10d with --nnodes %s: goddp's elastic rendezvous is the gossip one; "+
				"use --join HOST (any host of the job) instead of --rdzv-backend/--rdzv-endpoint", c.nnodes)
		}
		return fmt.Errorf("--nnodes %s: the static rendezvous has no elasticity; give --nnodes N, or use --join HOST "+
			"(goddp's gossip rendezvous) for an elastic job", c.nnodes)
	}
	if m.nodeRank < 0 {
		if c10d {
			return fmt.Errorf("--rdzv-backend c10d without --node-rank: torchrun's c10d store numbers the hosts, and goddp has " +
				"no such store; give each host --node-rank R (0 on the endpoint's host: a static job), or use --join HOST " +
				"for goddp's gossip rendezvous, which numbers them itself")
		}
		return fmt.Errorf("the static rendezvous needs --node-rank R on each host (0 on the host of MASTER_ADDR, " +
			"1..N-1 on the others); ddplaunch does not guess it")
	}
	for _, f := range gossipOnly {
		if fs.Changed(f) {
			return fmt.Errorf("--%s is a flag of the gossip rendezvous (--join); a static job (--master-addr, --rdzv-endpoint, "+
				"--rdzv-backend static|c10d) has no use for it: drop it", f)
		}
	}
	if err := m.checkTLS(); err != nil {
		return err
	}
	m.kind = rdzvStatic
	if fs.Changed("rdzv-endpoint") {
		return m.endpoint(fs, c)
	}
	m.masterAddr, m.masterPort = c.opts.MasterAddr, c.opts.MasterPort
	if fs.Changed("master-port") && m.masterPort == 0 {
		return fmt.Errorf("--master-port 0 (a free port) cannot work across hosts: every host must know node rank 0's port; " +
			"give one, or leave the flag out for torchrun's 29500")
	}
	if m.masterPort == 0 {
		m.masterPort = defaultStaticPort
	}
	return nil
}

// endpoint takes --rdzv-endpoint HOST[:PORT] as MASTER_ADDR:MASTER_PORT: node rank 0's host,
// where its rank 0 serves the workers' rendezvous. c10d's port defaults to 29400 as torchrun's;
// static needs one.
func (m *multiFlags) endpoint(fs *pflag.FlagSet, c *cli) error {
	if fs.Changed("master-addr") || fs.Changed("master-port") {
		return fmt.Errorf("--rdzv-endpoint and --master-addr/--master-port both name node rank 0's address: give one")
	}
	ep := c.tr.endpoint
	host, port := ep, 0
	if h, p, err := net.SplitHostPort(ep); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("--rdzv-endpoint %q: port %q: want 1..65535", ep, p)
		}
		host, port = h, n
	} else if strings.Count(ep, ":") == 1 {
		return fmt.Errorf("--rdzv-endpoint %q: want HOST:PORT", ep)
	}
	host = strings.Trim(host, "[]")
	if strings.TrimSpace(host) == "" || strings.ContainsAny(host, " \t\n") {
		return fmt.Errorf("--rdzv-endpoint %q: want HOST:PORT", ep)
	}
	if port == 0 {
		if c.tr.backend != backendC10d {
			return fmt.Errorf("--rdzv-endpoint %q: the static rendezvous needs HOST:PORT (c10d's default port %d applies "+
				"to --rdzv-backend c10d only)", ep, defaultC10dPort)
		}
		port = defaultC10dPort
	}
	m.masterAddr, m.masterPort = host, port
	c.opts.MasterAddr, c.opts.MasterPort = host, port // one host: LocalRendezvous at the endpoint
	return nil
}

// resolveStandalone is torchrun's --standalone: one host with its own rendezvous on a free port
// and a fresh run id. Flags that would say otherwise are refused (torchrun ignores some of them).
func (m *multiFlags) resolveStandalone(fs *pflag.FlagSet, c *cli) error {
	for _, f := range []string{"rdzv-backend", "rdzv-endpoint", "rdzv-id", "master-addr", "master-port", "join"} {
		if fs.Changed(f) {
			return fmt.Errorf("--standalone runs one host with its own rendezvous on a free port and a fresh run id: drop --%s", f)
		}
	}
	var err error
	if m.minNodes, m.maxNodes, err = parseNNodes(c.nnodes); err != nil {
		return err
	}
	if m.maxNodes != 1 {
		return fmt.Errorf("--standalone is one host: --nnodes %s is not (use --join or --master-addr for several)", c.nnodes)
	}
	if c.nodeRank != "auto" && c.nodeRank != "0" {
		return fmt.Errorf("--standalone is one host, node rank 0: --node-rank %s is not", c.nodeRank)
	}
	if m.tlsCert != "" || m.tlsKey != "" || m.tlsCA != "" || m.keyFile != "" {
		return fmt.Errorf("--tls-*/--cluster-key-file are for multi-host jobs, not --standalone")
	}
	m.kind, m.nodeRank = rdzvLocal, 0
	c.opts.RunID = newRunID()
	return m.check()
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

// rendezvous builds the multi-host rendezvous (static or memberlist) and the extra worker
// environment (TLS files).
func (m *multiFlags) rendezvous(c *cli, nproc, gpus int) (launcher.Rendezvous, []string, error) {
	key, err := launcher.LoadClusterKey(m.keyFile, getenv)
	if err != nil {
		return nil, nil, err
	}
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
	if m.kind == rdzvStatic {
		if len(key) == 0 {
			slog.Warn("ddplaunch: WARNING: NO CLUSTER KEY. The workers' token is derived from the job id (--rdzv-id) alone: " +
				"anyone who can reach MASTER_ADDR:MASTER_PORT and knows the id can join this job. Set --cluster-key-file or $" +
				launcher.EnvClusterKey + " (the same on every host, e.g. `openssl rand -base64 32`).")
		}
		r, err := launcher.NewStaticRendezvous(launcher.StaticConfig{
			NNodes: m.maxNodes, NodeRank: m.nodeRank, NProc: nproc,
			MasterAddr: m.masterAddr, MasterPort: m.masterPort, Job: m.rdzvID, Key: key, Timeout: m.rdzvTimeout,
		})
		if err != nil {
			return nil, nil, err
		}
		return r, env, nil
	}
	cc, _ := launcher.ClusterConfigByName(m.gossip)
	hash := configHash(c)
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
// arguments, and --role when it is not the default one.
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
	if c.opts.Role != "" && c.opts.Role != launcher.DefaultRole {
		// Every worker has the one role (ROLE_RANK = RANK): hosts of another --role are refused.
		h.Write([]byte("\x00role=" + c.opts.Role))
	}
	return hex.EncodeToString(h.Sum(nil))
}
