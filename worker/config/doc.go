// Package config is the run configuration of a goddp training process: the YAML schema, its
// decoding, the --set overrides, validation, the batch arithmetic and the config hash. It is a
// leaf: it imports the standard library and yaml.v3 only, so ddplaunch can check a config (and
// hash it for the multi-host rendezvous) without linking the trainer.
//
// A run is described by one YAML file (configs/*.yaml) plus `--set key.path=value` overrides on
// the command line. Load takes it through four steps, each its own function:
//
//  1. Defaults (Default) are laid down first, so every key a file leaves out has a value.
//  2. The YAML file is decoded over them with unknown keys rejected: a typo such as
//     `train.lr_rate` is an error naming the key and the file:line. String-valued choices
//     (precision, model.kind, model.attention, train.optimizer, ...) are parsed here, once, into
//     typed values (Precision, ModelKind, Attention, Optimizer, ...); a value outside the set is
//     an error naming the key and the accepted values. Sizes (train.memory_budget) and
//     model.checkpoint are parsed the same way (ByteSize, Checkpointing).
//  3. Each --set is applied in order (Config.Set), through the same key names and parsers.
//  4. Config.Resolved fills the defaults that depend on other keys (train.min_lr = lr/10) and
//     returns the result; Config.Validate then checks values and combinations without changing
//     anything, naming the key of every problem.
//
// What this package leaves to its users: data.path "" means the data set's default location,
// which package worker/data finds (it may run `go mod download`); and the batch arithmetic
// (global = micro × accumulation × world) needs the world size, known only once the process
// group exists, so it is a pure function called then: TrainConfig.ResolveBatch(world), or
// TrainConfig.ResolveAutoBatch for micro_batch: auto, each returning a Batch that
// TrainConfig.WithBatch writes back.
//
// Trajectory is the canonical trajectory config: the keys a run's sequence of weights depends on
// (model, data, optimizer and schedule, precision, seed, batch), each with its value; the rest
// (paths, logging, evaluation and checkpoint cadence, memory and communication layout) are listed
// with why in hash.go's notTrajectory, the one place a key is taken out. Hash, its sha256, is what
// ranks and hosts compare to be sure they train the same thing and a resume to be sure it
// continues the same run; a checkpoint stores the map itself, so a refused resume names the keys
// that differ. HashV1 is the hash of earlier builds (the whole config), kept for their checkpoints.
package config
