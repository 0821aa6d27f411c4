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

func TestSplitRange(t *testing.T) {
	cases := []struct {
		lo, hi, cap int
		want        [][2]int
	}{
		{0, 100, 100, [][2]int{{0, 100}}},
		{0, 100, 1000, [][2]int{{0, 100}}},
		{10, 1010, 500, [][2]int{{10, 522}, {522, 1010}}},                       // 2 pieces of ≤ 500 → 500 rounded up to 512, then the rest
		{0, 1000, 300, [][2]int{{0, 256}, {256, 512}, {512, 768}, {768, 1000}}}, // 4 parts of 250 → 256
		{0, 50, 10, [][2]int{{0, 50}}},                                          // a cap below 64 elements is not split
	}
	for _, c := range cases {
		got := splitRange(c.lo, c.hi, c.cap)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("splitRange(%d, %d, %d) = %v, want %v", c.lo, c.hi, c.cap, got, c.want)
		}
	}
}
