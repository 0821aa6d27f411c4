package cuda

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/goddp/goddp/model/tensor"
)

// env_check.go: the device's developer switches (env.go's list) checked once, when a device is
// made (New), so that a mistyped value fails in one line naming the variable instead of being read
// as the default (most switches test for "0" or "1" alone). The values with a grammar of their own
// (GODDP_FLASH_MINBLOCKS, GODDP_FLASH_CARVEOUT, GODDP_IPC_WAIT) are checked where they are read,
// also with one line naming the variable.

// envSwitches are the variables whose values are 0 or 1 (unset: the default env.go gives).
var envSwitches = []string{
	"GODDP_BGRAD_EPI", "GODDP_BIAS_EPILOGUE", "GODDP_BIAS_FOLD", "GODDP_BN_RELU", "GODDP_BN_SPLIT",
	"GODDP_BN_VEC", "GODDP_CLIP_FUSED", "GODDP_COLSUM_FUSED", "GODDP_COLSUM_VEC", "GODDP_CUDNN_GRAPH",
	"GODDP_CUDNN_TF32", "GODDP_EMB_SORTED", "GODDP_FLASH", "GODDP_FLASH_DELTA8", "GODDP_FLASH_DELTA_FOLD", "GODDP_FLASH_DQ_PAIR", "GODDP_FLASH_DS",
	"GODDP_FLASH_EX2", "GODDP_FLASH_MASK_SPLIT", "GODDP_FLASH_PACK2", "GODDP_FLASH_TILE_MAJOR", "GODDP_GELU_DB_FOLD",
	"GODDP_GELU_TANH_APPROX", "GODDP_LN_BWD_EARLY", "GODDP_LN_BWD_FUSED", "GODDP_LN_COLSUM", "GODDP_LN_VEC",
	"GODDP_LT_GEMM", "GODDP_LT_TUNE", "GODDP_PDL",
	"GODDP_RESNORM_FOLD", "GODDP_SGD_MULTI", "GODDP_UNSCALE_FOLD", "GODDP_XENT_EX2",
	"GODDP_XENT_FUSED", "GODDP_XENT_SMEM",
}

// envOwnGrammar are the device's other variables: checked where they are read.
var envOwnGrammar = []string{"GODDP_FLASH_MINBLOCKS", "GODDP_FLASH_WGMMA", "GODDP_FLASH_CARVEOUT", "GODDP_IPC_WAIT", "GODDP_COLSUM_SPLIT"}

// checkEnv returns an error naming the first of the device's variables whose value getenv gives
// is not one it takes: a switch not 0 or 1, GODDP_COLSUM_SPLIT not a whole number from 1 to 16.
func checkEnv(getenv func(string) string) error {
	if err := tensor.CheckSwitches(getenv, "cuda", envSwitches); err != nil {
		return err
	}
	if _, err := parseFlashWGMMA(getenv("GODDP_FLASH_WGMMA")); err != nil {
		return err
	}
	if v := getenv("GODDP_COLSUM_SPLIT"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 16 {
			return fmt.Errorf("cuda: GODDP_COLSUM_SPLIT=%q: want a whole number from 1 to 16 (or unset: 2)", v)
		}
	}
	return nil
}

// flashWGParts are the attention kernels GODDP_FLASH_WGMMA moves onto Hopper's warpgroup
// instructions.
type flashWGParts struct{ fwd, fwdp, dkdv, dkdv128, dq bool }

// hopperDefault says whether the Hopper attention (flashWGDefault's parts) and programmatic
// dependent launch (GODDP_PDL) are the defaults on the devices that run them: compute capability
// 9.0 for the attention, 9.0 or later with cuLaunchKernelEx for PDL. Measured together on an H100
// in session 25 (−1.98 ms at b16, docs/perf-gpu.md); the defaults since session 26, whose H100 call
// ran the whole -tags cuda suite with this true and nothing set (every package passed) and measured
// the model step −1.90 ms at b16, −1.24 at b8 against both off. Unset variables mean the default;
// GODDP_FLASH_WGMMA=0 and GODDP_PDL=0 turn them off.
const hopperDefault = true

// flashWGDefault are the parts on wgmma by default on compute capability 9.0 (hopperDefault): the
// overlapped forward, dk/dv and dq (the fastest set of session 25's A/B).
var flashWGDefault = flashWGParts{fwd: true, fwdp: true, dkdv: true, dq: true}

// flashWGFor is the parts on wgmma for GODDP_FLASH_WGMMA=v on a device of compute capability
// major.minor whose fused attention is loaded (flash): v's parts where v is set, flashWGDefault
// where it is unset on 9.0 (under hopperDefault), none elsewhere. v has passed checkEnv.
func flashWGFor(v string, flash bool, major, minor int) flashWGParts {
	if v == "" {
		if hopperDefault && flash && major == 9 && minor == 0 {
			return flashWGDefault
		}
		return flashWGParts{}
	}
	p, _ := parseFlashWGMMA(v)
	return p
}

// pdlFor says whether kernels launch with programmatic dependent launch for GODDP_PDL=v on a
// device of compute capability major whose build and driver have cuLaunchKernelEx (supported):
// v=1 asks for it (New refuses where it cannot run), v=0 turns it off, unset is the default
// (hopperDefault) where it runs.
func pdlFor(v string, major int, supported bool) bool {
	switch v {
	case "1":
		return true
	case "":
		return hopperDefault && major >= 9 && supported
	}
	return false
}

// parseFlashWGMMA reads a GODDP_FLASH_WGMMA value (flashWGMMA, env.go).
func parseFlashWGMMA(v string) (flashWGParts, error) {
	switch v {
	case "", "0":
		return flashWGParts{}, nil
	case "1":
		return flashWGParts{fwd: true, dkdv: true, dq: true}, nil
	}
	var p flashWGParts
	for _, part := range strings.Split(v, ",") {
		switch strings.TrimSpace(part) {
		case "fwd":
			p.fwd = true
		case "fwdp": // the forward with the next tile's scores overlapping the softmax (k_flash_wg_fwdp)
			p.fwd, p.fwdp = true, true
		case "dkdv":
			p.dkdv = true
		case "dkdv128": // dk/dv 128 keys a block, two warpgroups (k_flash_wg_dkdv128)
			p.dkdv, p.dkdv128 = true, true
		case "dq":
			p.dq = true
		default:
			return flashWGParts{}, fmt.Errorf("cuda: GODDP_FLASH_WGMMA=%q: %q is not a part: want 0, 1 or a list of fwd, fwdp, dkdv, dkdv128, dq", v, part)
		}
	}
	return p, nil
}
