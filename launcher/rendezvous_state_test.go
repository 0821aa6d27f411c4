package launcher

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// network drives RdzvStates by hand, like raft_test.go's network: metadata is "gossiped" by
// copying it into every other host's view on deliver; cut hosts neither send nor receive.
type network struct {
	hosts map[string]*RdzvState
	view  map[string]map[string]NodeMeta // host → what it sees of the others
	cut   map[string]bool
	now   time.Time
}

func newNetwork(min, max int, names ...string) *network {
	n := &network{hosts: map[string]*RdzvState{}, view: map[string]map[string]NodeMeta{}, cut: map[string]bool{}, now: time.Unix(0, 0)}
	for i, name := range names {
		s := NewRdzvState(name, NodeMeta{Job: "j", Proto: RendezvousProtocol, Addr: "10.0.0." + name, NProc: 2, Want: -1}, min, max, 10*time.Second)
		s.Wait(1000 + i)
		n.hosts[name] = s
		n.view[name] = map[string]NodeMeta{}
	}
	n.deliver()
	return n
}

func (n *network) deliver() {
	for a, s := range n.hosts {
		for b := range n.hosts {
			if a != b && !n.cut[a] && !n.cut[b] {
				n.view[b][a] = s.Meta()
			}
		}
	}
}

// kill removes a host from every view (the failure detector's verdict).
func (n *network) kill(name string) {
	delete(n.hosts, name)
	for _, v := range n.view {
		delete(v, name)
	}
}

// step steps every host once and delivers; it returns the rosters agreed in this step.
func (n *network) step() map[string]*Roster {
	out := map[string]*Roster{}
	for name, s := range n.hosts {
		var ms []Member
		for o, m := range n.view[name] {
			ms = append(ms, Member{Name: o, Meta: m})
		}
		ro, err := s.Step(n.now, ms)
		if err != nil {
			panic(err)
		}
		if ro != nil {
			out[name] = ro
		}
	}
	n.deliver()
	return out
}

// run steps until every host has a roster or 20 steps pass.
func (n *network) run() map[string]*Roster {
	got := map[string]*Roster{}
	for range 20 {
		for k, v := range n.step() {
			got[k] = v
		}
		if len(got) == len(n.hosts) {
			break
		}
	}
	return got
}

func TestRdzvState_agreeOnRoster(t *testing.T) {
	n := newNetwork(3, 3, "c", "a", "b")
	got := n.run()
	if len(got) != 3 {
		t.Fatalf("%d hosts agreed, want 3", len(got))
	}
	for name, ro := range got {
		if ro.Hash != got["a"].Hash {
			t.Errorf("%s: roster %s, a: %s", name, ro.Hash, got["a"].Hash)
		}
	}
	// Auto ranks: name order; the master is node rank 0's address and port.
	if r := got["a"]; r.Hosts[0].Name != "a" || r.Hosts[2].Name != "c" {
		t.Errorf("order %v", r.Hosts)
	}
	if addr, port := got["b"].Master(); addr != "10.0.0.a" || port != 1001 {
		t.Errorf("master %s:%d, want a's 10.0.0.a:1001", addr, port)
	}
}

func TestRdzvState_waitsForMaxThenLastCall(t *testing.T) {
	n := newNetwork(2, 3, "a", "b")
	if got := n.run(); len(got) != 0 {
		t.Fatalf("two of MAX 3 agreed before the last call: %v", got)
	}
	n.now = n.now.Add(9 * time.Second)
	if got := n.run(); len(got) != 0 {
		t.Fatal("agreed before the last call (10s) ended")
	}
	n.now = n.now.Add(2 * time.Second)
	if got := n.run(); len(got) != 2 || got["a"].Hash != got["b"].Hash {
		t.Fatalf("after the last call: %v", got)
	}
}

func TestRdzvState_explicitRanksAndShrink(t *testing.T) {
	n := newNetwork(2, 3, "a", "b", "c")
	// c wants node rank 0, a wants 2.
	for name, w := range map[string]int{"c": 0, "a": 2} {
		m := n.hosts[name].meta
		m.Want = w
		n.hosts[name].meta = m
	}
	n.deliver()
	got := n.run()
	if r := got["a"]; r == nil || r.NodeRank("c") != 0 || r.NodeRank("b") != 1 || r.NodeRank("a") != 2 {
		t.Fatalf("roster %+v, want c=0 b=1 a=2", r)
	}
	// b dies; a and c lose the round, restart, and agree on two hosts keeping their order.
	n.kill("b")
	for _, name := range []string{"a", "c"} {
		if err := n.hosts[name].PeerGone("b", n.hosts[name].Roster().Hosts[1].Meta, false); err == nil {
			t.Errorf("%s: losing b is not a loss", name)
		} else if !errors.As(err, new(*HostLostError)) {
			t.Errorf("%s: %T", name, err)
		}
		n.hosts[name].End(errors.New("lost b"))
		n.hosts[name].Wait(2000)
	}
	n.deliver()
	if got := n.run(); len(got) != 0 {
		t.Fatal("2 of MAX 3 agreed before the last call")
	}
	n.now = n.now.Add(11 * time.Second)
	got = n.run()
	if r := got["c"]; r == nil || r.Round != 1 || r.NodeRank("c") != 0 || r.NodeRank("a") != 1 {
		t.Fatalf("second round %+v, want round 1 with c=0 a=1", r)
	}
}

func TestRdzvState_peerFailureBreaksRound(t *testing.T) {
	n := newNetwork(2, 2, "a", "b")
	n.run()
	n.hosts["b"].End(fmt.Errorf("rank 3 exited 1"))
	if err := n.hosts["a"].PeerChanged(Member{Name: "b", Meta: n.hosts["b"].Meta()}); err == nil {
		t.Fatal("b's failure does not break a's round")
	}
	// A host that finished is not lost when it goes.
	n2 := newNetwork(2, 2, "a", "b")
	n2.run()
	n2.hosts["b"].End(nil)
	if err := n2.hosts["a"].PeerGone("b", n2.hosts["b"].Meta(), true); err != nil {
		t.Fatalf("a done host's leave broke the round: %v", err)
	}
	// A late host sees the job done.
	late := NewRdzvState("z", NodeMeta{Want: -1}, 2, 2, time.Second)
	late.Wait(1)
	if _, err := late.Step(n2.now, []Member{{Name: "b", Meta: n2.hosts["b"].Meta()}}); !errors.As(err, new(*ErrJobFinished)) {
		t.Fatalf("late host: %v, want ErrJobFinished", err)
	}
}

func TestSuspicionBound(t *testing.T) {
	c := DefaultLANClusterConfig()
	if got := c.SuspicionTime(3); got != 8*time.Second {
		t.Errorf("LAN suspicion time for 3 hosts %v, want 8s", got)
	}
	if got := c.DetectionBound(3); got != 12500*time.Millisecond {
		t.Errorf("LAN detection bound for 3 hosts %v, want 12.5s", got)
	}
	if got := DefaultLocalClusterConfig().DetectionBound(3); got > 4*time.Second {
		t.Errorf("local detection bound %v, want ≤ 4s", got)
	}
}

func TestClusterKey(t *testing.T) {
	k, err := ParseClusterKey("c2VjcmV0LWtleS1mb3ItZ29kZHAtbmV0bnMtdGVzdHM=\n")
	if err != nil || len(k) != 32 {
		t.Fatalf("%v %d", err, len(k))
	}
	if _, err := ParseClusterKey("abcd"); err == nil {
		t.Error("a 2-byte key was accepted")
	}
	if DeriveToken(k, "j") == DeriveToken([]byte("another key 16by"), "j") || DeriveToken(k, "j") == DeriveToken(k, "k") {
		t.Error("tokens do not depend on key and job")
	}
}
