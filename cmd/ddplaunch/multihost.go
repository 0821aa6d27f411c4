package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
	m.enabled = m.maxNodes > 1 || len(m.join) > 0
	if !m.enabled {
		if m.tlsCert != "" || m.tlsKey != "" || m.tlsCA != "" || m.keyFile != "" {
			return fmt.Errorf("--tls-*/--cluster-key-file are for multi-host jobs (--nnodes > 1 with --join)")
		}
		return nil
	}
	if (m.tlsCert == "") != (m.tlsKey == "") || (m.tlsCert != "" && m.tlsCA == "") {
		return fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together")
	}
	if m.minNodes > 1 && len(m.join) == 0 {
		return fmt.Errorf("--nnodes %s: a multi-host job needs --join HOST[:PORT] (any host of the job, this one included)", c.nnodes)
	}
	if _, err := launcher.ClusterConfigByName(m.gossip); err != nil {
		return err
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
		Job: m.rdzvID, MinNodes: m.minNodes, MaxNodes: m.maxNodes, NodeRank: m.nodeRank,
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
