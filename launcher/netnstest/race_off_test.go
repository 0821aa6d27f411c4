//go:build !race

package netnstest

const raceOn = false
