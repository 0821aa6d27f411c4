package launcher

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// network drives RdzvStates by hand, like raft_test.go's network: metadata is "gossiped" by
// copying it into every other host's view on deliver; cut hosts neither send nor receive.
type network struct {
	hosts map[string]*RdzvState
	view  map[string]map[string]NodeMeta // host → what it sees of the others
	cut   map[string]bool
	side  map[string]int // partition: hosts on different sides do not see each other
	errs  map[string]error
	now   time.Time
}

func newNetwork(min, max int, names ...string) *network {
	n := &network{hosts: map[string]*RdzvState{}, view: map[string]map[string]NodeMeta{}, cut: map[string]bool{},
		side: map[string]int{}, errs: map[string]error{}, now: time.Unix(0, 0)}
	for _, name := range names {
		n.add(name, min, max)
	}
	n.deliver()
	return n
}

// add starts a host waiting for round 0.
func (n *network) add(name string, min, max int) *RdzvState {
	s := NewRdzvState(name, NodeMeta{Job: "j", Proto: RendezvousProtocol, Addr: "10.0.0." + name, NProc: 2, Want: -1}, min, max, 10*time.Second)
	s.Wait(1000 + len(n.hosts))
	n.hosts[name] = s
	n.view[name] = map[string]NodeMeta{}
	return s
}

func (n *network) deliver() {
	for a, s := range n.hosts {
		for b := range n.hosts {
			if a != b && !n.cut[a] && !n.cut[b] && n.side[a] == n.side[b] {
				n.view[b][a] = s.Meta()
			}
		}
	}
}

// partition puts names on a side of their own: each side's failure detector declares the other
// side dead (removes it from the views).
func (n *network) partition(names ...string) {
	for _, name := range names {
		n.side[name] = 1
	}
	for a := range n.hosts {
		for b := range n.view[a] {
			if n.side[a] != n.side[b] {
				delete(n.view[a], b)
			}
		}
	}
}

// fail ends the running round of names with an error and has them wait for the next one, as Run
// does after a lost peer.
func (n *network) fail(names ...string) {
	for _, name := range names {
		n.hosts[name].End(errors.New("a peer was lost"))
		n.hosts[name].Wait(3000)
	}
	n.deliver()
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
		if n.errs[name] != nil {
			continue // it stopped
		}
		ro, err := s.Step(n.now, ms)
		if err != nil {
			n.errs[name] = err
			continue
		}
		if ro != nil {
			out[name] = ro
		}
	}
	n.deliver()
	return out
}

// run steps until every host has a roster or an error, or 20 steps pass.
func (n *network) run() map[string]*Roster {
	got := map[string]*Roster{}
	for range 20 {
		for k, v := range n.step() {
			got[k] = v
		}
		if len(got)+len(n.errs) == len(n.hosts) {
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
	got = n.settle()
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

// settle runs, lets the last call pass, and runs again; it returns every roster agreed.
func (n *network) settle() map[string]*Roster {
	got := n.run()
	n.now = n.now.Add(11 * time.Second)
	for k, v := range n.run() {
		got[k] = v
	}
	return got
}

// splitBrain returns name's *SplitBrainError, or fails.
func (n *network) splitBrain(t *testing.T, name string) *SplitBrainError {
	t.Helper()
	var sb *SplitBrainError
	if !errors.As(n.errs[name], &sb) {
		t.Fatalf("%s: error %v, want a *SplitBrainError", name, n.errs[name])
	}
	return sb
}

// Issue 22, item 4: --nnodes 1:3 and a partition {a,b} | {c}. Each side's MIN allows it to go on,
// but only the majority may: c stops, a and b run round 1.
func TestRdzvState_partitionMinorityStops(t *testing.T) {
	n := newNetwork(1, 3, "a", "b", "c")
	if got := n.run(); len(got) != 3 {
		t.Fatalf("round 0: %d hosts agreed", len(got))
	}
	n.partition("c")
	n.fail("a", "b", "c")
	got := n.settle()
	if r := got["a"]; r == nil || r.Round != 1 || len(r.Hosts) != 2 || got["b"] == nil || got["b"].Hash != r.Hash {
		t.Fatalf("majority side: rosters %v, want a and b in round 1", got)
	}
	if got["c"] != nil {
		t.Fatalf("the minority side ran round %d alone: split brain", got["c"].Round)
	}
	sb := n.splitBrain(t, "c")
	if sb.Kept != 1 || sb.Prev.Size != 3 || sb.Prev.Round != 0 || sb.Round != 1 {
		t.Errorf("error %+v, want 1 of round 0's 3 hosts, refusing round 1", sb)
	}
	for _, want := range []string{"split brain", "--allow-minority", "only 1 of the 3 hosts of round 0 among them"} {
		if !strings.Contains(sb.Error(), want) {
			t.Errorf("error %q does not say %q", sb.Error(), want)
		}
	}
}

// With AllowMinority each side goes on alone: the old behaviour, chosen explicitly.
func TestRdzvState_allowMinority(t *testing.T) {
	n := newNetwork(1, 2, "a", "b")
	for _, s := range n.hosts {
		s.AllowMinority = true
	}
	n.run()
	n.partition("b")
	n.fail("a", "b")
	got := n.settle()
	if len(got) != 2 || len(n.errs) != 0 || len(got["a"].Hosts) != 1 || len(got["b"].Hosts) != 1 {
		t.Fatalf("rosters %v, errors %v: want each side alone", got, n.errs)
	}
}

// An even split has no majority: both sides stop.
func TestRdzvState_evenSplitStopsBoth(t *testing.T) {
	n := newNetwork(2, 4, "a", "b", "c", "d")
	n.run()
	n.partition("c", "d")
	n.fail("a", "b", "c", "d")
	if got := n.settle(); len(got) != 0 {
		t.Fatalf("rosters %v after a 2|2 split, want none", got)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if sb := n.splitBrain(t, name); sb.Kept != 2 || sb.Prev.Size != 4 {
			t.Errorf("%s: %+v", name, sb)
		}
	}
}

// A spare (more than MAX hosts) knows the running round from its peers' metadata: on the minority
// side with a host of the round it would make MIN, but it stops too.
func TestRdzvState_spareOnTheMinoritySide(t *testing.T) {
	n := newNetwork(2, 3, "a", "b", "c", "d") // d sorts last: the spare
	got := n.run()
	if len(got) != 3 || got["d"] != nil {
		t.Fatalf("round 0: %v, want a, b, c with d spare", got)
	}
	n.step() // d sees the others run round 0
	if p := n.hosts["d"].Previous(); p == nil || p.Size != 3 || !p.Seen || len(p.Hosts) != 3 {
		t.Fatalf("the spare's previous membership %+v, want round 0's 3 hosts, seen", p)
	}
	n.partition("c", "d")
	n.fail("a", "b", "c")
	got = n.settle()
	if got["a"] == nil || got["b"] == nil || got["c"] != nil || got["d"] != nil {
		t.Fatalf("rosters %v: want a and b only", got)
	}
	n.splitBrain(t, "c")
	if sb := n.splitBrain(t, "d"); sb.Kept != 1 {
		t.Errorf("d: %+v", sb)
	}
}

// A replacement host does not make a minority a majority: of round 0's a, b, c, only a is on its
// side with a new host e; a stops. With b and c beside it, e's joining is fine.
func TestRdzvState_replacementHost(t *testing.T) {
	n := newNetwork(2, 3, "a", "b", "c")
	n.run()
	n.partition("a")
	n.fail("a", "b", "c")
	e := n.add("e", 2, 3)
	n.side["e"] = 1 // joins a's side
	n.deliver()
	got := n.settle()
	n.splitBrain(t, "a")
	if got["e"] != nil || e.Meta().Phase == PhaseRunning {
		t.Errorf("the new host ran: %v", got["e"])
	}
	if got["b"] == nil || len(got["b"].Hosts) != 2 {
		t.Errorf("b and c: %v", got)
	}

	n2 := newNetwork(2, 3, "a", "b", "c")
	n2.run()
	n2.kill("c")
	n2.fail("a", "b")
	n2.add("e", 2, 3)
	n2.deliver()
	if got := n2.settle(); len(got) != 3 || got["e"] == nil || got["e"].Round != 1 {
		t.Fatalf("a, b and the replacement e: %v %v", got, n2.errs)
	}
}

func TestCheckNNodes(t *testing.T) {
	for _, tt := range []struct {
		min, max int
		allow    bool
		ok       bool
	}{
		{1, 1, false, true}, {2, 2, false, true}, {2, 3, false, true}, {3, 5, false, true}, {5, 8, false, true},
		{1, 2, false, false}, {2, 4, false, false}, {1, 3, false, false}, {4, 8, false, false},
		{1, 2, true, true}, {1, 8, true, true},
	} {
		err := CheckNNodes(tt.min, tt.max, tt.allow)
		if (err == nil) != tt.ok {
			t.Errorf("CheckNNodes(%d, %d, %v) = %v, want ok=%v", tt.min, tt.max, tt.allow, err, tt.ok)
		}
		if err != nil && (ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "split brain") || !strings.Contains(err.Error(), "--allow-minority")) {
			t.Errorf("CheckNNodes(%d, %d): %q (exit %d): want a usage error naming split brain and --allow-minority", tt.min, tt.max, err, ExitCode(err))
		}
	}
}

// The largest metadata a host can have still fits memberlist's limit: the longest job id, an IPv6
// address, a failed round's message of the worst characters.
func TestNodeMeta_fits(t *testing.T) {
	if CheckJobID(strings.Repeat("x", MaxJobID)) != nil || CheckJobID(strings.Repeat("x", MaxJobID+1)) == nil ||
		CheckJobID("") == nil || CheckJobID(`a"b`) == nil || CheckJobID("slurm-123_4") != nil {
		t.Fatal("CheckJobID")
	}
	s := NewRdzvState("h", NodeMeta{Job: strings.Repeat("x", MaxJobID), Proto: RendezvousProtocol,
		Addr: "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", NProc: 1 << 30, GPUs: 1 << 30,
		Hash: strings.Repeat("f", 16), Want: 1 << 30, KeyID: strings.Repeat("f", 8)}, 1<<30, 1<<30, time.Second)
	s.Wait(65535)
	s.meta.Phase, s.meta.Round, s.meta.Prev, s.meta.Prop, s.meta.Size = PhaseRunning, 1<<30, 1<<30, strings.Repeat("f", 16), 1<<30
	s.End(errors.New(strings.Repeat("<\"\u00e9\n", 200)))
	if b := s.Meta().encode(); len(b) > memberlist.MetaMaxSize {
		t.Errorf("metadata of %d bytes, over memberlist's %d: %s", len(b), memberlist.MetaMaxSize, b)
	} else {
		t.Logf("largest metadata: %d of %d bytes", len(b), memberlist.MetaMaxSize)
	}
}

// stepOne steps one host and delivers its metadata at once (gossip is not in lock-step: a peer may
// agree and run before this host has stepped again).
func (n *network) stepOne(name string) (*Roster, error) {
	var ms []Member
	for o, m := range n.view[name] {
		ms = append(ms, Member{Name: o, Meta: m})
	}
	ro, err := n.hosts[name].Step(n.now, ms)
	n.deliver()
	return ro, err
}

// A host that sees its peer already running the round it is about to agree on is not a minority
// of that round: it agrees too.
func TestRdzvState_peerAgreesFirst(t *testing.T) {
	n := newNetwork(2, 3, "a", "b", "c")
	n.run()
	n.kill("c")
	n.fail("a", "b")
	n.stepOne("a") // quorum: the last call starts
	n.stepOne("b")
	n.now = n.now.Add(11 * time.Second)
	if ro, err := n.stepOne("a"); ro != nil || err != nil { // proposes
		t.Fatalf("a: %v %v", ro, err)
	}
	if ro, err := n.stepOne("b"); ro == nil || err != nil { // sees a's proposal: agrees, runs
		t.Fatalf("b: %v %v, want b running round 1", ro, err)
	}
	ro, err := n.stepOne("a") // sees b running round 1 with 2 hosts
	if err != nil || ro == nil || ro.Round != 1 || len(ro.Hosts) != 2 {
		t.Fatalf("a: roster %+v, error %v: want round 1 with a and b", ro, err)
	}
}

// Round 1 is agreed by b and c while a, which proposed it too, has not stepped again; then c
// dies. a was in round 1 (its own proposal): with b it is 2 of round 1's 3 hosts, a majority.
func TestRdzvState_proposedRoundCountsSelf(t *testing.T) {
	n := newNetwork(2, 3, "a", "b", "c")
	n.run()
	n.fail("a", "b", "c")
	for _, h := range []string{"a", "b", "c"} { // everyone proposes round 1 (Max hosts: no last call); c, last, agrees
		if _, err := n.stepOne(h); err != nil {
			t.Fatal(err)
		}
	}
	if ro, err := n.stepOne("b"); ro == nil || err != nil || n.hosts["c"].Meta().Phase != PhaseRunning {
		t.Fatalf("b: %v %v; c %s: want b and c running round 1", ro, err, n.hosts["c"].Meta().Phase)
	}
	n.kill("c")
	if _, err := n.stepOne("a"); err != nil {
		t.Fatalf("a: %v; it proposed round 1 and is one of its 2 survivors", err)
	}
	if p := n.hosts["a"].Previous(); p == nil || p.Round != 1 || !p.Hosts["a"] || !p.Hosts["b"] || p.Size != 3 {
		t.Errorf("a's previous membership %+v, want round 1 of 3 with a and b", p)
	}
}
