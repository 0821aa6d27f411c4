package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shipped configs load with data.path's default found on this host. (The config tests proper
// are package worker/config's.)
func TestConfig_shipConfigsLoad(t *testing.T) {
	for _, name := range []string{"mnist-mlp.yaml", "opticks-gpt-tiny.yaml"} {
		t.Run(name, func(t *testing.T) {
			c, err := LoadConfig(filepath.Join("..", "configs", name), nil)
			if err != nil {
				if strings.Contains(err.Error(), "data.path is empty") {
					t.Skipf("default data not available here: %v", err)
				}
				t.Fatal(err)
			}
			if c.Data.Path == "" {
				t.Error("data.path default not filled")
			}
			if _, err := os.Stat(c.Data.Path); err != nil {
				t.Errorf("default data.path %s: %v", c.Data.Path, err)
			}
			if _, err := c.Train.ResolveBatch(1); err != nil {
				t.Error(err)
			}
		})
	}
}
