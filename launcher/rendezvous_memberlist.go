package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemberlistConfig configures NewMemberlistRendezvous: one host of a multi-host job.
type MemberlistConfig struct {
	Job      string // --rdzv-id: hosts of other jobs are refused
	MinNodes int    // --nnodes MIN:MAX (MIN = MAX for a fixed size); MIN > MAX/2 unless AllowMinority
	MaxNodes int
	NodeRank int // --node-rank, or -1 for auto (the stable order)
	// AllowMinority (--allow-minority) turns off the split-brain rule: MIN may be ≤ MAX/2, and a
	// restart may go on with a minority of the previous round's hosts (see RdzvState).
	AllowMinority bool

	NProc      int    // workers on this host; every host must run the same number
	GPUs       int    // GPUs this host sees (informational)
	ConfigHash string // hash of the run's config and model shape; hosts must agree

	Bind      string   // gossip address, host:port; default 0.0.0.0:7946
	Advertise string   // IP other hosts reach this one (gossip and workers) at; default: guessed
	Join      []string // host[:port] of peers (DNS names may resolve to several); this host's own address is skipped
	Key       []byte   // cluster key (16/24/32 bytes) or nil: gossip in the clear, with a warning

	Cluster     ClusterConfig // failure detection; zero = DefaultLANClusterConfig
	RdzvTimeout time.Duration // how long a round may wait for its hosts; default 15 min
	LastCall    time.Duration // with MIN ≤ hosts < MAX, how long to wait for more; default 30 s
	MasterPort  int           // MASTER_PORT when this host is node rank 0; 0 = a free port per round

	Logger *slog.Logger // default slog.Default()
}

// DefaultGossipPort is the gossip port when --bind or a --join address gives none.
const DefaultGossipPort = 7946

// MaxJobID is the longest --rdzv-id: the job id travels in every host's metadata, which must fit
// memberlist's 512 bytes with everything else (TestNodeMeta_fits).
const MaxJobID = 96

// CheckJobID refuses a --rdzv-id that is empty, longer than MaxJobID, or has characters other than
// letters, digits and . _ - : @ / + = (a *ConfigError).
func CheckJobID(id string) error {
	ok := id != "" && len(id) <= MaxJobID
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._-:@/+=", c) >= 0) {
			ok = false
		}
	}
	if !ok {
		return &ConfigError{Err: fmt.Errorf("--rdzv-id %q: want 1 to %d letters, digits or . _ - : @ / + =", id, MaxJobID)}
	}
	return nil
}

// MemberlistRendezvous is the multi-host Rendezvous: this launcher is a memberlist member whose
// metadata (NodeMeta) says who it is and where it stands; RdzvState decides the rounds. It also
// implements AttemptReporter, LossExplainer and io.Closer (leave the cluster).
type MemberlistRendezvous struct {
	cfg  MemberlistConfig
	name string
	log  *slog.Logger
	ml   *memberlist.Memberlist

	mu       sync.Mutex
	core     *RdzvState
	members  map[string]NodeMeta // live hosts of the job, not this one
	refused  error               // this host was refused by the cluster (fatal)
	lost     chan error          // the running round's Lost; nil between rounds
	lostSent bool
	hostLost error // a roster host declared dead or gone during the running round
	wake     chan struct{}

	joinErr   error
	joining   bool // inside our own Join with no peer known yet
	stopJoin  chan struct{}
	joinDone  chan struct{}
	closeOnce sync.Once
}

var (
	_ Rendezvous      = (*MemberlistRendezvous)(nil)
	_ AttemptReporter = (*MemberlistRendezvous)(nil)
	_ LossExplainer   = (*MemberlistRendezvous)(nil)
)

// NewMemberlistRendezvous starts the gossip member (binding cfg.Bind) and begins joining cfg.Join
// in the background. Close leaves the cluster.
func NewMemberlistRendezvous(cfg MemberlistConfig) (*MemberlistRendezvous, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Cluster.ProbeInterval == 0 {
		cfg.Cluster = DefaultLANClusterConfig()
	}
	if cfg.RdzvTimeout <= 0 {
		cfg.RdzvTimeout = 15 * time.Minute
	}
	if cfg.LastCall <= 0 {
		cfg.LastCall = 30 * time.Second
	}
	if cfg.Bind == "" {
		cfg.Bind = "0.0.0.0:" + strconv.Itoa(DefaultGossipPort)
	}
	switch {
	case cfg.MinNodes < 1 || cfg.MaxNodes < cfg.MinNodes:
		return nil, fmt.Errorf("launcher: --nnodes %d:%d: want 1 ≤ MIN ≤ MAX", cfg.MinNodes, cfg.MaxNodes)
	case cfg.NodeRank >= cfg.MaxNodes:
		return nil, fmt.Errorf("launcher: --node-rank %d: want below --nnodes %d", cfg.NodeRank, cfg.MaxNodes)
	case cfg.NProc < 1:
		return nil, fmt.Errorf("launcher: nproc %d: want at least 1", cfg.NProc)
	}
	if err := CheckJobID(cfg.Job); err != nil {
		return nil, err
	}
	if err := CheckNNodes(cfg.MinNodes, cfg.MaxNodes, cfg.AllowMinority); err != nil {
		return nil, err
	}
	bindHost, bindPortS, err := net.SplitHostPort(ensurePort(cfg.Bind))
	if err != nil {
		return nil, fmt.Errorf("launcher: --bind %q: %w", cfg.Bind, err)
	}
	bindPort, err := strconv.Atoi(bindPortS)
	if err != nil {
		return nil, fmt.Errorf("launcher: --bind %q: bad port", cfg.Bind)
	}
	join, err := resolveJoin(cfg.Join)
	if err != nil {
		return nil, err
	}
	adv := cfg.Advertise
	if adv == "" {
		adv = guessAdvertise(bindHost, join)
	}
	self := net.JoinHostPort(adv, strconv.Itoa(bindPort))
	var peers []string
	for _, j := range join {
		if j != self && j != net.JoinHostPort(bindHost, strconv.Itoa(bindPort)) {
			peers = append(peers, j)
		}
	}
	host, _ := os.Hostname()
	r := &MemberlistRendezvous{
		cfg:      cfg,
		name:     fmt.Sprintf("%s@%s", host, self),
		members:  map[string]NodeMeta{},
		wake:     make(chan struct{}, 1),
		stopJoin: make(chan struct{}),
		joinDone: make(chan struct{}),
	}
	r.log = cfg.Logger.With("host", r.name)
	hash := cfg.ConfigHash
	if len(hash) > 16 {
		hash = hash[:16]
	}
	meta := NodeMeta{Job: cfg.Job, Proto: RendezvousProtocol, Addr: adv, NProc: cfg.NProc, GPUs: cfg.GPUs,
		Hash: hash, Want: cfg.NodeRank}
	if len(cfg.Key) > 0 {
		meta.KeyID = KeyID(cfg.Key)
	}
	r.core = NewRdzvState(r.name, meta, cfg.MinNodes, cfg.MaxNodes, cfg.LastCall)
	r.core.AllowMinority = cfg.AllowMinority

	mc := cfg.Cluster.memberlistConfig(slogWriter{log: r.log})
	mc.Name = r.name
	mc.BindAddr, mc.BindPort = bindHost, bindPort
	mc.AdvertiseAddr, mc.AdvertisePort = adv, bindPort
	mc.Delegate = metaDelegate{r}
	mc.Events = clusterEvents{fn: r.onEvent}
	mc.Merge = admission{r}
	mc.Alive = admission{r}
	if len(cfg.Key) > 0 {
		kr, err := memberlist.NewKeyring(nil, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("launcher: cluster key: %w", err)
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	} else if cfg.MaxNodes > 1 {
		r.log.Warn("ddplaunch: WARNING: NO CLUSTER KEY. Gossip is unencrypted and unauthenticated, and the workers' token " +
			"is derived from the job id alone: anyone on the network can join this job or read its traffic. " +
			"Set --cluster-key-file or $" + EnvClusterKey + " (e.g. `openssl rand -base64 32`) on every host.")
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("launcher: gossip on %s: %w", cfg.Bind, err)
	}
	r.ml = ml
	r.log.Info("ddplaunch: gossip member up", "bind", cfg.Bind, "advertise", self, "join", peers,
		"job", cfg.Job, "nnodes", fmt.Sprintf("%d:%d", cfg.MinNodes, cfg.MaxNodes), "key", KeyID(cfg.Key))
	go r.joinLoop(peers)
	return r, nil
}

// Name is this host's memberlist name, host@ip:port.
func (r *MemberlistRendezvous) Name() string { return r.name }

func (r *MemberlistRendezvous) currentMeta() NodeMeta {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.Meta()
}

// admit checks a peer's metadata for admission (under the mutex). wants collects the wanted node
// ranks of a merge batch, so duplicates inside it are caught too.
func (r *MemberlistRendezvous) admit(name string, raw []byte, wants map[int]string) error {
	m, err := decodeMeta(raw)
	r.mu.Lock()
	defer r.mu.Unlock()
	var why string
	switch {
	case err != nil:
		why = err.Error()
	default:
		why = r.core.Meta().Compatible(m)
	}
	if why == "" && m.Want >= 0 {
		if own := r.core.Meta().Want; own == m.Want {
			why = fmt.Sprintf("it wants node rank %d, which is ours (--node-rank)", m.Want)
		}
		for n, o := range r.members {
			if n != name && o.Want == m.Want {
				why = fmt.Sprintf("it wants node rank %d, which host %s already has", m.Want, n)
			}
		}
		if o, ok := wants[m.Want]; ok && o != name {
			why = fmt.Sprintf("it wants node rank %d, as does host %s", m.Want, o)
		}
		wants[m.Want] = name
	}
	if why == "" {
		return nil
	}
	err = fmt.Errorf("host %s refused: %s", name, why)
	r.log.Error("ddplaunch: rendezvous: refusing host "+name, "reason", why)
	if r.joining && len(r.members) == 0 {
		// We are the one joining (we know no one yet): this is fatal for us.
		r.refused = err
		r.signal()
	}
	return err
}

func (r *MemberlistRendezvous) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// onEvent is clusterEvents' callback: it keeps the member table and watches the running round.
func (r *MemberlistRendezvous) onEvent(ev MemberEvent) {
	if ev.Name == r.name {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.signal()
	switch ev.Kind {
	case MemberJoined, MemberUpdated:
		if ev.Err != nil {
			return
		}
		if ev.Kind == MemberJoined {
			r.log.Info("ddplaunch: rendezvous: host joined", "peer", ev.Name, "addr", ev.Meta.Addr)
		}
		r.members[ev.Name] = ev.Meta
		err := r.core.PeerChanged(Member{Name: ev.Name, Meta: ev.Meta})
		var hl *HostLostError
		if errors.As(err, &hl) && r.hostLost == nil {
			r.hostLost = err
		}
		r.lose(err)
	case MemberDead, MemberLeft:
		last, ok := r.members[ev.Name]
		if !ok {
			last = ev.Meta
		}
		delete(r.members, ev.Name)
		err := r.core.PeerGone(ev.Name, last, false)
		how := "declared dead"
		if last.Phase == PhaseLeaving || last.Phase == PhaseDone {
			how = "left"
		}
		r.log.Warn("ddplaunch: rendezvous: host "+how, "peer", ev.Name)
		if err != nil && r.hostLost == nil {
			r.hostLost = err
		}
		r.lose(err)
	}
}

// lose delivers err on the running round's Lost channel, once (under the mutex).
func (r *MemberlistRendezvous) lose(err error) {
	if err == nil || r.lost == nil || r.lostSent {
		return
	}
	r.lostSent = true
	r.lost <- err // buffered 1, sent once
}

func (r *MemberlistRendezvous) memberList() []Member {
	out := make([]Member, 0, len(r.members))
	for n, m := range r.members {
		out = append(out, Member{Name: n, Meta: m})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// joinLoop joins peers, retrying every second until one answers, we are refused, or Close.
func (r *MemberlistRendezvous) joinLoop(peers []string) {
	defer close(r.joinDone)
	if len(peers) == 0 {
		return // the seed: others join us
	}
	for {
		r.mu.Lock()
		r.joining = len(r.members) == 0
		r.mu.Unlock()
		n, err := r.ml.Join(peers)
		r.mu.Lock()
		r.joining = false
		refused := r.refused
		if n > 0 && refused == nil {
			r.joinErr = nil
			r.mu.Unlock()
			r.log.Info("ddplaunch: rendezvous: joined the cluster", "via", n)
			return
		}
		if err != nil {
			r.joinErr = err
			if e := err.Error(); n == 0 && (strings.Contains(e, "decrypt") || strings.Contains(e, "ncrypt")) {
				r.refused = fmt.Errorf("joining %v was refused: wrong or missing cluster key (%s): %v",
					peers, "ours is "+KeyID(r.cfg.Key), strings.Join(strings.Fields(e), " "))
				r.log.Error("ddplaunch: rendezvous: " + r.refused.Error())
				refused = r.refused
			}
		}
		r.mu.Unlock()
		r.signal()
		if refused != nil {
			return
		}
		select {
		case <-r.stopJoin:
			return
		case <-time.After(time.Second):
		}
	}
}

func (r *MemberlistRendezvous) publish() {
	if err := r.ml.UpdateNode(r.cfg.Cluster.TCPTimeout); err != nil {
		r.log.Debug("ddplaunch: rendezvous: metadata update", "err", err)
	}
}

// Next runs one round of the rendezvous (see RdzvState) and returns this host's assignment.
func (r *MemberlistRendezvous) Next(ctx context.Context, attempt int) (Assignment, error) {
	port := r.cfg.MasterPort
	if port == 0 {
		p, err := FreePort(r.currentMeta().Addr)
		if err != nil {
			return Assignment{}, fmt.Errorf("launcher: attempt %d: %w", attempt, err)
		}
		port = p
	}
	r.mu.Lock()
	r.core.Wait(port)
	r.lost, r.lostSent, r.hostLost = nil, false, nil
	round := r.core.Meta().Round
	r.mu.Unlock()
	r.publish()
	r.log.Info("ddplaunch: rendezvous: waiting for hosts", "round", round,
		"nnodes", fmt.Sprintf("%d:%d", r.cfg.MinNodes, r.cfg.MaxNodes))

	deadline := time.NewTimer(r.cfg.RdzvTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		before := r.core.Meta()
		ml := r.memberList()
		ro, err := r.core.Step(time.Now(), ml)
		view := fmt.Sprint(ml)
		after := r.core.Meta()
		refused, joinErr := r.refused, r.joinErr
		var lost chan error
		if ro != nil {
			lost = make(chan error, 1)
			r.lost = lost
		}
		r.mu.Unlock()
		if before != after {
			r.log.Debug("ddplaunch: rendezvous: step", "phase", after.Phase, "round", after.Round, "prop", after.Prop, "port", after.Port, "view", view)
			r.publish()
		}
		if err != nil {
			return Assignment{}, err
		}
		if refused != nil {
			return Assignment{}, fmt.Errorf("launcher: rendezvous: %w", refused)
		}
		if ro != nil {
			return r.assignment(ro, lost), nil
		}
		select {
		case <-ctx.Done():
			return Assignment{}, ctx.Err()
		case <-deadline.C:
			return Assignment{}, r.timeoutError(joinErr)
		case <-r.wake:
		case <-tick.C:
		}
	}
}

func (r *MemberlistRendezvous) assignment(ro *Roster, lost chan error) Assignment {
	rank := ro.NodeRank(r.name)
	addr, port := ro.Master()
	var hosts []string
	for i, h := range ro.Hosts {
		hosts = append(hosts, fmt.Sprintf("%d=%s", i, h.Name))
		if h.Meta.GPUs != ro.Hosts[0].Meta.GPUs {
			r.log.Warn("ddplaunch: rendezvous: hosts see different GPU counts", "host", h.Name, "gpus", h.Meta.GPUs)
		}
	}
	r.log.Info("ddplaunch: rendezvous complete", "round", ro.Round, "node_rank", rank, "nnodes", len(ro.Hosts),
		"hosts", strings.Join(hosts, " "), "master", net.JoinHostPort(addr, strconv.Itoa(port)))
	n := r.cfg.NProc
	return Assignment{
		NodeRank: rank, NNodes: len(ro.Hosts), RankOffset: rank * n, WorldSize: len(ro.Hosts) * n,
		MasterAddr: addr, MasterPort: port, Token: DeriveToken(r.cfg.Key, r.cfg.Job), Lost: lost,
	}
}

func (r *MemberlistRendezvous) timeoutError(joinErr error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var seen []string
	for _, m := range r.memberList() {
		seen = append(seen, fmt.Sprintf("%s (%s round %d %s)", m.Name, m.Meta.Phase, m.Meta.Round, m.Meta.Prop))
	}
	msg := fmt.Sprintf("launcher: rendezvous timed out after %v waiting for %d to %d hosts of job %q; this host sees %d other(s): %s",
		r.cfg.RdzvTimeout, r.cfg.MinNodes, r.cfg.MaxNodes, r.cfg.Job, len(seen), strings.Join(seen, ", "))
	if len(seen) == 0 && joinErr != nil {
		msg += fmt.Sprintf("; joining failed: %v (a wrong or missing cluster key on either side also looks like this)", joinErr)
	}
	return errors.New(msg)
}

// ReportEnd tells the other hosts how this host's round ended (AttemptReporter).
func (r *MemberlistRendezvous) ReportEnd(attempt int, err error) {
	r.mu.Lock()
	r.core.End(err)
	r.mu.Unlock()
	r.publish()
}

// ExplainFailure waits, after a failed round, for a host loss that explains it: it returns the
// *HostLostError of a roster host declared dead or gone, or nil once every other roster host has
// reported its own end of the round (so none was lost) or the detection bound has passed.
func (r *MemberlistRendezvous) ExplainFailure(ctx context.Context, attempt int) error {
	r.mu.Lock()
	ro := r.core.Roster()
	r.mu.Unlock()
	if ro == nil {
		return nil
	}
	bound := time.NewTimer(r.cfg.Cluster.DetectionBound(len(ro.Hosts)) + time.Second)
	defer bound.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		lost := r.hostLost
		ended := true
		for _, h := range ro.Hosts {
			if h.Name == r.name {
				continue
			}
			m, ok := r.members[h.Name]
			if !ok || (m.Round == ro.Round && (m.Phase == PhaseRunning || m.Phase == PhaseProposed)) {
				ended = false
			}
		}
		r.mu.Unlock()
		if lost != nil {
			return lost
		}
		if ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-bound.C:
			return nil
		case <-tick.C:
		case <-r.wake:
		}
	}
}

// Close leaves the cluster (the others learn it at once) and stops gossiping. Safe to call twice.
func (r *MemberlistRendezvous) Close() error {
	r.closeOnce.Do(func() {
		close(r.stopJoin)
		r.mu.Lock()
		r.core.Leave()
		r.mu.Unlock()
		r.publish() // the others learn "bye" before the leave, so they know it was clean
		if err := r.ml.Leave(r.cfg.Cluster.LeaveTimeout); err != nil {
			r.log.Debug("ddplaunch: rendezvous: leave", "err", err)
		}
		r.ml.Shutdown()
		<-r.joinDone
	})
	return nil
}

// ensurePort adds the default gossip port to an address without one.
func ensurePort(s string) string {
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s
	}
	return net.JoinHostPort(strings.Trim(s, "[]"), strconv.Itoa(DefaultGossipPort))
}

// resolveJoin turns --join entries into ip:port addresses: a DNS name resolving to several
// addresses (a Kubernetes headless service) gives all of them. Names that do not resolve yet
// (peers still starting) are kept as they are; memberlist resolves them again on each try.
func resolveJoin(join []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, j := range join {
		j = strings.TrimSpace(j)
		if j == "" {
			continue
		}
		host, port, err := net.SplitHostPort(ensurePort(j))
		if err != nil {
			return nil, fmt.Errorf("launcher: --join %q: %w", j, err)
		}
		if net.ParseIP(host) != nil {
			add(net.JoinHostPort(host, port))
			continue
		}
		ips, err := net.LookupHost(host)
		if err != nil || len(ips) == 0 {
			add(net.JoinHostPort(host, port))
			continue
		}
		sort.Strings(ips)
		for _, ip := range ips {
			add(net.JoinHostPort(ip, port))
		}
	}
	return out, nil
}

// guessAdvertise picks the IP other hosts reach this one at: the bind IP when one is given, else
// the local address of a route to the first join peer, else a non-loopback interface address.
func guessAdvertise(bindHost string, join []string) string {
	if ip := net.ParseIP(bindHost); ip != nil && !ip.IsUnspecified() {
		return bindHost
	}
	for _, j := range join {
		if c, err := net.Dial("udp", j); err == nil {
			a := c.LocalAddr().(*net.UDPAddr).IP
			c.Close()
			if !a.IsLoopback() {
				return a.String()
			}
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
