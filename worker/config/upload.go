package config

import "gopkg.in/yaml.v3"

// UploadAhead is `data.upload_ahead`: whether the trainer uploads the next micro-batch while the
// current one's backward runs, into a second set of input buffers on the device (worker/inputs.go),
// instead of at the start of its own micro-step, where forward waits for it. The same batches in
// the same order, the same bits; the cost is one more micro-batch of inputs on the device.
type UploadAhead string

const (
	// UploadAheadAuto: on where the device copies while it computes (--device cuda: a ResNet-50
	// batch of 64 is 38.5 MB, ~0.8 ms of a 17 ms step; measured 17.45 -> 16.74 ms on an H100 in
	// session 17), off on the CPU device. Worker's uploadAhead decides.
	UploadAheadAuto UploadAhead = "auto"
	UploadAheadOn   UploadAhead = "on"
	UploadAheadOff  UploadAhead = "off"
)

var uploadAheads = choices[UploadAhead]{key: "data.upload_ahead", values: []UploadAhead{UploadAheadAuto, UploadAheadOn, UploadAheadOff},
	aliases: map[string]UploadAhead{"": UploadAheadAuto, "true": UploadAheadOn, "false": UploadAheadOff}}

// ParseUploadAhead reads `data.upload_ahead`: auto (or ""), on (true) or off (false).
func ParseUploadAhead(s string) (UploadAhead, error) { return uploadAheads.parse(s) }

func (v *UploadAhead) setText(s string) error           { return set(v, s, ParseUploadAhead) }
func (v *UploadAhead) UnmarshalYAML(n *yaml.Node) error { return unmarshalText(n, v) }
