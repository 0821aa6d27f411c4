package model

import (
	"fmt"
	"math"
)

// Schedule gives the learning rate of optimizer step `step` (0-based).
type Schedule func(step int64) float32

// ScheduleConfig is how configs name a schedule.
type ScheduleConfig struct {
	Kind   string  // "constant" or "cosine" (linear warmup, then cosine decay to MinLR)
	LR     float32 // peak learning rate
	MinLR  float32 // floor of the cosine decay
	Warmup int64   // steps of linear warmup from LR/Warmup to LR
	Total  int64   // step at which the cosine reaches MinLR (held after)
}

// NewSchedule builds the schedule cfg describes; errors name the bad field.
func NewSchedule(cfg ScheduleConfig) (Schedule, error) {
	if !(cfg.LR > 0) {
		return nil, fmt.Errorf("model: schedule LR = %v: must be positive", cfg.LR)
	}
	switch cfg.Kind {
	case "constant", "":
		return ConstantLR(cfg.LR), nil
	case "cosine":
		if cfg.Warmup < 0 || cfg.Total <= cfg.Warmup {
			return nil, fmt.Errorf("model: schedule Warmup = %d, Total = %d: want 0 ≤ Warmup < Total", cfg.Warmup, cfg.Total)
		}
		if !(cfg.MinLR >= 0 && cfg.MinLR <= cfg.LR) {
			return nil, fmt.Errorf("model: schedule MinLR = %v: want 0 ≤ MinLR ≤ LR = %v", cfg.MinLR, cfg.LR)
		}
		return WarmupCosine(cfg.LR, cfg.MinLR, cfg.Warmup, cfg.Total), nil
	}
	return nil, fmt.Errorf("model: schedule Kind %q: want constant or cosine", cfg.Kind)
}

// ConstantLR is lr at every step.
func ConstantLR(lr float32) Schedule { return func(int64) float32 { return lr } }

// WarmupCosine rises linearly over warmup steps, lr·(step+1)/warmup, then follows
// minLR + (lr − minLR)·½(1 + cos(π·(step − warmup)/(total − warmup))) and stays at minLR from total.
func WarmupCosine(lr, minLR float32, warmup, total int64) Schedule {
	return func(step int64) float32 {
		if step < warmup {
			return lr * float32(step+1) / float32(warmup)
		}
		if step >= total {
			return minLR
		}
		ratio := float64(step-warmup) / float64(total-warmup)
		coeff := 0.5 * (1 + math.Cos(math.Pi*ratio))
		return minLR + float32(coeff)*(lr-minLR)
	}
}
