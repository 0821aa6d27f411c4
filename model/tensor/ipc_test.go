package tensor

import (
	"strings"
	"testing"
)

func TestIPCPlan_check(t *testing.T) {
	good := IPCPlan{Rank: 1, Size: 3, Segments: [][2]int{{4, 7}, {7, 10}, {0, 4}}, Order: []int{2, 0, 1}}
	if err := good.Check(10); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    IPCPlan
		n    int
		want string
	}{
		{IPCPlan{Rank: 3, Size: 3}, 10, "rank 3 of 3"},
		{IPCPlan{Rank: 0, Size: 2, Segments: [][2]int{{0, 5}}, Order: []int{0, 1}}, 10, "1 segments"},
		{IPCPlan{Rank: 0, Size: 2, Segments: [][2]int{{0, 6}, {5, 10}}, Order: []int{0, 1}}, 10, "overlap"},
		{IPCPlan{Rank: 0, Size: 2, Segments: [][2]int{{0, 4}, {5, 10}}, Order: []int{0, 1}}, 10, "cover 9 of 10"},
		{IPCPlan{Rank: 0, Size: 2, Segments: [][2]int{{0, 5}, {5, 11}}, Order: []int{0, 1}}, 10, "outside"},
		{IPCPlan{Rank: 0, Size: 2, Segments: [][2]int{{0, 5}, {5, 10}}, Order: []int{1, 1}}, 10, "each rank once"},
	} {
		if err := c.p.Check(c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
}
