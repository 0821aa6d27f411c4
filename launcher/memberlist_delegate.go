package launcher

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/hashicorp/memberlist"
)

// The delegates that connect a memberlist.Memberlist to MemberlistRendezvous. memberlist calls
// them from its own goroutines: they take the rendezvous' mutex briefly, never call back into
// memberlist, and never block.

// metaDelegate is memberlist.Delegate: it hands out this host's NodeMeta. Nothing else is gossiped.
type metaDelegate struct{ r *MemberlistRendezvous }

var _ memberlist.Delegate = metaDelegate{}

func (d metaDelegate) NodeMeta(limit int) []byte {
	b := d.r.currentMeta().encode()
	if len(b) > limit {
		panic(fmt.Sprintf("launcher: node metadata is %d bytes, over memberlist's %d", len(b), limit))
	}
	return b
}
func (metaDelegate) NotifyMsg([]byte)                           {}
func (metaDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (metaDelegate) LocalState(join bool) []byte                { return nil }
func (metaDelegate) MergeRemoteState(buf []byte, join bool)     {}

// MemberEventKind is what happened to a host.
type MemberEventKind int

const (
	MemberJoined  MemberEventKind = iota // a host joined (or this one saw it for the first time)
	MemberUpdated                        // a host's metadata changed
	MemberDead                           // the failure detector declared it dead
	MemberLeft                           // it left cleanly
)

// MemberEvent is one change of membership, as clusterEvents turns memberlist's callbacks into.
type MemberEvent struct {
	Kind MemberEventKind
	Name string
	Meta NodeMeta // the latest metadata (for Dead/Left: the last known)
	Err  error    // unreadable metadata
}

// clusterEvents is the memberlist.EventDelegate adapter: each callback becomes a MemberEvent handed
// to fn. memberlist never calls an EventDelegate concurrently, so fn sees events in order.
type clusterEvents struct{ fn func(MemberEvent) }

var _ memberlist.EventDelegate = clusterEvents{}

func (c clusterEvents) NotifyJoin(n *memberlist.Node)   { c.emit(MemberJoined, n) }
func (c clusterEvents) NotifyUpdate(n *memberlist.Node) { c.emit(MemberUpdated, n) }
func (c clusterEvents) NotifyLeave(n *memberlist.Node) {
	if n.State == memberlist.StateLeft {
		c.emit(MemberLeft, n)
	} else {
		c.emit(MemberDead, n)
	}
}

func (c clusterEvents) emit(k MemberEventKind, n *memberlist.Node) {
	m, err := decodeMeta(n.Meta)
	c.fn(MemberEvent{Kind: k, Name: n.Name, Meta: m, Err: err})
}

// admission is memberlist's MergeDelegate and AliveDelegate: it refuses hosts that cannot be in
// this job (Compatible) and hosts that want a node rank another host already has. A refused
// join fails on both sides: the joining host refuses the cluster's state in its own NotifyMerge
// and the cluster's host refuses the joiner's, each logging why.
type admission struct{ r *MemberlistRendezvous }

var (
	_ memberlist.MergeDelegate = admission{}
	_ memberlist.AliveDelegate = admission{}
)

func (a admission) NotifyMerge(peers []*memberlist.Node) error {
	wants := map[int]string{}
	for _, p := range peers {
		if p.Name == a.r.name {
			continue
		}
		if err := a.r.admit(p.Name, p.Meta, wants); err != nil {
			return err
		}
	}
	return nil
}

func (a admission) NotifyAlive(p *memberlist.Node) error {
	if p.Name == a.r.name {
		return nil
	}
	return a.r.admit(p.Name, p.Meta, map[int]string{})
}

// slogWriter turns memberlist's log lines ("[ERR] memberlist: ...") into slog records; DEBUG
// lines are dropped. Lines about keys get a hint, since a wrong key is the usual cause.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		lvl := slog.LevelInfo
		switch {
		case strings.HasPrefix(line, "[DEBUG]"):
			continue
		case strings.HasPrefix(line, "[ERR]"):
			lvl = slog.LevelError
		case strings.HasPrefix(line, "[WARN]"):
			lvl = slog.LevelWarn
		}
		if i := strings.Index(line, "] "); i >= 0 && strings.HasPrefix(line, "[") {
			line = line[i+2:]
		}
		if strings.Contains(line, "decrypt") || strings.Contains(line, "ncrypt") {
			line += " (refused: the peer has a different or no cluster key)"
			lvl = slog.LevelError
		}
		w.log.Log(context.Background(), lvl, "ddplaunch: gossip: "+line)
	}
	return len(p), nil
}
