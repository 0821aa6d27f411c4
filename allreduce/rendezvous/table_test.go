package rendezvous

import (
	"errors"
	"slices"
	"testing"
)

// The table fills in any order, reports who is missing, and answers every rank's address; the
// tcp kind's also every data-plane address, on the host each rank was recorded at.
func TestRdvTable_joinsInAnyOrder(t *testing.T) {
	for _, order := range [][]int{{1, 2, 3}, {3, 1, 2}, {2, 3, 1}} {
		tab := newTable(4, "10.0.0.1:29500", 0)
		if tab.complete() || !slices.Equal(tab.missing(), []int{1, 2, 3}) {
			t.Fatalf("fresh table: complete %v, missing %v", tab.complete(), tab.missing())
		}
		for i, r := range order {
			if _, err := tab.join(r, joinRequest{Rank: r, World: 4, Addr: "10.0.0." + string(rune('1'+r)) + ":7000"}, ""); err != nil {
				t.Fatalf("order %v: rank %d: %v", order, r, err)
			}
			if got := tab.complete(); got != (i == len(order)-1) {
				t.Fatalf("order %v after rank %d: complete %v", order, r, got)
			}
		}
		a := tab.answer()
		want := []string{"10.0.0.1:29500", "10.0.0.2:7000", "10.0.0.3:7000", "10.0.0.4:7000"}
		if !slices.Equal(a.Addrs, want) || a.Data != nil {
			t.Fatalf("order %v: answer %+v, want %v and no data addresses", order, a, want)
		}
	}
	tab := newTable(3, "127.0.0.1:29500", 41000)
	for r := 1; r < 3; r++ {
		if _, err := tab.join(r, joinRequest{Rank: r, World: 3, Addr: "127.0.0.1:0", DataPort: 41000 + r}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if d := tab.answer().Data; !slices.Equal(d, []string{"127.0.0.1:41000", "127.0.0.1:41001", "127.0.0.1:41002"}) {
		t.Fatalf("data addresses %v", d)
	}
	// A world of one is complete from the start.
	if !newTable(1, "x:1", 0).complete() {
		t.Fatal("a world of one waits for somebody")
	}
}

// An unspecified host becomes the one the request came from; a known host stays.
func TestRdvTable_unspecifiedHost(t *testing.T) {
	tab := newTable(4, "10.0.0.1:29500", 0)
	for _, tc := range []struct {
		rank       int
		addr, seen string
		want       string
	}{
		{1, "0.0.0.0:7001", "10.0.0.7", "10.0.0.7:7001"},
		{2, "[::]:7002", "fd00::2", "[fd00::2]:7002"},
		{3, ":7003", "", ":7003"}, // nothing seen (a Unix-socket caller): as sent
	} {
		got, err := tab.join(tc.rank, joinRequest{Rank: tc.rank, World: 4, Addr: tc.addr}, tc.seen)
		if err != nil || got != tc.want {
			t.Errorf("rank %d at %q seen from %q: %q, %v; want %q", tc.rank, tc.addr, tc.seen, got, err, tc.want)
		}
	}
}

// Refusals: another world, rank 0 or out of range, a rank claimed by a connection of another
// rank, another transport kind (either way), a bad address, a second join from elsewhere. A
// retried join from the same address is fine. A refused join leaves the table as it was.
func TestRdvTable_refusals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dataPort int // rank 0's
		from     int
		req      joinRequest
		want     error
	}{
		{"other world", 0, 1, joinRequest{Rank: 1, World: 5, Addr: "h:1"}, errJoinInvalid},
		{"rank 0", 0, 0, joinRequest{Rank: 0, World: 3, Addr: "h:1"}, errJoinInvalid},
		{"rank out of range", 0, 3, joinRequest{Rank: 3, World: 3, Addr: "h:1"}, errJoinInvalid},
		{"negative rank", 0, -1, joinRequest{Rank: -1, World: 3, Addr: "h:1"}, errJoinInvalid},
		{"joins for another rank", 0, 2, joinRequest{Rank: 1, World: 3, Addr: "h:1"}, errJoinInvalid},
		{"tcp joining grpc", 0, 1, joinRequest{Rank: 1, World: 3, Addr: "h:1", DataPort: 9}, errJoinKind},
		{"grpc joining tcp", 5000, 1, joinRequest{Rank: 1, World: 3, Addr: "h:1"}, errJoinKind},
		{"bad data port", 5000, 1, joinRequest{Rank: 1, World: 3, Addr: "h:1", DataPort: 70000}, errJoinInvalid},
		{"no port", 0, 1, joinRequest{Rank: 1, World: 3, Addr: "h"}, errJoinInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newTable(3, "h:0", tc.dataPort)
			if _, err := tab.join(tc.from, tc.req, "10.0.0.9"); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !slices.Equal(tab.missing(), []int{1, 2}) {
				t.Fatalf("a refused join changed the table: missing %v", tab.missing())
			}
		})
	}
	tab := newTable(3, "h:0", 0)
	req := joinRequest{Rank: 1, World: 3, Addr: "10.0.0.2:7000"}
	for i := range 2 {
		if _, err := tab.join(1, req, ""); err != nil {
			t.Fatalf("join %d from the same address: %v", i, err)
		}
	}
	req.Addr = "10.0.0.3:7000"
	if _, err := tab.join(1, req, ""); !errors.Is(err, errJoinTwice) {
		t.Fatalf("second join from elsewhere: %v, want %v", err, errJoinTwice)
	}
	if a := tab.answer().Addrs[1]; a != "10.0.0.2:7000" {
		t.Fatalf("rank 1 recorded at %q after the refused join", a)
	}
}
