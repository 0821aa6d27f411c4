package launcher

import (
	"encoding/json"
	"fmt"
)

// RendezvousProtocol is the version of the multi-host rendezvous: the metadata below and the rule
// in rendezvous_state.go. Hosts of different versions refuse each other. Bump it on any change a
// peer of the previous version would misread.
//
//	1: first version (goddp issue 7)
//	2: Size (the running round's host count) and the split-brain rule: a round goes on only with a
//	   strict majority of the previous round's hosts (issue 22); a v1 host would not apply it
const RendezvousProtocol = 2

// Phase is where a host stands in the rendezvous of a round. ONLY APPEND: peers read these words.
type Phase string

const (
	PhaseWaiting  Phase = "wait" // ready to rendezvous for Round
	PhaseProposed Phase = "prop" // proposes the roster whose hash is Prop for Round
	PhaseRunning  Phase = "run"  // its workers run Round with roster Prop
	PhaseFailed   Phase = "fail" // Round ended in failure (Err says why)
	PhaseDone     Phase = "done" // Round's workers all exited 0: the job is finished
	PhaseLeaving  Phase = "bye"  // leaving the cluster cleanly (SIGTERM, or no restart left)
)

// NodeMeta is what each launcher tells the cluster about itself, as memberlist node metadata
// (JSON with one-letter keys: it must fit memberlist.MetaMaxSize, 512 bytes). The first group is
// fixed for the life of the launcher and checked when a host joins; the second changes as the
// rendezvous goes on.
type NodeMeta struct {
	Job   string `json:"j"`           // --rdzv-id
	Proto int    `json:"v"`           // RendezvousProtocol
	Addr  string `json:"a"`           // IP (or name) its workers listen on; MASTER_ADDR when it is node rank 0
	NProc int    `json:"n"`           // --nproc-per-node
	GPUs  int    `json:"g"`           // GPUs it sees
	Hash  string `json:"h"`           // config and model hash (first 16 hex digits)
	Want  int    `json:"r"`           // --node-rank, or -1 for auto
	KeyID string `json:"x,omitempty"` // fingerprint of its cluster key ("" without one)

	Phase Phase  `json:"s"`
	Round int    `json:"k"`           // rendezvous round; attempts of the job, counted across hosts
	Port  int    `json:"p"`           // its master-port candidate for Round, used if it gets node rank 0
	Prev  int    `json:"o"`           // its node rank in the round before Round (set on Wait), -1 before any
	Prop  string `json:"q,omitempty"` // hash of the roster it proposes or runs (PhaseProposed/Running)
	Size  int    `json:"z,omitempty"` // hosts in the roster of Round, once it runs it (Running/Failed/Done)
	Err   string `json:"e,omitempty"` // why Round failed (PhaseFailed), at most 160 bytes
}

func (m NodeMeta) encode() []byte {
	b, _ := json.Marshal(m) // plain struct: never fails
	return b
}

func decodeMeta(b []byte) (NodeMeta, error) {
	var m NodeMeta
	if len(b) == 0 {
		return m, fmt.Errorf("no goddp metadata (not a ddplaunch host?)")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("unreadable goddp metadata: %v", err)
	}
	return m, nil
}

// Compatible says why a host with metadata peer cannot be in the same job as a host with
// metadata m, or "" when it can. Both sides run it on each other, so both say why.
func (m NodeMeta) Compatible(peer NodeMeta) string {
	switch {
	case peer.Proto != m.Proto:
		return fmt.Sprintf("rendezvous protocol %d, ours is %d", peer.Proto, m.Proto)
	case peer.Job != m.Job:
		return fmt.Sprintf("job id (--rdzv-id) %q, ours is %q", peer.Job, m.Job)
	case peer.Hash != m.Hash:
		return fmt.Sprintf("config/model hash %s, ours is %s (different config, --set or model shape)", peer.Hash, m.Hash)
	case peer.NProc != m.NProc:
		return fmt.Sprintf("--nproc-per-node %d, ours is %d", peer.NProc, m.NProc)
	}
	return ""
}
