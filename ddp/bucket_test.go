package ddp

import (
	"reflect"
	"testing"
)

func TestPlanBuckets(t *testing.T) {
	cases := []struct {
		sizes []int
		cap   int // bytes
		want  [][2]int
	}{
		{[]int{10, 10, 10}, 1 << 20, [][2]int{{0, 2}}},
		{[]int{10, 10, 10}, 80, [][2]int{{1, 2}, {0, 0}}},
		{[]int{10, 100, 10}, 80, [][2]int{{2, 2}, {1, 1}, {0, 0}}}, // the big one alone
		{[]int{5, 5, 5, 5}, 40, [][2]int{{2, 3}, {0, 1}}},
		{[]int{7}, 4, [][2]int{{0, 0}}},
		{nil, 100, nil},
	}
	for _, c := range cases {
		got := planBuckets(c.sizes, c.cap)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("planBuckets(%v, %d) = %v, want %v", c.sizes, c.cap, got, c.want)
		}
	}
}
