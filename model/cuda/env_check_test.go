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

// Unset GODDP_FLASH_WGMMA and GODDP_PDL mean the defaults: the Hopper attention's flashWGDefault on
// compute capability 9.0 with the fused attention loaded, PDL on 9.0 or later where
// cuLaunchKernelEx runs — both only under hopperDefault; 0 turns each off, a set value is taken
// as it is (New and loadFlash refuse one the device cannot run).
func TestHopperDefaults(t *testing.T) {
	def := map[bool]flashWGParts{true: flashWGDefault}[hopperDefault]
	for _, c := range []struct {
		v            string
		flash        bool
		major, minor int
		want         flashWGParts
	}{
		{"", true, 9, 0, def}, {"", false, 9, 0, flashWGParts{}}, {"", true, 8, 0, flashWGParts{}},
		{"", true, 8, 9, flashWGParts{}}, {"", true, 10, 0, flashWGParts{}}, {"0", true, 9, 0, flashWGParts{}},
		{"dq", true, 9, 0, flashWGParts{dq: true}}, {"1", true, 8, 0, flashWGParts{fwd: true, dkdv: true, dq: true}},
	} {
		if got := flashWGFor(c.v, c.flash, c.major, c.minor); got != c.want {
			t.Errorf("GODDP_FLASH_WGMMA=%q flash %v sm_%d%d: %+v, want %+v", c.v, c.flash, c.major, c.minor, got, c.want)
		}
	}
	if flashWGDefault != (flashWGParts{fwd: true, fwdp: true, dkdv: true, dq: true}) {
		t.Errorf("flashWGDefault %+v: session 25 measured fwdp,dkdv,dq fastest", flashWGDefault)
	}
	for _, c := range []struct {
		v         string
		major     int
		supported bool
		want      bool
	}{
		{"", 9, true, hopperDefault}, {"", 10, true, hopperDefault}, {"", 8, true, false}, {"", 9, false, false},
		{"0", 9, true, false}, {"1", 9, true, true}, {"1", 8, false, true},
	} {
		if got := pdlFor(c.v, c.major, c.supported); got != c.want {
			t.Errorf("GODDP_PDL=%q sm_%d0 supported %v: %v, want %v", c.v, c.major, c.supported, got, c.want)
		}
	}
}
