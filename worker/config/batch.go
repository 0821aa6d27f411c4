package config

// batch.go: the batch arithmetic. With W ranks, each optimizer step takes
//
//	global_batch = micro_batch × grad_accum_steps × world_size
//
// samples. A config gives any two of the three (or only micro_batch, or only global_batch), and
// the third follows once the world size is known. These are pure functions of the TrainConfig
// value and the world size; TrainConfig.WithBatch writes an answer back.

import (
	"fmt"
	"strconv"
)

// Batch is how the samples of one optimizer step are split: Global = Micro × Accum × World.
type Batch struct {
	Micro  int // samples per forward/backward on one rank (train.micro_batch)
	Accum  int // micro-batches per optimizer step on each rank (train.grad_accum_steps)
	Global int // samples per optimizer step over all ranks (train.global_batch)
	World  int // ranks
}

// ResolveBatch finds whichever of train.micro_batch, train.grad_accum_steps
// and train.global_batch is missing (0) so that
//
//	global_batch = micro_batch × grad_accum_steps × world
//
// holds, and errors when the three given values disagree or the division is
// not exact. With only micro_batch, grad_accum_steps is 1; with only
// global_batch, grad_accum_steps is 1 and micro_batch = global_batch/world.
// micro_batch: auto with MicroBatch still 0 is an error: use ResolveAutoBatch
// once the search has found what fits.
func (t TrainConfig) ResolveBatch(world int) (Batch, error) {
	if world < 1 {
		return Batch{}, fmt.Errorf("config: world size %d: want >= 1", world)
	}
	b, k, g := t.MicroBatch, t.GradAccumSteps, t.GlobalBatch
	desc := func() string {
		mb := strconv.Itoa(b)
		if b == 0 && t.MicroBatchAuto {
			mb = "auto (not yet found)"
		} else if b == 0 {
			mb = "unset"
		}
		un := func(v int) string {
			if v == 0 {
				return "unset"
			}
			return strconv.Itoa(v)
		}
		return fmt.Sprintf("train.micro_batch=%s × train.grad_accum_steps=%s × world_size=%d vs train.global_batch=%s", mb, un(k), world, un(g))
	}
	switch {
	case b > 0 && k > 0 && g > 0:
		if b*k*world != g {
			return Batch{}, fmt.Errorf("config: inconsistent batch: %s (%d ≠ %d)", desc(), b*k*world, g)
		}
	case b > 0 && k > 0:
		g = b * k * world
	case b > 0 && g > 0:
		if g%(b*world) != 0 {
			return Batch{}, fmt.Errorf("config: train.global_batch not divisible by micro_batch × world: %s", desc())
		}
		k = g / (b * world)
	case b > 0:
		k, g = 1, b*world
	case g > 0 && !t.MicroBatchAuto:
		if k == 0 {
			k = 1
		}
		if g%(k*world) != 0 {
			return Batch{}, fmt.Errorf("config: train.global_batch not divisible by grad_accum_steps × world: %s", desc())
		}
		b = g / (k * world)
	default:
		return Batch{}, fmt.Errorf("config: cannot resolve the batch: %s; give two of the three", desc())
	}
	return Batch{Micro: b, Accum: k, Global: g, World: world}, nil
}

// ResolveAutoBatch is ResolveBatch for micro_batch: auto, once the search has found fits, the
// largest micro-batch whose training step fits on every rank. With train.global_batch set, the
// micro-batch is the largest divisor of global_batch/world that is at most fits, and
// grad_accum_steps makes up the rest (a grad_accum_steps in the config is ignored); without it,
// the micro-batch is fits and grad_accum_steps as configured (default 1).
func (t TrainConfig) ResolveAutoBatch(fits, world int) (Batch, error) {
	if fits < 1 {
		return Batch{}, fmt.Errorf("config: train.micro_batch auto: no micro-batch fits")
	}
	if world < 1 {
		return Batch{}, fmt.Errorf("config: world size %d: want >= 1", world)
	}
	b := fits
	if t.GlobalBatch > 0 {
		if t.GlobalBatch%world != 0 {
			return Batch{}, fmt.Errorf("config: train.global_batch %d is not divisible by the world size %d", t.GlobalBatch, world)
		}
		b = DivisorAtMost(t.GlobalBatch/world, fits)
		t.GradAccumSteps = 0
	}
	t.MicroBatch = b
	return t.ResolveBatch(world)
}

// DivisorAtMost is the largest divisor of n that is ≤ b (n, b ≥ 1).
func DivisorAtMost(n, b int) int {
	for d := min(n, b); d > 1; d-- {
		if n%d == 0 {
			return d
		}
	}
	return 1
}

// WithBatch returns t with the batch written in (micro_batch, grad_accum_steps, global_batch), so
// that Hash, YAML and the checkpoint's config hash describe the run's actual batch.
// micro_batch: auto stays auto.
func (t TrainConfig) WithBatch(b Batch) TrainConfig {
	t.MicroBatch, t.GradAccumSteps, t.GlobalBatch = b.Micro, b.Accum, b.Global
	return t
}
