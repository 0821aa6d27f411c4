package config

// set.go: `--set key.path=value` and `--keys`, by reflection over the yaml tags of Config, so a
// new field is settable and listed without more code.

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// Set applies one "key.path=value" override, as from --set. The key is the
// YAML key (train.lr, model.widths, data.shuffle); the value is parsed as
// YAML of the key's type: 3e-4, true, [784,128,10], auto (micro_batch), and
// a choice (train.optimizer=sgd) through its parser.
func (c *Config) Set(kv string) error {
	key, val, ok := strings.Cut(kv, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("config: --set %q: want key.path=value", kv)
	}
	if key == "train.micro_batch" {
		mb, auto, err := parseMicroBatch(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("config: --set train.micro_batch=%q: want a positive integer or \"auto\"", val)
		}
		c.Train.MicroBatch, c.Train.MicroBatchAuto = mb, auto
		return nil
	}
	f, ok := fieldByKey(reflect.ValueOf(c).Elem(), strings.Split(key, "."))
	if !ok {
		return fmt.Errorf("config: --set %s: unknown key %q (known: %s)", kv, key, strings.Join(Keys(), ", "))
	}
	if tv, ok := f.Addr().Interface().(textValue); ok {
		var s string
		if err := yaml.Unmarshal([]byte(val), &s); err != nil {
			return fmt.Errorf("config: --set %s: value %q is not a string", key, val)
		}
		if err := tv.setText(s); err != nil {
			if strings.HasPrefix(err.Error(), key+":") { // a choice names its key itself
				return fmt.Errorf("config: --set %w", err)
			}
			return fmt.Errorf("config: --set %s: %w", key, err)
		}
		return nil
	}
	nv := reflect.New(f.Type())
	if err := yaml.Unmarshal([]byte(val), nv.Interface()); err != nil || (val == "" && f.Kind() != reflect.String) {
		return fmt.Errorf("config: --set %s: value %q is not %s", key, val, kindWord(f.Type()))
	}
	f.Set(nv.Elem())
	return nil
}

func kindWord(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list like [784,512,10]"
	}
	return t.String()
}

// isSection reports whether a field of type t is a section (a struct of keys) rather than a key:
// Checkpointing and ByteSize are structs read from one value.
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(reflect.TypeFor[textValue]())
}

// fieldByKey walks a struct by YAML key names.
func fieldByKey(v reflect.Value, path []string) (reflect.Value, bool) {
	if len(path) == 0 {
		return reflect.Value{}, false
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" || name != path[0] {
			continue
		}
		f := v.Field(i)
		if len(path) == 1 {
			if isSection(f.Type()) {
				return reflect.Value{}, false // a section, not a key
			}
			return f, true
		}
		if !isSection(f.Type()) {
			return reflect.Value{}, false
		}
		return fieldByKey(f, path[1:])
	}
	return reflect.Value{}, false
}

// Keys lists every settable key, in file order.
func Keys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			if isSection(t.Field(i).Type) {
				walk(t.Field(i).Type, prefix+name+".")
				continue
			}
			out = append(out, prefix+name)
			if prefix+name == "train.max_steps" {
				out = append(out, "train.micro_batch")
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
}
