// Package checkpoint is a training run's persistence: checkpoints on disk, their sync between
// hosts, the state a resume continues from, model.init_from's weights, and the export of a
// checkpoint in Hugging Face's layout. It owns goddp's one weight loader for checkpoints,
// LoadWeights, built on model.Params.LoadNamed.
//
//	checkpoint.go  the directory format (MANIFEST.json, model.safetensors, optim.safetensors,
//	               state.json, config.json), its atomic write (Save, SaveModel), verified load
//	               (Load, Verify), the choice of a checkpoint to resume (Latest, Resume,
//	               Resolve) and pruning (Prune)
//	sync.go        before a resume, the newest checkpoint any rank has copied to the hosts
//	               that lack it (Sync), over the process group
//	state.go       State, state.json: what a resumed run continues from; its background save,
//	               its restore, and the trajectory check that refuses another run's checkpoint
//	weights.go     LoadWeights: a checkpoint's weights (and buffers) into a model
//	initfrom.go    model.init_from: a run that starts from given weights (LoadInitFrom)
//	export.go      ddptrain export: a checkpoint in Hugging Face GPT-2's layout (Export)
//
// It may import model, allreduce (the process group, for Sync), worker/config and worker/data;
// never worker (the trainer imports it) nor worker/observe.
package checkpoint
