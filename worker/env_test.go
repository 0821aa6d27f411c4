package worker

import (
	"strings"
	"testing"
)

// EnvFromOS reads the launcher's variables and refuses, in one line naming the variable, a
// malformed one and a developer switch that is neither 0 nor 1 (the trainer's and the CPU
// device's; read as "0"/"1" tests, a typo would pass for the default).
func TestEnvFromOS(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string // "" for no error
	}{
		{map[string]string{"RANK": "1", "WORLD_SIZE": "2", "GODDP_STEP_END_WAIT": "1", "GODDP_UNSCALE_FOLD": "0"}, ""},
		{map[string]string{"RANK": "x"}, `RANK="x" is not an integer`},
		{map[string]string{"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is outside WORLD_SIZE=2"},
		{map[string]string{"GODDP_STEP_END_WAIT": "yes"}, `worker: GODDP_STEP_END_WAIT="yes": want 0 or 1`},
		{map[string]string{"GODDP_BIAS_FOLD": "off"}, `cpu: GODDP_BIAS_FOLD="off": want 0 or 1`},
	} {
		for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GODDP_STEP_END_WAIT", "GODDP_UNSCALE_FOLD", "GODDP_BIAS_FOLD"} {
			t.Setenv(k, c.env[k])
		}
		e, err := EnvFromOS()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.want == "" && (e.Rank != 1 || e.WorldSize != 2):
			t.Errorf("%v: rank %d of %d", c.env, e.Rank, e.WorldSize)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%v: %v; want one line with %q", c.env, err, c.want)
		}
	}
}
