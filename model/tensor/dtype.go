package tensor

import "fmt"

// DType is the element type of a tensor.
type DType uint8

const (
	F32 DType = iota // IEEE binary32
	F16              // IEEE binary16, stored as its 16 bits
	I32              // int32: token ids, class labels
	// BF16 is bfloat16 (the top 16 bits of a binary32, rounded to nearest even): safetensors
	// files read and write it, and the CPU device stores it wherever it stores F16 (arithmetic in
	// f32, as for F16), for precision bf16. The CUDA device computes in it on compute capability
	// 8.0 and later (its CheckCompute refuses older cards).
	BF16
)

// Half reports a 16-bit float dtype (F16 or BF16): stored as 16 bits, computed in f32.
func (d DType) Half() bool { return d == F16 || d == BF16 }

// Size is the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	}
	panic(fmt.Sprintf("tensor: unknown dtype %d", d))
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case I32:
		return "i32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// ParseDType reads "f32", "f16", "bf16" or "i32".
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32", "fp32", "float32":
		return F32, nil
	case "f16", "fp16", "float16":
		return F16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "i32", "int32":
		return I32, nil
	}
	return 0, fmt.Errorf("tensor: unknown dtype %q (want f32, f16, bf16 or i32)", s)
}

// ComputeChecker is an optional ability of a Device that cannot compute in every float dtype:
// CheckCompute says why it refuses dt as a model's compute dtype (nil: it can).
type ComputeChecker interface {
	CheckCompute(dt DType) error
}

// CheckCompute asks dev whether a model may compute in dt: F32, F16 or BF16, and not one the
// device refuses (ComputeChecker). Devices without the ability compute in all three.
func CheckCompute(dev Device, dt DType) error {
	if dt != F32 && !dt.Half() {
		return fmt.Errorf("tensor: compute dtype %s: want f32, f16 or bf16", dt)
	}
	if c, ok := dev.(ComputeChecker); ok {
		return c.CheckCompute(dt)
	}
	return nil
}
