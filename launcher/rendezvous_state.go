package launcher

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RdzvState is the multi-host rendezvous as a pure state machine, in the way of etcd's raft: no
// clock, no network, no goroutine. It moves only when Step is given the time and the hosts this
// host sees alive (with their metadata); what it wants the others to know is Meta, which the
// I/O layer (MemberlistRendezvous) gossips. Tests drive several of them by hand.
//
// The rule of one round r, as every host applies it:
//
//  1. A peer that is done (its workers finished) at round ≥ r means the job is over: ErrJobFinished.
//  2. A peer waiting or proposing for a later round pulls this host to that round.
//  3. Every live host must be at round r and waiting, proposing or running; anything else (a host
//     still running or failing an older round) blocks the round until it moves or is gone.
//  4. At least Min such hosts start the last call; the round is ready when Max hosts are there or
//     the last call (LastCall) has passed.
//  5. The roster is those hosts (the first Max in roster order) with node ranks assigned by
//     assignRanks; this host proposes its hash.
//  6. When every host of the roster proposes (or already runs) that same hash, the round is agreed:
//     Step returns the roster and this host is running.
//
// And the split-brain rule (unless AllowMinority): the live hosts, and then a roster of step 5,
// must hold a strict majority of the previous membership, the last round this host ran or, for a
// host that ran none (a spare, a late host), the newest round it saw others run (their Prop and
// Size). Otherwise Step returns a *SplitBrainError and this host must stop: the missing hosts may
// be going on as the job on the other side of a network partition (they restart as soon as they
// declare this side dead, so waiting for them is in vain), and two sides resuming in one
// checkpoint.dir would each write their own history there. CheckNNodes is the start-up half: with MIN ≤ MAX/2, two groups
// of MIN hosts could each start round 0.
//
// Two hosts with the same view compute the same roster; hosts whose views differ propose different
// hashes and wait until gossip makes the views equal. A host not in the roster (more than Max)
// waits as a spare. Thread-unsafe: one goroutine (or a mutex) owns it.
type RdzvState struct {
	// Min and Max are --nnodes MIN:MAX; LastCall is how long a round with at least Min but fewer
	// than Max hosts waits for more.
	Min, Max int
	LastCall time.Duration
	// Self is this host's memberlist name.
	Self string
	// AllowMinority turns the split-brain rule off (--allow-minority): a round may go on with any
	// number (≥ Min) of the previous round's hosts.
	AllowMinority bool

	meta     NodeMeta
	quorumAt time.Time   // when Min hosts were first seen ready in this round; zero otherwise
	ran      bool        // this host has run (or failed) meta.Round
	roster   *Roster     // the running round's roster
	prev     *Membership // the previous membership: the last round run here, or seen run
	proposed proposal    // the last roster this host proposed
}

type proposal struct {
	round int
	hash  string
}

// Membership is a round's hosts as one host knows them: all of them for a round it ran; for a round
// it only saw others run, those it saw (Hosts) and how many there were (Size, from their metadata).
type Membership struct {
	Round int
	Hash  string // the roster's hash
	Size  int
	Hosts map[string]bool
	Seen  bool // learnt from other hosts' metadata, not run here
}

// Kept is how many of hosts were in m.
func (m *Membership) Kept(hosts []Member) int {
	n := 0
	for _, h := range hosts {
		if m.Hosts[h.Name] {
			n++
		}
	}
	return n
}

// Majority says whether ro may follow m: it is m's own roster, or it holds more than half of m's
// hosts.
func (m *Membership) Majority(ro *Roster) bool {
	return ro.Hash == m.Hash && ro.Round == m.Round || 2*m.Kept(ro.Hosts) > m.Size
}

// SplitBrainError is Step's error when the hosts of a new round are not a strict majority of the
// previous membership (see RdzvState).
type SplitBrainError struct {
	Round int      // the refused round
	Hosts []string // its hosts
	Prev  *Membership
	Kept  int // how many of Prev's hosts are among Hosts
}

func (e *SplitBrainError) Error() string {
	return fmt.Sprintf("launcher: rendezvous: refusing round %d with host(s) %s: only %d of the %d hosts of round %d among them, "+
		"not a strict majority, so the others may be going on without this side of a network partition, and two sides "+
		"resuming in one checkpoint.dir would be a split brain; this side stops (pass --allow-minority on every host to go on anyway)",
		e.Round, strings.Join(e.Hosts, ", "), e.Kept, e.Prev.Size, e.Prev.Round)
}

func splitBrain(round int, hosts []Member, p *Membership) *SplitBrainError {
	var names []string
	for _, h := range hosts {
		names = append(names, h.Name)
	}
	sort.Strings(names)
	return &SplitBrainError{Round: round, Hosts: names, Prev: p, Kept: p.Kept(hosts)}
}

// CheckNNodes is the start-up half of the split-brain rule: --nnodes MIN:MAX needs MIN > MAX/2
// unless allowMinority, or a partition could leave two groups of MIN hosts that each start the
// job. The error is a *ConfigError naming the flags.
func CheckNNodes(min, max int, allowMinority bool) error {
	if allowMinority || 2*min > max {
		return nil
	}
	return &ConfigError{Err: fmt.Errorf("--nnodes %d:%d: MIN must be more than half of MAX (here at least %d): "+
		"with MIN ≤ MAX/2 a network partition can leave two groups of MIN hosts, and each would go on as the job "+
		"in the same checkpoint.dir (split brain); pass --allow-minority to accept that", min, max, max/2+1)}
}

// Member is one live host as the rendezvous sees it.
type Member struct {
	Name string
	Meta NodeMeta
}

// Roster is an agreed round: its hosts in node-rank order (Hosts[i] has node rank i).
type Roster struct {
	Round int
	Hosts []Member
	Hash  string
}

// NodeRank returns name's node rank in the roster, or -1.
func (r *Roster) NodeRank(name string) int {
	for i, h := range r.Hosts {
		if h.Name == name {
			return i
		}
	}
	return -1
}

// Master is node rank 0's address and master-port candidate: MASTER_ADDR and MASTER_PORT.
func (r *Roster) Master() (string, int) { return r.Hosts[0].Meta.Addr, r.Hosts[0].Meta.Port }

// Describe names a host of the roster for messages: "name (addr, node rank r)".
func (r *Roster) Describe(name string) string {
	for i, h := range r.Hosts {
		if h.Name == name {
			return fmt.Sprintf("%s (%s, node rank %d)", name, h.Meta.Addr, i)
		}
	}
	return name
}

// ErrJobFinished is Step's error when a peer reports the job done while this host waits: it came
// too late, or was a spare.
type ErrJobFinished struct{ By string }

func (e *ErrJobFinished) Error() string {
	return "launcher: rendezvous: the job already finished (host " + e.By + " is done); nothing to do"
}

// HostLostError says a host of the running round is gone: declared dead by gossip, or left.
type HostLostError struct {
	Host string // Roster.Describe of it
	Left bool   // a clean leave rather than a failure-detector verdict
}

func (e *HostLostError) Error() string {
	if e.Left {
		return "host " + e.Host + " left the job"
	}
	return "host " + e.Host + " was declared dead (no answer to gossip probes within the suspicion time)"
}

// PeerFailedError says a host of the running round reported the round over on its side.
type PeerFailedError struct {
	Host   string
	Round  int
	Reason string
}

func (e *PeerFailedError) Error() string {
	return fmt.Sprintf("host %s ended round %d: %s", e.Host, e.Round, e.Reason)
}

// NewRdzvState returns the state of a host that is waiting for round 0 with metadata meta (its
// fixed fields filled; the rendezvous fields are set here).
func NewRdzvState(self string, meta NodeMeta, min, max int, lastCall time.Duration) *RdzvState {
	meta.Phase, meta.Round, meta.Prev, meta.Prop, meta.Err = PhaseWaiting, 0, -1, "", ""
	return &RdzvState{Min: min, Max: max, LastCall: lastCall, Self: self, meta: meta}
}

// Meta is what this host currently tells the others.
func (s *RdzvState) Meta() NodeMeta { return s.meta }

// Roster is the running (or last run) round's roster, nil before the first.
func (s *RdzvState) Roster() *Roster { return s.roster }

// Wait starts waiting for the next round (the same one if this host has not run it), offering
// port as master port should it get node rank 0.
func (s *RdzvState) Wait(port int) {
	if s.ran {
		s.meta.Round++
		s.ran = false
		// Prev changes only between rounds: peers still agreeing on the old round sort by it.
		s.meta.Prev = s.roster.NodeRank(s.Self)
	}
	s.meta.Phase, s.meta.Port, s.meta.Prop, s.meta.Size, s.meta.Err = PhaseWaiting, port, "", 0, ""
	s.quorumAt = time.Time{}
}

// Previous is the previous membership the split-brain rule compares a new round with; nil before
// this host has run or seen a round.
func (s *RdzvState) Previous() *Membership { return s.prev }

// observe learns the newest round that peers run (or ran) from their metadata, for a host that
// has not run it itself.
func (s *RdzvState) observe(members []Member) {
	for _, m := range members {
		mm := m.Meta
		if m.Name == s.Self || mm.Prop == "" || mm.Size < 1 ||
			(mm.Phase != PhaseRunning && mm.Phase != PhaseFailed && mm.Phase != PhaseDone) {
			continue
		}
		switch p := s.prev; {
		case p == nil || mm.Round > p.Round:
			s.prev = &Membership{Round: mm.Round, Hash: mm.Prop, Size: mm.Size, Hosts: map[string]bool{m.Name: true}, Seen: true}
			if (proposal{mm.Round, mm.Prop}) == s.proposed {
				s.prev.Hosts[s.Self] = true // the roster this host proposed, which peers agreed on first
			}
		case p.Seen && mm.Round == p.Round && mm.Prop == p.Hash:
			p.Hosts[m.Name] = true
		}
	}
}

// End records the end of the running round: done when err is nil, failed with err's text.
func (s *RdzvState) End(err error) {
	if s.meta.Phase != PhaseRunning {
		return
	}
	if err == nil {
		s.meta.Phase = PhaseDone
		return
	}
	s.meta.Phase, s.meta.Err = PhaseFailed, metaText(err.Error(), 160)
}

// metaText makes msg safe for metadata that must stay small: printable ASCII without the
// characters JSON escapes into several bytes (", \, <, >, &), at most n bytes.
func metaText(msg string, n int) string {
	b := []byte(msg)
	for i, c := range b {
		if c < ' ' || c > '~' || strings.IndexByte(`"\<>&`, c) >= 0 {
			b[i] = '?'
		}
	}
	if len(b) > n {
		b = append(b[:n-3], "..."...)
	}
	return string(b)
}

// Leave marks this host as leaving cleanly, unless its job is done (a done host just goes).
func (s *RdzvState) Leave() {
	if s.meta.Phase != PhaseDone {
		s.meta.Phase = PhaseLeaving
	}
}

// Step applies the rule to members (the live hosts, this one included or not: its entry is
// always this state's Meta) at time now. It returns the roster once the round is agreed (and
// this host is then running), nil while waiting, or ErrJobFinished. Outside the waiting phases it
// does nothing.
func (s *RdzvState) Step(now time.Time, members []Member) (*Roster, error) {
	if s.meta.Phase != PhaseWaiting && s.meta.Phase != PhaseProposed {
		return nil, nil
	}
	all := make([]Member, 0, len(members)+1)
	all = append(all, Member{Name: s.Self, Meta: s.meta})
	for _, m := range members {
		if m.Name != s.Self {
			all = append(all, m)
		}
	}
	s.observe(members)
	// 1 and 2: a finished job; a later round.
	for _, m := range all[1:] {
		if m.Meta.Phase == PhaseDone && m.Meta.Round >= s.meta.Round {
			return nil, &ErrJobFinished{By: m.Name}
		}
	}
	for _, m := range all[1:] {
		if (m.Meta.Phase == PhaseWaiting || m.Meta.Phase == PhaseProposed) && m.Meta.Round > s.meta.Round {
			s.meta.Round, s.meta.Phase, s.meta.Prop = m.Meta.Round, PhaseWaiting, ""
			s.quorumAt = time.Time{}
		}
	}
	all[0].Meta = s.meta
	r := s.meta.Round
	// The split-brain rule, early: when the live hosts hold no strict majority of the previous
	// membership, no roster can; stop now rather than wait for hosts that are gone.
	if p := s.prev; p != nil && !s.AllowMinority && 2*p.Kept(all) <= p.Size {
		return nil, splitBrain(r, all, p)
	}
	// 3 and 4: everyone at round r; Min of them, then Max or the last call.
	ready := make([]Member, 0, len(all))
	for _, m := range all {
		switch m.Meta.Phase {
		case PhaseWaiting, PhaseProposed, PhaseRunning:
			if m.Meta.Round == r {
				ready = append(ready, m)
				continue
			}
		}
		return nil, s.unready()
	}
	if len(ready) < s.Min {
		return nil, s.unready()
	}
	if s.quorumAt.IsZero() {
		s.quorumAt = now
	}
	if len(ready) < s.Max && now.Sub(s.quorumAt) < s.LastCall {
		return nil, nil
	}
	// 5: the roster, and our proposal; the split-brain rule.
	ro := makeRoster(r, ready, s.Max)
	if p := s.prev; p != nil && !s.AllowMinority && !p.Majority(ro) {
		return nil, splitBrain(r, ro.Hosts, p)
	}
	if ro.NodeRank(s.Self) < 0 {
		s.meta.Phase, s.meta.Prop = PhaseWaiting, "" // a spare
		return nil, nil
	}
	s.meta.Phase, s.meta.Prop = PhaseProposed, ro.Hash
	s.proposed = proposal{round: r, hash: ro.Hash}
	// 6: agreement.
	for _, h := range ro.Hosts {
		if h.Name == s.Self {
			continue
		}
		m := h.Meta
		if m.Round != r || m.Prop != ro.Hash || (m.Phase != PhaseProposed && m.Phase != PhaseRunning) {
			return nil, nil
		}
	}
	s.meta.Phase, s.meta.Size = PhaseRunning, len(ro.Hosts)
	s.ran = true
	s.roster = ro
	s.prev = &Membership{Round: r, Hash: ro.Hash, Size: len(ro.Hosts), Hosts: map[string]bool{}}
	for _, h := range ro.Hosts {
		s.prev.Hosts[h.Name] = true
	}
	return ro, nil
}

func (s *RdzvState) unready() error {
	s.quorumAt = time.Time{}
	if s.meta.Phase == PhaseProposed {
		s.meta.Phase, s.meta.Prop = PhaseWaiting, ""
	}
	return nil
}

// PeerChanged checks a peer's new metadata against the running round: an error when it breaks
// the round (it failed the round, or moved on to a later one), nil otherwise.
func (s *RdzvState) PeerChanged(m Member) error {
	ro := s.roster
	if s.meta.Phase != PhaseRunning || ro == nil || ro.NodeRank(m.Name) < 0 {
		return nil
	}
	switch {
	case m.Meta.Phase == PhaseLeaving:
		return &HostLostError{Host: ro.Describe(m.Name), Left: true}
	case m.Meta.Round > ro.Round:
		return &PeerFailedError{Host: ro.Describe(m.Name), Round: ro.Round, Reason: "it moved on to round " + strconv.Itoa(m.Meta.Round)}
	case m.Meta.Round == ro.Round && m.Meta.Phase == PhaseFailed:
		return &PeerFailedError{Host: ro.Describe(m.Name), Round: ro.Round, Reason: m.Meta.Err}
	}
	return nil
}

// PeerGone checks a peer's departure against the running round: a *HostLostError when it is in
// the roster and had not finished the round cleanly, nil otherwise. left is a clean leave.
func (s *RdzvState) PeerGone(name string, last NodeMeta, left bool) error {
	ro := s.roster
	if ro == nil || ro.NodeRank(name) < 0 || s.meta.Round != ro.Round || !s.ran {
		return nil
	}
	if last.Phase == PhaseDone && last.Round == ro.Round {
		return nil // it finished; leaving is what it does next
	}
	return &HostLostError{Host: ro.Describe(name), Left: left || last.Phase == PhaseLeaving}
}

// makeRoster orders ready hosts, keeps the first max, and assigns node ranks.
func makeRoster(round int, ready []Member, max int) *Roster {
	hosts := assignRanks(ready, max)
	h := sha256.New()
	fmt.Fprintf(h, "round %d\n", round)
	for i, m := range hosts {
		fmt.Fprintf(h, "%d %s %s %d\n", i, m.Name, m.Meta.Addr, m.Meta.Port)
	}
	return &Roster{Round: round, Hosts: hosts, Hash: hex.EncodeToString(h.Sum(nil))[:16]}
}

// assignRanks is the stable node-rank order. Hosts are sorted by their wanted rank (--node-rank),
// then by their node rank in the last round they ran (so survivors keep their relative order
// across elastic restarts), then by name; the first max are kept. A host whose wanted rank is
// free and below the roster size gets exactly it; the others fill the free ranks in that order
// (so after a shrink, explicit ranks are compacted in order).
func assignRanks(ready []Member, max int) []Member {
	sorted := append([]Member(nil), ready...)
	key := func(v int) int {
		if v < 0 {
			return 1 << 30
		}
		return v
	}
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i].Meta, sorted[j].Meta
		if key(a.Want) != key(b.Want) {
			return key(a.Want) < key(b.Want)
		}
		if key(a.Prev) != key(b.Prev) {
			return key(a.Prev) < key(b.Prev)
		}
		return sorted[i].Name < sorted[j].Name
	})
	if max > 0 && len(sorted) > max {
		sorted = sorted[:max]
	}
	n := len(sorted)
	slots := make([]*Member, n)
	var rest []*Member
	for i := range sorted {
		m := &sorted[i]
		if w := m.Meta.Want; w >= 0 && w < n && slots[w] == nil {
			slots[w] = m
		} else {
			rest = append(rest, m)
		}
	}
	out := make([]Member, n)
	for i := range slots {
		if slots[i] == nil {
			slots[i], rest = rest[0], rest[1:]
		}
		out[i] = *slots[i]
	}
	return out
}
