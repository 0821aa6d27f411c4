package observe

import "testing"

// Rank r of a host listens on the port plus its LOCAL_RANK; port 0 stays 0.
func TestPromAddr(t *testing.T) {
	for _, c := range []struct {
		listen string
		local  int
		want   string
	}{{":9100", 0, ":9100"}, {":9100", 3, ":9103"}, {"127.0.0.1:9100", 1, "127.0.0.1:9101"}, {"127.0.0.1:0", 5, "127.0.0.1:0"},
		{"[::1]:9000", 2, "[::1]:9002"}} {
		if got, err := promAddr(c.listen, c.local); err != nil || got != c.want {
			t.Errorf("promAddr(%q, %d) = %q, %v; want %q", c.listen, c.local, got, err, c.want)
		}
	}
	for _, bad := range []string{"9100", ":http", ":70000"} {
		if _, err := promAddr(bad, 0); err == nil {
			t.Errorf("promAddr(%q) accepted", bad)
		}
	}
	if _, err := promAddr(":65535", 1); err == nil {
		t.Error("port 65535 + LOCAL_RANK 1 accepted")
	}
}
