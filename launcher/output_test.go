package launcher

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestPumpLines(t *testing.T) {
	long := strings.Repeat("x", MaxLine+10)
	in := "a\n\nb c\n" + long + "\nlast"
	var got []string
	pumpLines(strings.NewReader(in), func(l []byte) { got = append(got, string(l)) })
	want := []string{"a", "", "b c", long[:MaxLine], long[MaxLine:], "last"}
	if !slices.Equal(got, want) {
		t.Errorf("lines %d, want %d: first ones %q", len(got), len(want), got[:min(3, len(got))])
	}
}

func TestRankOutput(t *testing.T) {
	var so, se, lg bytes.Buffer
	stdout, stderr := &SyncWriter{W: &so}, &SyncWriter{W: &se}
	o := &RankOutput{Rank: 3, Stdout: stdout, Stderr: stderr, Log: &lg}
	o.Line(Stdout, []byte("hello"))
	o.Line(Stderr, []byte("oops"))
	if so.String() != "[rank 3] hello\n" || se.String() != "[rank 3] oops\n" || lg.String() != "hello\noops\n" {
		t.Errorf("stdout %q stderr %q log %q", so.String(), se.String(), lg.String())
	}
}

// Lines written concurrently by several ranks come out whole.
func TestRankOutput_noInterleaving(t *testing.T) {
	var buf bytes.Buffer
	w := &SyncWriter{W: &buf}
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		o := &RankOutput{Rank: r, Stdout: w, Stderr: w}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				o.Line(Stream(1+i%2), []byte(fmt.Sprintf("%d-%d-%s", r, i, strings.Repeat("z", 500))))
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	re := regexp.MustCompile(`^\[rank (\d)\] (\d)-\d+-z{500}$`)
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil || m[1] != m[2] {
			t.Fatalf("mangled line %.80q", l)
		}
	}
}

func TestTail(t *testing.T) {
	tl := newTail(3)
	for i := 0; i < 5; i++ {
		tl.add([]byte(fmt.Sprint(i)))
	}
	if got := tl.get(); !slices.Equal(got, []string{"2", "3", "4"}) {
		t.Errorf("tail %q", got)
	}
	tl = newTail(3)
	tl.add([]byte("a"))
	if got := tl.get(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("short tail %q", got)
	}
}
