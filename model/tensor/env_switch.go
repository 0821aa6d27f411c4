package tensor

import "fmt"

// CheckSwitches returns an error naming the first of names (environment variables whose values
// are 0 or 1, unset meaning the default) that getenv gives another value: the devices' developer
// switches (model/cuda's, model/cpu's) are read as "0"/"1" tests, so a mistyped value would
// otherwise pass for the default. who prefixes the message ("cuda", "cpu").
func CheckSwitches(getenv func(string) string, who string, names []string) error {
	for _, k := range names {
		if v := getenv(k); v != "" && v != "0" && v != "1" {
			return fmt.Errorf("%s: %s=%q: want 0 or 1 (or unset: the default)", who, k, v)
		}
	}
	return nil
}
