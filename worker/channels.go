package worker

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/ddp"
)

// openChannels joins ddp.channels − 1 extra process groups over the same ranks, for the DDP engine
// to deal gradient buckets over (ddp.Options.Channels). Rank 0 picks a free port on its host for
// each (it serves their rendezvous, as it does the main group's at MASTER_PORT) and broadcasts
// them over the main group; every rank then joins them. The caller closes the groups.
func openChannels(ctx context.Context, main *allreduce.Group, n int, log *slog.Logger) ([]*allreduce.Group, error) {
	if n <= 1 || main.Size() == 1 {
		return nil, nil
	}
	base, err := allreduce.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(base.MasterAddr)
	if err != nil {
		return nil, fmt.Errorf("worker: ddp.channels: MASTER_ADDR %q: %w", base.MasterAddr, err)
	}
	ports := make([]byte, 4*(n-1))
	if main.Rank() == 0 {
		for i := 0; i < n-1; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
			if err != nil {
				return nil, fmt.Errorf("worker: ddp.channels: finding a free port on %s: %w", host, err)
			}
			binary.LittleEndian.PutUint32(ports[4*i:], uint32(l.Addr().(*net.TCPAddr).Port))
			l.Close()
		}
	}
	if err := main.Broadcast(ctx, ports, 0); err != nil {
		return nil, fmt.Errorf("worker: ddp.channels: sharing the channels' ports: %w", err)
	}
	var gs []*allreduce.Group
	for i := 0; i < n-1; i++ {
		cfg := base
		cfg.MasterAddr = net.JoinHostPort(host, strconv.Itoa(int(binary.LittleEndian.Uint32(ports[4*i:]))))
		cfg.Logger = log.With("channel", i+1)
		g, err := allreduce.NewGroup(ctx, cfg)
		if err != nil {
			for _, g := range gs {
				g.Close()
			}
			return nil, fmt.Errorf("worker: joining ddp channel %d: %w", i+1, err)
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// asComms is gs as the engine's Comm interface.
func asComms(gs []*allreduce.Group) []ddp.Comm {
	out := make([]ddp.Comm, len(gs))
	for i, g := range gs {
		out[i] = g
	}
	return out
}
