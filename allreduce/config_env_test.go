package allreduce

import (
	"strings"
	"testing"

	"github.com/goddp/goddp/allreduce/link"
)

// ConfigFromEnv reads DDP_SHM_BYTES; a bad value names the variable.
func TestConfigFromEnv_sharedMem(t *testing.T) {
	t.Setenv("RANK", "0")
	t.Setenv("WORLD_SIZE", "1")
	for _, tc := range []struct {
		v    string
		want int
		bad  bool
	}{{"0", -1, false}, {"65536", 65536, false}, {"lots", 0, true}, {"-5", 0, true}} {
		t.Setenv(EnvSharedMem, tc.v)
		cfg, err := ConfigFromEnv()
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), EnvSharedMem) {
				t.Errorf("%s=%s: got %v, want an error naming %s", EnvSharedMem, tc.v, err, EnvSharedMem)
			}
			continue
		}
		if err != nil || cfg.SharedMemBytes != tc.want {
			t.Errorf("%s=%s: got %d, %v; want %d", EnvSharedMem, tc.v, cfg.SharedMemBytes, err, tc.want)
		}
	}
}

// Each developer knob's variable sets its Config field (0 in the environment: the field's
// "none" where it has one); a bad value is an error naming the variable; unset leaves the zero
// value, which withDefaults makes today's default.
func TestConfigFromEnv_knobs(t *testing.T) {
	t.Setenv("RANK", "0")
	t.Setenv("WORLD_SIZE", "1")
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if d, err := cfg.WithDefaults(); err != nil || d.GRPCNoUnix || d.GRPCNoRxInPlace || d.GRPCUnixSendBuf != link.DefaultUnixSendBuf ||
		d.TCPUnixSendBuf != link.DefaultUnixSendBuf || d.GRPCWindow != link.DefaultGRPCWindow || d.GRPCWriteBuf != link.DefaultGRPCWriteBuf ||
		d.GRPCReadBuf != link.DefaultGRPCReadBuf || d.GRPCSlabBytes != link.DefaultGRPCSlabBytes {
		t.Fatalf("defaults: %+v, %v", d, err)
	}
	for _, tc := range []struct {
		name, v string
		get     func(Config) any
		want    any
	}{
		{"DDP_GRPC_UNIX", "0", func(c Config) any { return c.GRPCNoUnix }, true},
		{"DDP_GRPC_UNIX", "1", func(c Config) any { return c.GRPCNoUnix }, false},
		{"DDP_GRPC_RX", "0", func(c Config) any { return c.GRPCNoRxInPlace }, true},
		{"DDP_GRPC_UNIX_SNDBUF", "0", func(c Config) any { return c.GRPCUnixSendBuf }, -1},
		{"DDP_GRPC_UNIX_SNDBUF", "1048576", func(c Config) any { return c.GRPCUnixSendBuf }, 1 << 20},
		{"DDP_UNIX_SNDBUF", "0", func(c Config) any { return c.TCPUnixSendBuf }, -1},
		{"DDP_UNIX_SNDBUF", "65536", func(c Config) any { return c.TCPUnixSendBuf }, 65536},
		{"DDP_GRPC_WINDOW", "16777216", func(c Config) any { return c.GRPCWindow }, 16 << 20},
		{"DDP_GRPC_WBUF", "0", func(c Config) any { return c.GRPCWriteBuf }, -1},
		{"DDP_GRPC_RBUF", "32768", func(c Config) any { return c.GRPCReadBuf }, 32768},
		{"DDP_GRPC_SLAB", "2097152", func(c Config) any { return c.GRPCSlabBytes }, 2 << 20},
	} {
		t.Run(tc.name+"="+tc.v, func(t *testing.T) {
			t.Setenv(tc.name, tc.v)
			cfg, err := ConfigFromEnv()
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.get(cfg); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if _, err := cfg.WithDefaults(); err != nil {
				t.Fatalf("withDefaults: %v", err)
			}
		})
	}
	for _, bad := range []struct{ name, v string }{
		{"DDP_GRPC_UNIX", "maybe"}, {"DDP_GRPC_RX", "2"}, {"DDP_GRPC_WINDOW", "0"}, {"DDP_GRPC_SLAB", "0"},
		{"DDP_GRPC_WBUF", "-1"}, {"DDP_UNIX_SNDBUF", "4M"},
	} {
		t.Run("bad "+bad.name+"="+bad.v, func(t *testing.T) {
			t.Setenv(bad.name, bad.v)
			if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), bad.name) {
				t.Fatalf("got %v, want an error naming %s", err, bad.name)
			}
		})
	}
}

// withDefaults refuses knob values out of range, naming the field.
func TestConfig_knobsValidated(t *testing.T) {
	for _, tc := range []struct {
		field string
		set   func(*Config)
	}{
		{"GRPCWindow", func(c *Config) { c.GRPCWindow = 1000 }},
		{"GRPCWindow", func(c *Config) { c.GRPCWindow = -1 }},
		{"GRPCWindow", func(c *Config) { c.GRPCWindow = 2 << 30 }},
		{"GRPCSlabBytes", func(c *Config) { c.GRPCSlabBytes = 4096 }},
		{"GRPCWriteBuf", func(c *Config) { c.GRPCWriteBuf = 3 << 30 }},
		{"TCPUnixSendBuf", func(c *Config) { c.TCPUnixSendBuf = 2 << 30 }},
	} {
		cfg := Config{WorldSize: 1}
		tc.set(&cfg)
		if _, err := cfg.WithDefaults(); err == nil || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("%s: got %v, want an error naming Config.%s", tc.field, err, tc.field)
		}
	}
	cfg, err := Config{WorldSize: 1, GRPCUnixSendBuf: -7, GRPCReadBuf: -1}.WithDefaults()
	if err != nil || cfg.GRPCUnixSendBuf != -1 || cfg.GRPCReadBuf != -1 {
		t.Fatalf("negative (none) values: %+v, %v", cfg, err)
	}
}
