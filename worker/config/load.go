package config

// load.go: reading a config file. Load is the whole life of a Config (doc.go); the rest of this
// file is the YAML decoding: unknown keys rejected and reported as file:line, and train.micro_batch,
// which is an int or "auto".

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads the YAML file at path over the defaults, applies the --set
// overrides in order, fills derived defaults (Resolved) and validates. path ""
// starts from the defaults alone. data.path is left as given ("" = the data
// set's default, which package worker/data finds).
func Load(path string, sets []string) (*Config, error) {
	c := Default()
	if path != "" {
		if err := c.decodeFile(path); err != nil {
			return nil, err
		}
	}
	for _, kv := range sets {
		if err := c.Set(kv); err != nil {
			return nil, err
		}
	}
	c = c.Resolved()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeFile decodes the YAML file at path over c, rejecting unknown keys.
func (c *Config) decodeFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file, all defaults
		return fmt.Errorf("config: %s", yamlErrorText(path, err))
	}
	return nil
}

// yamlErrorText rewrites yaml.v3's "line 7: field lr_rate not found in type
// config.TrainConfig" into "line 7: unknown key "lr_rate"" and prefixes each
// line number with the file, giving file:line.
func yamlErrorText(path string, err error) string {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		m = strings.TrimPrefix(m, "yaml: ")
		if strings.HasPrefix(m, "line ") {
			if i := strings.Index(m, ":"); i > 0 {
				m = path + ":" + strings.TrimPrefix(m[:i], "line ") + ":" + m[i+1:]
			}
		}
		if i := strings.Index(m, "field "); i >= 0 && strings.Contains(m, " not found in type ") {
			name := m[i+len("field "):]
			name = name[:strings.Index(name, " not found in type ")]
			typ := m[strings.LastIndex(m, " ")+1:]
			m = m[:i] + fmt.Sprintf("unknown key %q%s", name, sectionOf(typ))
		}
		if !strings.HasPrefix(m, path+":") {
			m = path + ": " + m
		}
		out = append(out, m)
	}
	return strings.Join(out, "; ")
}

// sectionOf names the YAML section a Go config type decodes.
func sectionOf(goType string) string {
	switch strings.TrimPrefix(goType, "config.") {
	case "ModelConfig":
		return " in section model"
	case "TrainConfig", "trainYAML":
		return " in section train"
	case "DataConfig":
		return " in section data"
	case "CheckpointConfig":
		return " in section checkpoint"
	case "DDPConfig":
		return " in section ddp"
	case "LossScaleConfig":
		return " in section loss_scale"
	case "MetricsConfig":
		return " in section metrics"
	case "Config":
		return " at top level"
	}
	return ""
}

// trainYAML is TrainConfig as it appears in YAML: micro_batch is an int or
// the string "auto".
type trainYAML struct {
	trainPlain `yaml:",inline"`
	MicroBatch any `yaml:"micro_batch,omitempty"`
}

type trainPlain TrainConfig

// UnmarshalYAML decodes the train section. It uses yaml.v3's older
// unmarshal-function form on purpose: that form decodes with the caller's
// decoder, so KnownFields(true) still rejects unknown keys inside train:.
func (t *TrainConfig) UnmarshalYAML(unmarshal func(any) error) error {
	y := trainYAML{trainPlain: trainPlain(*t)}
	switch {
	case t.MicroBatchAuto:
		y.MicroBatch = "auto"
	case t.MicroBatch != 0:
		y.MicroBatch = t.MicroBatch
	} // else nil: unset, so that a written 0 is told apart and refused
	if err := unmarshal(&y); err != nil {
		return err
	}
	*t = TrainConfig(y.trainPlain)
	mb, auto, err := parseMicroBatch(y.MicroBatch)
	if err != nil {
		return err
	}
	t.MicroBatch, t.MicroBatchAuto = mb, auto
	return nil
}

// MarshalYAML writes micro_batch back as an int or "auto".
func (t TrainConfig) MarshalYAML() (any, error) {
	y := trainYAML{trainPlain: trainPlain(t)}
	if t.MicroBatchAuto {
		y.MicroBatch = "auto"
	} else if t.MicroBatch != 0 {
		y.MicroBatch = t.MicroBatch
	}
	return y, nil
}

func parseMicroBatch(v any) (n int, auto bool, err error) {
	switch x := v.(type) {
	case nil:
		return 0, false, nil
	case int:
		if x > 0 {
			return x, false, nil
		}
	case string:
		if x == "auto" {
			return 0, true, nil
		}
		if n, err := strconv.Atoi(x); err == nil && n > 0 {
			return n, false, nil
		}
	}
	return 0, false, fmt.Errorf("config: train.micro_batch: %v: want a positive integer or \"auto\"", v)
}

// YAML renders the config as YAML (the effective config of a run, for logs).
func (c *Config) YAML() string {
	b, err := yaml.Marshal(c)
	if err != nil {
		return "config: " + err.Error()
	}
	return string(b)
}
