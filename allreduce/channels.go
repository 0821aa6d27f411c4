package allreduce

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"strconv"
)

// OpenChannels joins n − 1 extra process groups over main's ranks, each configured like base (the
// configuration main was made from) but for its rendezvous address. The DDP engine deals gradient
// buckets over them (ddp.channels); `ddpbench allreduce --channels` splits one buffer over them.
// Rank 0 picks a free port on its host for each (it serves their rendezvous, as it does the main
// group's at base.MasterAddr) and broadcasts them over the main group; every rank then joins them.
// The caller closes the groups.
func OpenChannels(ctx context.Context, main *Group, base Config, n int) ([]*Group, error) {
	if n <= 1 || main.Size() == 1 {
		return nil, nil
	}
	log := base.Logger
	if log == nil {
		log = slog.Default()
	}
	host, _, err := net.SplitHostPort(base.MasterAddr)
	if err != nil {
		return nil, fmt.Errorf("allreduce: channels: MASTER_ADDR %q: %w", base.MasterAddr, err)
	}
	ports := make([]byte, 4*(n-1))
	if main.Rank() == 0 {
		for i := 0; i < n-1; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
			if err != nil {
				return nil, fmt.Errorf("allreduce: channels: finding a free port on %s: %w", host, err)
			}
			binary.LittleEndian.PutUint32(ports[4*i:], uint32(l.Addr().(*net.TCPAddr).Port))
			l.Close()
		}
	}
	if err := main.Broadcast(ctx, ports, 0); err != nil {
		return nil, fmt.Errorf("allreduce: channels: sharing the channels' ports: %w", err)
	}
	var gs []*Group
	for i := 0; i < n-1; i++ {
		cfg := base
		cfg.MasterAddr = net.JoinHostPort(host, strconv.Itoa(int(binary.LittleEndian.Uint32(ports[4*i:]))))
		cfg.Logger = log.With("channel", i+1)
		g, err := NewGroup(ctx, cfg)
		if err != nil {
			for _, g := range gs {
				g.Close()
			}
			return nil, fmt.Errorf("allreduce: joining channel %d: %w", i+1, err)
		}
		gs = append(gs, g)
	}
	return gs, nil
}
