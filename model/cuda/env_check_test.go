package cuda

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A mistyped switch fails in one line naming it; good values and unset pass.
func TestCheckEnv(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string // "" for no error
	}{
		{map[string]string{}, ""},
		{map[string]string{"GODDP_FLASH_DS": "0", "GODDP_LT_TUNE": "1", "GODDP_COLSUM_SPLIT": "4"}, ""},
		{map[string]string{"GODDP_FLASH_DS": "off"}, `GODDP_FLASH_DS="off": want 0 or 1`},
		{map[string]string{"GODDP_EMB_SORTED": "true"}, `GODDP_EMB_SORTED="true"`},
		{map[string]string{"GODDP_COLSUM_SPLIT": "0"}, `GODDP_COLSUM_SPLIT="0": want a whole number from 1 to 16`},
		{map[string]string{"GODDP_COLSUM_SPLIT": "17"}, `GODDP_COLSUM_SPLIT="17"`},
		{map[string]string{"GODDP_COLSUM_SPLIT": "two"}, `GODDP_COLSUM_SPLIT="two"`},
		{map[string]string{"GODDP_FLASH_WGMMA": "1"}, ""},
		{map[string]string{"GODDP_FLASH_WGMMA": "fwd, dq"}, ""},
		{map[string]string{"GODDP_FLASH_WGMMA": "fwd,bwd"}, `GODDP_FLASH_WGMMA="fwd,bwd": "bwd" is not a part`},
	} {
		err := checkEnv(func(k string) string { return c.env[k] })
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%v: %v; want one line with %q", c.env, err, c.want)
		}
	}
}

// Every GODDP_ variable the device's sources read is checked: a switch in envSwitches or one
// with its own grammar in envOwnGrammar, so a new knob cannot be left out of checkEnv.
func TestCheckEnv_coversEveryVariable(t *testing.T) {
	re := regexp.MustCompile(`Getenv\("(GODDP_[A-Z0-9_]+)"\)`)
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".go") || strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			seen++
			if !slices.Contains(envSwitches, m[1]) && !slices.Contains(envOwnGrammar, m[1]) {
				t.Errorf("%s reads %s, which checkEnv does not know: add it to envSwitches or envOwnGrammar", f.Name(), m[1])
			}
		}
	}
	if seen < 20 {
		t.Errorf("found %d reads of GODDP_ variables in the package's sources; expected the switches of env.go", seen)
	}
}

// GODDP_FLASH_WGMMA's parts: 1 all, a list some, 0 or unset none.
func TestParseFlashWGMMA(t *testing.T) {
	for v, want := range map[string]flashWGParts{"": {}, "0": {}, "1": {fwd: true, dkdv: true, dq: true}, "fwd": {fwd: true}, "fwdp,dq": {fwd: true, fwdp: true, dq: true}, "dkdv128": {dkdv: true, dkdv128: true}, "dkdv,dq": {dkdv: true, dq: true}} {
		if got, err := parseFlashWGMMA(v); err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", v, got, err, want)
		}
	}
	if _, err := parseFlashWGMMA("dq,"); err == nil {
		t.Error(`"dq," accepted`)
	}
}
