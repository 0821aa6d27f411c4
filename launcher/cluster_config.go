package launcher

import (
	"fmt"
	"io"
	"log"
	"math"
	"time"

	"github.com/hashicorp/memberlist"
)

// ClusterConfig is the gossip side of a multi-host job: how hosts find each other and how fast a
// dead one is noticed. It is a plain struct; DefaultLANClusterConfig, DefaultWANClusterConfig and
// DefaultLocalClusterConfig are the presets (ddplaunch --gossip lan|wan|local).
//
// Failure detection is memberlist's SWIM: every ProbeInterval each host pings one other host
// (round robin); no ack within ProbeTimeout (direct, then IndirectChecks helpers, then TCP) makes
// the target suspect; a suspect that does not refute within the suspicion time is declared dead
// and every host learns it by gossip. The suspicion time starts at
//
//	SuspicionMin = SuspicionMult · max(1, log10(N)) · ProbeInterval
//
// times SuspicionMaxTimeoutMult and shrinks toward SuspicionMin as other hosts confirm the
// suspicion. DetectionBound adds these up into the documented worst case.
type ClusterConfig struct {
	// ProbeInterval is the time between two failure probes of this host. Lower = faster detection,
	// more packets (one ping per interval per host).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for the ack; it should exceed the network's
	// 99th-percentile round trip, and stay below ProbeInterval.
	ProbeTimeout time.Duration
	// SuspicionMult scales the suspicion time: SuspicionMult · max(1, log10(N)) · ProbeInterval.
	SuspicionMult int
	// SuspicionMaxTimeoutMult is the factor on the suspicion time while no other host confirms.
	SuspicionMaxTimeoutMult int
	// GossipInterval is how often state changes (joins, deaths, metadata) are gossiped; each
	// round reaches GossipNodes random hosts.
	GossipInterval time.Duration
	GossipNodes    int
	// PushPullInterval is the full state sync period (anti-entropy); 0 disables it.
	PushPullInterval time.Duration
	// TCPTimeout bounds a join's push/pull and the TCP fallback ping.
	TCPTimeout time.Duration
	// LeaveTimeout is how long a clean leave (SIGTERM, end of job) waits for its message to be
	// gossiped before the host goes.
	LeaveTimeout time.Duration
}

// DefaultLANClusterConfig is the default (--gossip lan): one datacenter network. With 3 hosts a
// dead or cut-off host is declared dead within DetectionBound(3) = 13.5 s, usually 5–8 s.
func DefaultLANClusterConfig() ClusterConfig {
	return ClusterConfig{
		ProbeInterval:           1 * time.Second,
		ProbeTimeout:            500 * time.Millisecond,
		SuspicionMult:           4,
		SuspicionMaxTimeoutMult: 2,
		GossipInterval:          200 * time.Millisecond,
		GossipNodes:             3,
		PushPullInterval:        30 * time.Second,
		TCPTimeout:              10 * time.Second,
		LeaveTimeout:            2 * time.Second,
	}
}

// DefaultWANClusterConfig starts from LAN and is patient with long round trips and lossy links.
func DefaultWANClusterConfig() ClusterConfig {
	c := DefaultLANClusterConfig()
	c.ProbeInterval = 5 * time.Second // fewer probes over slow links
	c.ProbeTimeout = 3 * time.Second  // high round trips
	c.SuspicionMult = 6               // more time to refute
	c.GossipInterval = 500 * time.Millisecond
	c.GossipNodes = 4
	c.PushPullInterval = 60 * time.Second
	c.TCPTimeout = 30 * time.Second
	return c
}

// DefaultLocalClusterConfig starts from LAN and detects failures in about 2–3 s: hosts on one
// machine or one switch (the network-namespace tests, --gossip local).
func DefaultLocalClusterConfig() ClusterConfig {
	c := DefaultLANClusterConfig()
	c.ProbeInterval = 300 * time.Millisecond // probe often
	c.ProbeTimeout = 200 * time.Millisecond  // loaded CI machines answer late, not never
	c.SuspicionMult = 3                      // SuspicionMin = 0.9 s for N < 10
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 5 * time.Second
	c.TCPTimeout = 2 * time.Second
	c.LeaveTimeout = 1 * time.Second
	return c
}

// ClusterConfigByName returns the preset for --gossip: lan, wan or local.
func ClusterConfigByName(name string) (ClusterConfig, error) {
	switch name {
	case "", "lan":
		return DefaultLANClusterConfig(), nil
	case "wan":
		return DefaultWANClusterConfig(), nil
	case "local":
		return DefaultLocalClusterConfig(), nil
	}
	return ClusterConfig{}, fmt.Errorf("launcher: gossip preset %q: want lan, wan or local", name)
}

// SuspicionTime is the longest a suspect host of an n-host cluster waits to be declared dead:
// SuspicionMaxTimeoutMult · SuspicionMult · max(1, log10(n)) · ProbeInterval.
func (c ClusterConfig) SuspicionTime(n int) time.Duration {
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	min := time.Duration(float64(c.SuspicionMult) * scale * float64(c.ProbeInterval))
	return time.Duration(c.SuspicionMaxTimeoutMult) * min
}

// DetectionBound is the documented worst case from a host dying (or its link going down) to every
// other host of an n-host job knowing it: up to n probe intervals until a survivor probes it,
// the probe timeout, the full suspicion time, and a few gossip rounds for the verdict to spread.
// A loaded host can stretch its probe timeout (memberlist's awareness), so tests add slack.
func (c ClusterConfig) DetectionBound(n int) time.Duration {
	if n < 2 {
		n = 2
	}
	return time.Duration(n)*c.ProbeInterval + c.ProbeTimeout + c.SuspicionTime(n) + 5*c.GossipInterval
}

// memberlistConfig turns c into a memberlist.Config (LAN defaults for every field not named here).
func (c ClusterConfig) memberlistConfig(logOut io.Writer) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.SuspicionMaxTimeoutMult = c.SuspicionMaxTimeoutMult
	mc.GossipInterval = c.GossipInterval
	mc.GossipNodes = c.GossipNodes
	mc.PushPullInterval = c.PushPullInterval
	mc.TCPTimeout = c.TCPTimeout
	mc.GossipToTheDeadTime = 10 * c.ProbeInterval
	mc.DeadNodeReclaimTime = 0
	mc.Logger = log.New(logOut, "", 0)
	return mc
}
