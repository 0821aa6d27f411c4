package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseStdSpec(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    []Std // For(0), For(1), For(2)
		wantErr string
	}{
		{in: "0", want: []Std{StdNone, StdNone, StdNone}},
		{in: "1", want: []Std{StdOut, StdOut, StdOut}},
		{in: "2", want: []Std{StdErr, StdErr, StdErr}},
		{in: "3", want: []Std{StdAll, StdAll, StdAll}},
		{in: "0:3,1:0", want: []Std{StdAll, StdNone, StdNone}}, // local rank 2 not named: none
		{in: "1:1,2:2", want: []Std{StdNone, StdOut, StdErr}},
		{in: " 2:3 ", want: []Std{StdNone, StdNone, StdAll}},
		{in: "4", wantErr: "want 0 (none)"},
		{in: "", wantErr: "want 0"},
		{in: "0:4", wantErr: "LOCAL_RANK:N"},
		{in: "0:1,", wantErr: "want 0"},
		{in: "a:1", wantErr: "want 0"},
		{in: "0:1,0:2", wantErr: "local rank 0 given twice"},
		{in: "-1:1", wantErr: "want 0"},
	} {
		sp, err := ParseStdSpec("--tee", tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--tee") {
				t.Errorf("%q: error %v, want one naming --tee with %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		for lr, w := range tt.want {
			if got := sp.For(lr); got != w {
				t.Errorf("%q: local rank %d: %d, want %d", tt.in, lr, got, w)
			}
		}
	}
	if sp, _ := ParseStdSpec("-r", "0:0,1:0"); !sp.IsZero() {
		t.Errorf("0:0,1:0 is not zero")
	}
	if sp, _ := ParseStdSpec("-r", "1:2"); sp.IsZero() || sp.Check("--redirects", 2) != nil || sp.Check("--redirects", 1) == nil {
		t.Errorf("1:2: IsZero %v, Check(2) %v, Check(1) %v", sp.IsZero(), sp.Check("--redirects", 2), sp.Check("--redirects", 1))
	}
}

// torchrun's rule: a redirected stream leaves the console unless it is also tee'd.
func TestToConsole(t *testing.T) {
	parse := func(s string) StdSpec { sp, _ := ParseStdSpec("x", s); return sp }
	for _, tt := range []struct {
		redirects, tee string
		lr             int
		out, err       bool
	}{
		{"0", "0", 0, true, true},
		{"3", "0", 0, false, false},
		{"1", "0", 0, false, true},
		{"2", "0", 0, true, false},
		{"3", "1", 0, true, false},
		{"0:3", "0", 1, true, true},
		{"0:3,1:2", "1:2", 1, true, true},
		{"0", "3", 0, true, true},
	} {
		r, te := parse(tt.redirects), parse(tt.tee)
		if o, e := ToConsole(r, te, tt.lr, Stdout), ToConsole(r, te, tt.lr, Stderr); o != tt.out || e != tt.err {
			t.Errorf("-r %s -t %s, local rank %d: console stdout %v stderr %v, want %v %v", tt.redirects, tt.tee, tt.lr, o, e, tt.out, tt.err)
		}
	}
}

func TestLogLayout(t *testing.T) {
	base := filepath.Join(t.TempDir(), "logs")
	a, err := NewLogLayout(base, "slurm-12/3")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewLogLayout(base, "slurm-12/3")
	if err != nil {
		t.Fatal(err)
	}
	if a.Dir == b.Dir || filepath.Dir(a.Dir) != base || !strings.HasPrefix(filepath.Base(a.Dir), "slurm-12_3_") {
		t.Errorf("run dirs %s, %s: want two fresh LOG_DIR/RUN_ID_x", a.Dir, b.Dir)
	}
	if got, want := a.StdoutPath(2, 1), filepath.Join(a.Dir, "attempt_2", "1", "stdout.log"); got != want {
		t.Errorf("StdoutPath %s, want %s", got, want)
	}
	if got, want := a.ErrorFile(0, 3), filepath.Join(a.Dir, "attempt_0", "3", "error.json"); got != want {
		t.Errorf("ErrorFile %s, want %s", got, want)
	}
	l, err := a.openRankLogs(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	o := &RankOutput{Rank: 4, OutLog: l.out, ErrLog: l.err}
	o.Line(Stdout, []byte("to out"))
	o.Line(Stderr, []byte("to err"))
	l.close()
	for p, want := range map[string]string{a.StdoutPath(1, 0): "to out\n", a.StderrPath(1, 0): "to err\n"} {
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Errorf("%s: %q %v, want %q", p, got, err, want)
		}
	}
}

func TestReadErrorFile(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ doc, want string }{
		{`{"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "...", "timestamp": "1"}}}`, "RuntimeError: boom"},
		{`{"message": "ValueError: flat"}`, "ValueError: flat"},
		{`{"other": 1}`, ""},
		{`not json`, ""},
	} {
		p := filepath.Join(dir, "error.json")
		os.WriteFile(p, []byte(tt.doc), 0o644)
		if got := ReadErrorFile(p); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.doc, got, tt.want)
		}
	}
	if got := ReadErrorFile(filepath.Join(dir, "missing.json")); got != "" {
		t.Errorf("missing file: %q", got)
	}
}
