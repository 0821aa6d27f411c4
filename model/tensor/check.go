package tensor

import "fmt"

// Shape checks both devices run before an operation (device.go: a mismatch is a programming error
// and panics with a message naming the operation and the tensors).

// CheckLen panics unless every tensor has as many elements as the first (op names the operation).
func CheckLen(op string, ts ...*Tensor) {
	for _, t := range ts[1:] {
		if t.Len() != ts[0].Len() {
			panic(fmt.Sprintf("tensor: %s: %s and %s differ in size", op, ts[0], t))
		}
	}
}

// MatDims returns (rows, cols) of t seen as a matrix: the product of the leading dimensions and
// the last one (so a 2×0 tensor is 2 rows of nothing, which K = 0 products need).
func MatDims(t *Tensor) (int, int) { return matDims(t.Shape()) }

// CheckFloat panics unless every non-nil tensor is f32, f16 or bf16.
func CheckFloat(op string, ts ...*Tensor) {
	for _, t := range ts {
		if t != nil && t.DType() != F32 && !t.DType().Half() {
			panic(fmt.Sprintf("tensor: %s: %s is not a float tensor", op, t))
		}
	}
}

// QKVDims checks q (B,H,T,hs) against qkv (B,T,3·H·hs).
func QKVDims(op string, q, k, v, qkv *Tensor) (b, h, t, hs int) {
	if len(q.Shape()) != 4 {
		panic(fmt.Sprintf("tensor: %s wants q (B,H,T,hs), got %s", op, q))
	}
	b, h, t, hs = q.Shape()[0], q.Shape()[1], q.Shape()[2], q.Shape()[3]
	if !SameShape(q, k) || !SameShape(q, v) || qkv.Len() != 3*q.Len() || qkv.Cols() != 3*h*hs {
		panic(fmt.Sprintf("tensor: %s shapes: q %s, k %s, v %s, qkv %s", op, q, k, v, qkv))
	}
	return
}

// FlashDims checks qkv (B,T,3C), y (B,T,C), lse (B,heads,T) f32 and returns B, T, C, hs.
func FlashDims(op string, y, lse, qkv *Tensor, heads int) (B, T, C, hs int) {
	if len(qkv.Shape()) != 3 || qkv.Shape()[2]%3 != 0 {
		panic(fmt.Sprintf("tensor: %s wants qkv (B,T,3C), got %s", op, qkv))
	}
	B, T, C = qkv.Shape()[0], qkv.Shape()[1], qkv.Shape()[2]/3
	if heads <= 0 || C%heads != 0 {
		panic(fmt.Sprintf("tensor: %s: %d heads do not divide width %d", op, heads, C))
	}
	if len(y.Shape()) != 3 || y.Shape()[0] != B || y.Shape()[1] != T || y.Shape()[2] != C {
		panic(fmt.Sprintf("tensor: %s: y %s does not match qkv %s", op, y, qkv))
	}
	if lse.DType() != F32 || lse.Len() != B*heads*T {
		panic(fmt.Sprintf("tensor: %s: lse %s, want (%d,%d,%d) f32", op, lse, B, heads, T))
	}
	CheckFloat(op, y, qkv)
	return B, T, C, C / heads
}
