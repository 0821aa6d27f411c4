//go:build race

package netnstest

const raceOn = true
