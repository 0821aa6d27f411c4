package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"

	"gopkg.in/yaml.v3"
)

// Hash is a sha256 (hex) over the canonical YAML of what defines the model
// and the run's arithmetic, so that ranks on several hosts can check they
// train the same thing, and a resume that it continues the same run. Left out,
// because they may differ between hosts without changing the result:
// data.path, data.workers, data.prefetch, checkpoint.dir, checkpoint.per_host,
// checkpoint.fresh_if_broken, ddp.channels, train.log_every and
// train.memory_budget; and grad_accum_steps when global_batch is set (it follows
// from the world size, which an elastic restart changes).
//
// model.init_from is left out too. It names where the weights of step 0 come
// from and only rank 0 reads it (a path, like data.path, that may differ between
// hosts); once a checkpoint exists, the run resumes from it and never reads
// init_from again, the checkpoint's weights superseding it. So a run started
// from init_from resumes after the file moved or was deleted, and a resume is
// never refused over it. What a trajectory depends on beyond the hash, the
// initial weights, is recorded in the checkpoint's state.json (init_from and
// the sha256 of the weights it gave).
//
// The YAML is that of the values as written (a choice keeps its spelling), so
// a hash from an earlier build of the same config is the same; hash_test.go
// pins a few.
func (c *Config) Hash() string {
	cc := c.Clone()
	cc.Data.Path, cc.Data.Workers, cc.Data.Prefetch = "", 0, 0
	cc.Checkpoint.Dir, cc.Checkpoint.PerHost, cc.Checkpoint.FreshIfBroken = "", false, false
	cc.Model.InitFrom = ""        // the weights of step 0; a resume's checkpoint supersedes them
	cc.DDP.Channels = 0           // bit-identical results for any number of channels
	if cc.Train.GlobalBatch > 0 { // accumulation follows from global_batch and the world size,
		cc.Train.GradAccumSteps = 0 // which an elastic restart changes (issue 7)
	}
	cc.Train.LogEvery = 0
	cc.Train.MemoryBudget = ByteSize{}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(cc); err != nil {
		panic("config: hash: " + err.Error()) // plain structs always encode
	}
	enc.Close()
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}
