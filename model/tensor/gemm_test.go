package tensor

import (
	"strings"
	"testing"
)

func TestGEMMShape(t *testing.T) {
	// C (2,3) = op(A)·op(B) with K = 4, every transpose combination; then the same batched
	// over 5, and MatMul reading leading dimensions as rows.
	cases := []struct {
		name           string
		c, a, b        []int
		transA, transB bool
		batched        bool
		want           GEMM
	}{
		{"nn", []int{2, 3}, []int{2, 4}, []int{4, 3}, false, false, false,
			GEMM{M: 2, N: 3, K: 4, Batch: 1, ARows: 2, ACols: 4, BRows: 4, BCols: 3, LDA: 4, LDB: 3, LDC: 3, StrideA: 8, StrideB: 12, StrideC: 6}},
		{"tn", []int{2, 3}, []int{4, 2}, []int{4, 3}, true, false, false,
			GEMM{M: 2, N: 3, K: 4, Batch: 1, TransA: true, ARows: 4, ACols: 2, BRows: 4, BCols: 3, LDA: 2, LDB: 3, LDC: 3, StrideA: 8, StrideB: 12, StrideC: 6}},
		{"nt", []int{2, 3}, []int{2, 4}, []int{3, 4}, false, true, false,
			GEMM{M: 2, N: 3, K: 4, Batch: 1, TransB: true, ARows: 2, ACols: 4, BRows: 3, BCols: 4, LDA: 4, LDB: 4, LDC: 3, StrideA: 8, StrideB: 12, StrideC: 6}},
		{"tt", []int{2, 3}, []int{4, 2}, []int{3, 4}, true, true, false,
			GEMM{M: 2, N: 3, K: 4, Batch: 1, TransA: true, TransB: true, ARows: 4, ACols: 2, BRows: 3, BCols: 4, LDA: 2, LDB: 4, LDC: 3, StrideA: 8, StrideB: 12, StrideC: 6}},
		{"batched nn", []int{5, 2, 3}, []int{5, 2, 4}, []int{5, 4, 3}, false, false, true,
			GEMM{M: 2, N: 3, K: 4, Batch: 5, ARows: 2, ACols: 4, BRows: 4, BCols: 3, LDA: 4, LDB: 3, LDC: 3, StrideA: 8, StrideB: 12, StrideC: 6}},
		{"batched tt", []int{5, 2, 3}, []int{5, 4, 2}, []int{5, 3, 4}, true, true, true,
			GEMM{M: 2, N: 3, K: 4, Batch: 5, TransA: true, TransB: true, ARows: 4, ACols: 2, BRows: 3, BCols: 4, LDA: 2, LDB: 4, LDC: 3, StrideA: 8, StrideB: 12, StrideC: 6}},
		// x (B,T,C)·Wᵀ with W (Out,C): the rows of x and y are B·T.
		{"rows from leading dims", []int{2, 5, 3}, []int{2, 5, 4}, []int{3, 4}, false, true, false,
			GEMM{M: 10, N: 3, K: 4, Batch: 1, TransB: true, ARows: 10, ACols: 4, BRows: 3, BCols: 4, LDA: 4, LDB: 4, LDC: 3, StrideA: 40, StrideB: 12, StrideC: 30}},
		// K = 0: C = beta·C, a 2×0 operand is 2 rows of nothing.
		{"empty K", []int{2, 3}, []int{2, 0}, []int{0, 3}, false, false, false,
			GEMM{M: 2, N: 3, K: 0, Batch: 1, ARows: 2, ACols: 0, BRows: 0, BCols: 3, LDA: 0, LDB: 3, LDC: 3, StrideA: 0, StrideB: 0, StrideC: 6}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := GEMMShape(c.c, c.a, c.b, c.transA, c.transB, c.batched)
			if err != nil {
				t.Fatal(err)
			}
			if g != c.want {
				t.Fatalf("got  %+v\nwant %+v", g, c.want)
			}
		})
	}

	bad := []struct {
		name           string
		c, a, b        []int
		transA, transB bool
		batched        bool
		msg            string
	}{
		{"inner", []int{2, 3}, []int{2, 4}, []int{5, 3}, false, false, false, "inner dimensions differ"},
		{"inner, A transposed", []int{2, 3}, []int{2, 4}, []int{4, 3}, true, false, false, "inner dimensions differ"},
		{"inner, B transposed", []int{2, 3}, []int{2, 4}, []int{4, 3}, false, true, false, "inner dimensions differ"},
		{"C rows", []int{3, 3}, []int{2, 4}, []int{4, 3}, false, false, false, "op(A)·op(B) is (2,3) but C is (3,3)"},
		{"C cols", []int{2, 4}, []int{4, 2}, []int{3, 4}, true, true, false, "op(A)·op(B) is (2,3) but C is (2,4)"},
		{"batched 2-D", []int{2, 3}, []int{2, 4}, []int{4, 3}, false, false, true, "want 3-D"},
		{"batch counts", []int{5, 2, 3}, []int{5, 2, 4}, []int{4, 4, 3}, false, false, true, "batch counts differ"},
		{"batched inner", []int{5, 2, 3}, []int{5, 2, 4}, []int{5, 3, 3}, false, false, true, "inner dimensions differ"},
	}
	for _, c := range bad {
		t.Run("refused "+c.name, func(t *testing.T) {
			_, err := GEMMShape(c.c, c.a, c.b, c.transA, c.transB, c.batched)
			if err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v, want one containing %q", err, c.msg)
			}
		})
	}
}

func TestCheckGEMMPanicsNamingTheOp(t *testing.T) {
	a := &Tensor{shape: []int{2, 4}}
	b := &Tensor{shape: []int{5, 3}}
	c := &Tensor{shape: []int{2, 3}}
	defer func() {
		r, _ := recover().(string)
		if !strings.HasPrefix(r, "cpu: MatMul shapes: C ") || !strings.Contains(r, "inner dimensions differ") {
			t.Fatalf("panic %q, want one naming the op and the rule", r)
		}
	}()
	CheckGEMM("cpu: MatMul", c, a, b, false, false, false)
}
