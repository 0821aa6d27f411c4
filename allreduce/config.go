package allreduce

import (
	"fmt"

	"github.com/goddp/goddp/allreduce/link"
)

// Op is the reduction an all-reduce applies.
type Op uint8

const (
	// Sum adds the buffers of all ranks.
	Sum Op = iota
	// Avg adds them and divides by the world size. With the f16 wire every rank's contribution is
	// divided before it is cast, so partial sums stay in half range; with f32 the owner of each
	// segment divides the full sum once.
	Avg
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Wire is how buffer elements travel between ranks.
// WARNING: ONLY APPEND TO THIS LIST! The numbers are on the wire.
type Wire uint8

const (
	// WireF32 sends float32 as they are: results equal a sequential float32 sum.
	WireF32 Wire = iota
	// WireF16 sends IEEE half precision (round to nearest even, inf and NaN carried): half the
	// bytes, about 3 decimal digits per hop.
	WireF16
	// wireBytes is raw bytes (broadcast, all-gather, barrier).
	wireBytes
	// WireBF16 sends bfloat16 (round to nearest even, inf and NaN carried): half the bytes, f32's
	// range, about 2 decimal digits per hop; partial sums in float32 as with WireF16.
	WireBF16
)

// float reports a wire for float buffers (AllReduce, ReduceScatter, AllGatherSegments).
func (w Wire) float() bool { return w == WireF32 || w == WireF16 || w == WireBF16 }

func (w Wire) String() string {
	switch w {
	case WireF32:
		return "f32"
	case WireF16:
		return "f16"
	case wireBytes:
		return "bytes"
	case WireBF16:
		return "bf16"
	}
	return fmt.Sprintf("wire(%d)", uint8(w))
}

// ElemBytes is the bytes one element takes on the wire: 4 for WireF32, 2 for WireF16 and
// WireBF16; 0 for an unknown wire.
func (w Wire) ElemBytes() int { return w.elemSize() }

// elemSize is the bytes per element on the wire; 0 for an unknown wire.
func (w Wire) elemSize() int {
	switch w {
	case WireF32:
		return 4
	case WireF16, WireBF16:
		return 2
	case wireBytes:
		return 1
	}
	return 0
}

// ParseWire parses "f32", "f16" or "bf16".
func ParseWire(s string) (Wire, error) {
	switch s {
	case "f32", "fp32", "float32":
		return WireF32, nil
	case "f16", "fp16", "float16", "half":
		return WireF16, nil
	case "bf16", "bfloat16":
		return WireBF16, nil
	}
	return 0, fmt.Errorf("allreduce: unknown wire format %q (want f32, f16 or bf16)", s)
}

// Config describes one rank's place in a group: NewGroup's argument. It is defined in the
// contract package (link.Config) so that a data plane needs nothing of the core.
type Config = link.Config
