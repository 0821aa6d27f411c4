package cuda

import "testing"

// ipcStalledPeer names the peer furthest behind this rank's own last meeting, and nobody when
// no peer is behind.
func TestIPCStalledPeer(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags [3][]uint32
		rank  int
		want  int
	}{
		{"nobody started", [3][]uint32{{0, 0}, {0, 0}, {0, 0}}, 0, -1},
		{"peer never arrived", [3][]uint32{{1, 0}, {0, 0}, {0, 0}}, 0, 1},
		{"all met, waiting on nobody", [3][]uint32{{4, 4, 4}, {4, 4, 4}, {4, 4, 4}}, 1, -1},
		// rank 0 is at meeting 1 of launch 7; rank 2 at meeting 0 of 7; rank 1 stopped after launch 6
		{"furthest behind", [3][]uint32{{7, 6, 7}, {7, 6, 6}, {6, 6, 6}}, 0, 1},
		// the same phase and launch for two laggards: the lower rank
		{"tie", [3][]uint32{{5, 5, 5, 5}, {5, 4, 5, 4}, {4, 4, 4, 4}}, 2, 1},
		// a later launch at an earlier phase is further on than an earlier launch's last phase
		{"launch before phase", [3][]uint32{{9, 8}, {8, 8}, {8, 8}}, 0, 1},
		{"peer ahead is not stalled", [3][]uint32{{9, 9}, {8, 9}, {8, 8}}, 0, -1},
		{"one rank", [3][]uint32{{3}, {3}, {3}}, 0, -1},
	} {
		if got := ipcStalledPeer(c.flags, c.rank); got != c.want {
			t.Errorf("%s: stalled peer %d, want %d", c.name, got, c.want)
		}
	}
}
