package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// Dynamic loss scaling for mixed precision, like torch.amp.GradScaler.
//
// The loss is multiplied by Scale before backward (Model.Backward(scale)), so small f16 activation
// gradients do not underflow. Before the optimizer step the gradients are unscaled and checked:
//
//	flag := s.UnscaleCheck(ps)     // device op: grads *= 1/scale, flag = any inf/NaN
//	found := s.FoundInf(flag)      // reads the flag (DDP all-reduces it first, so ranks agree)
//	if !found { opt.Step(lr) }     // a step with inf/NaN is skipped: weights and state untouched
//	err := s.Update(found)         // ×Backoff on overflow, ×Growth after Interval clean steps
//
// Update fails once the scale has fallen below MinScale: gradients overflow at every scale, the
// run has diverged.
//
// Under bf16 (f32's range) there is no scaling and no skipped step: a disabled scaler with
// CheckFinite still checks the gradients (UnscaleCheck at scale 1, nothing unscaled), and
// Update(true) is an error (ErrNonFinite), as PyTorch users expect without a GradScaler.
type Scaler struct {
	Cfg   ScalerConfig
	dev   tensor.Device
	flag  *tensor.Tensor // (2) f32: the found-inf flag, then the gradients' Σ v² (UnscaleCheckNorm)
	state ScalerState
}

// ScalerConfig: torch's GradScaler defaults plus a floor.
type ScalerConfig struct {
	Enabled  bool    // false: scale 1, no unscaling, never skips (f32 and bf16 training)
	Init     float32 // 65536
	Growth   float32 // 2
	Backoff  float32 // 0.5
	Interval int     // 2000 clean steps between growths
	MinScale float32 // 1: falling below it is an error
	// CheckFinite, with Enabled false: UnscaleCheck still looks for inf/NaN (bf16), and an
	// inf or NaN gradient is an error (Update), never a skipped step.
	CheckFinite bool
}

// DefaultScaler is GradScaler's configuration, enabled.
func DefaultScaler() ScalerConfig {
	return ScalerConfig{Enabled: true, Init: 65536, Growth: 2, Backoff: 0.5, Interval: 2000, MinScale: 1}
}

// ScalerState is what a checkpoint keeps.
type ScalerState struct {
	Scale   float32
	Clean   int   // consecutive clean steps since the last growth or overflow
	Skipped int64 // steps skipped for inf/NaN gradients, in total
}

// NewScaler makes a scaler on dev; a disabled one keeps scale 1.
func NewScaler(dev tensor.Device, cfg ScalerConfig) (*Scaler, error) {
	if cfg.Enabled {
		switch {
		case !(cfg.Init > 0) || math.IsInf(float64(cfg.Init), 0):
			return nil, fmt.Errorf("model: scaler Init = %v: must be positive and finite", cfg.Init)
		case !(cfg.Growth >= 1):
			return nil, fmt.Errorf("model: scaler Growth = %v: must be ≥ 1", cfg.Growth)
		case !(cfg.Backoff > 0 && cfg.Backoff < 1):
			return nil, fmt.Errorf("model: scaler Backoff = %v: must lie in (0,1)", cfg.Backoff)
		case cfg.Interval < 1:
			return nil, fmt.Errorf("model: scaler Interval = %d: must be ≥ 1", cfg.Interval)
		case !(cfg.MinScale >= 0) || cfg.MinScale > cfg.Init:
			return nil, fmt.Errorf("model: scaler MinScale = %v: must lie in [0, Init = %v]", cfg.MinScale, cfg.Init)
		}
	}
	s := &Scaler{Cfg: cfg, dev: dev, flag: dev.Alloc(tensor.F32, "scaler.found_inf", 2)}
	s.state.Scale = 1
	if cfg.Enabled {
		s.state.Scale = cfg.Init
	}
	dev.Fill(s.flag, 0)
	return s, nil
}

// Scale is the factor for this step's loss.
func (s *Scaler) Scale() float32 { return s.state.Scale }

// Skipped counts steps skipped so far.
func (s *Scaler) Skipped() int64 { return s.state.Skipped }

// UnscaleCheck divides the gradient slab by the scale and returns a device flag (1) f32 that is 1
// when any gradient is inf or NaN, 0 otherwise. The flag is the scaler's own buffer, valid until
// the next call. Disabled: nothing is unscaled, and only CheckFinite checks (else the flag is 0).
func (s *Scaler) UnscaleCheck(ps *Params) *tensor.Tensor {
	s.dev.Fill(s.flag, 0)
	found := s.flag.View(0, 1)
	if s.Checks() {
		s.dev.UnscaleCheck(ps.Grad, 1/s.state.Scale, found) // disabled: scale 1, x·1 is x
	}
	return found
}

// UnscaleCheckNorm is UnscaleCheck that also sums the squares of the unscaled gradients (the
// clipping norm's square, as GradNormCoef sums it), for ReadCheckNorm to read back with the flag
// in one wait instead of two. Where the device is a tensor.UnscaleSquarer that fuses, the unscale,
// the check and the squares are one read of the gradients; elsewhere UnscaleCheck then
// SumSquares. The result is the scaler's own (2) buffer: the flag, then Σ v².
func (s *Scaler) UnscaleCheckNorm(ps *Params) *tensor.Tensor {
	s.dev.Fill(s.flag, 0)
	found, sq := s.flag.View(0, 1), s.flag.View(1, 1)
	us, fuses := s.dev.(tensor.UnscaleSquarer)
	switch {
	case !s.Checks():
		s.dev.SumSquares(sq, ps.Grad)
	case fuses && us.FusesUnscaleSquares():
		us.UnscaleCheckSumSquares(ps.Grad, 1/s.state.Scale, found, sq)
	default:
		s.dev.UnscaleCheck(ps.Grad, 1/s.state.Scale, found)
		s.dev.SumSquares(sq, ps.Grad)
	}
	return s.flag
}

// FoldsInto reports whether the unscale can be left to opt's step, and the optimizer that takes
// it: the scaler checks (a dynamic scaler, or CheckFinite), its device is a tensor.UnscaleFolder
// with the switch on (unless GODDP_UNSCALE_FOLD=0), and opt is an UnscaledStepper that reports
// Unscaled.
// Then CheckDeferred replaces UnscaleCheck (or UnscaleCheckNorm) and opt.StepUnscaled(lr, inv, c)
// the step: the same weights, bit for bit, one write of the gradients fewer.
func (s *Scaler) FoldsInto(opt Optimizer) (UnscaledStepper, bool) {
	f, ok := s.dev.(tensor.UnscaleFolder)
	if !ok || !f.FoldsUnscale() || !s.Checks() {
		return nil, false
	}
	us, ok := opt.(UnscaledStepper)
	if !ok || !us.Unscaled() {
		return nil, false
	}
	return us, true
}

// CheckDeferred is UnscaleCheck (norm false: the flag, (1)) or UnscaleCheckNorm (norm true: the
// (2) buffer, the flag then Σ v²) that leaves the gradients scaled: the flag and the norm's bits are
// theirs (tensor.UnscaleFolder's CheckUnscaled reads each x·inv as they store it), and inv is the
// factor the optimizer must multiply each gradient by first (UnscaledStepper.StepUnscaled; 0: none,
// a disabled scaler's scale is 1). inv is this step's: read it before Update. The device must be a
// tensor.UnscaleFolder (FoldsInto).
func (s *Scaler) CheckDeferred(ps *Params, norm bool) (flag *tensor.Tensor, inv float32) {
	f, ok := s.dev.(tensor.UnscaleFolder)
	if !ok {
		panic("model: Scaler.CheckDeferred on a device without tensor.UnscaleFolder")
	}
	s.dev.Fill(s.flag, 0)
	found, sq := s.flag.View(0, 1), s.flag.View(1, 1)
	if !norm {
		sq = nil
	}
	if s.Checks() {
		f.CheckUnscaled(ps.Grad, 1/s.state.Scale, found, sq) // disabled: scale 1, x·1 is x
		if s.Cfg.Enabled {
			inv = 1 / s.state.Scale
		}
	} else if norm {
		s.dev.SumSquares(sq, ps.Grad) // nothing scaled, nothing checked
	}
	if norm {
		return s.flag, inv
	}
	return found, inv
}

// FusesNorm reports whether UnscaleCheckNorm reads the gradients once (the device is a
// tensor.UnscaleSquarer that fuses).
func (s *Scaler) FusesNorm() bool {
	us, ok := s.dev.(tensor.UnscaleSquarer)
	return ok && us.FusesUnscaleSquares()
}

// ReadCheckNorm reads UnscaleCheckNorm's result in one wait: whether a gradient was inf or NaN,
// and the gradients' L2 norm rounded as GradNormCoef rounds it (the same bits).
func (s *Scaler) ReadCheckNorm(flag *tensor.Tensor) (found bool, norm float32) {
	var h [2]float32
	s.dev.Download(h[:], flag)
	return h[0] != 0, float32(math.Sqrt(float64(h[1])))
}

// UnscaleCheckShard is UnscaleCheck on a shard's elements of the gradient slab only (nil: all):
// under optimizer-state sharding the rest of the slab holds another rank's gradients, not
// averaged here. Ranks agree on the flag as without sharding (ddp's RanksWith).
func (s *Scaler) UnscaleCheckShard(ps *Params, sh *Shard) *tensor.Tensor {
	if sh == nil {
		return s.UnscaleCheck(ps)
	}
	s.dev.Fill(s.flag, 0)
	found := s.flag.View(0, 1)
	if s.Checks() {
		for _, g := range sh.Views(ps.Grad) {
			s.dev.UnscaleCheck(g, 1/s.state.Scale, found)
		}
	}
	return found
}

// Checks reports whether UnscaleCheck looks for inf/NaN: a dynamic scaler, or CheckFinite.
func (s *Scaler) Checks() bool { return s.Cfg.Enabled || s.Cfg.CheckFinite }

// ErrNonFinite is Update's error for an inf or NaN gradient under CheckFinite.
var ErrNonFinite = errors.New("model: an inf or NaN gradient, and no loss scaler to skip the step (precision bf16 checks and stops)")

// FoundInf reads a flag from UnscaleCheck (after DDP has combined it across ranks); it waits.
func (s *Scaler) FoundInf(flag *tensor.Tensor) bool {
	var h [1]float32
	s.dev.Download(h[:], flag)
	return h[0] != 0
}

// Update advances the scale after a step: found means the step was skipped.
func (s *Scaler) Update(found bool) error {
	if !s.Cfg.Enabled {
		if found && s.Cfg.CheckFinite {
			return ErrNonFinite
		}
		return nil
	}
	st := &s.state
	if found {
		st.Skipped++
		st.Clean = 0
		st.Scale *= s.Cfg.Backoff
		if st.Scale < s.Cfg.MinScale {
			return fmt.Errorf("model: loss scale fell to %g, below the floor %g (ScalerConfig.MinScale): "+
				"gradients hold inf/NaN at every scale (%d steps skipped so far); the run has diverged",
				st.Scale, s.Cfg.MinScale, st.Skipped)
		}
		return nil
	}
	st.Clean++
	if st.Clean >= s.Cfg.Interval {
		st.Scale *= s.Cfg.Growth
		st.Clean = 0
	}
	return nil
}

// Step is the whole single-process sequence: unscale and check, step unless found, update.
// It reports whether the optimizer stepped.
// Where the scaler folds its unscale into opt (FoldsInto: unless GODDP_UNSCALE_FOLD=0), the check
// reads the gradients only and opt.StepUnscaled unscales them as it reads them: the same weights,
// bit for bit; the gradients are left scaled.
func (s *Scaler) Step(ps *Params, opt Optimizer, lr float32) (bool, error) {
	if us, ok := s.FoldsInto(opt); ok {
		flag, inv := s.CheckDeferred(ps, false)
		found := s.FoundInf(flag)
		if !found {
			us.StepUnscaled(lr, inv, 0)
		}
		return !found, s.Update(found)
	}
	found := s.FoundInf(s.UnscaleCheck(ps))
	if !found {
		opt.Step(lr)
	}
	return !found, s.Update(found)
}

// State and SetState save and restore the scaler for checkpoints.
func (s *Scaler) State() ScalerState      { return s.state }
func (s *Scaler) SetState(st ScalerState) { s.state = st }
func (s *Scaler) Free()                   { freeAll(s.dev, s.flag); s.flag = nil }
