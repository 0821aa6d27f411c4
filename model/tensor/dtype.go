package tensor

import "fmt"

// DType is the element type of a tensor.
type DType uint8

const (
	F32 DType = iota // IEEE binary32
	F16              // IEEE binary16, stored as its 16 bits
	I32              // int32: token ids, class labels
	// BF16 is bfloat16 (the top 16 bits of a binary32), a storage format only: safetensors files
	// (model/safetensors.go) read and write it, and loading widens it to f32. No device computes
	// in it or allocates it.
	BF16
)

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

// ParseDType reads "f32", "f16" or "i32".
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32", "fp32", "float32":
		return F32, nil
	case "f16", "fp16", "float16":
		return F16, nil
	case "i32", "int32":
		return I32, nil
	}
	return 0, fmt.Errorf("tensor: unknown dtype %q (want f32, f16 or i32)", s)
}
