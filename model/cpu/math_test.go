package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestExpf_againstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 9))
	worst := 0.0
	for i := 0; i < 1_000_000; i++ {
		x := float32(r.Float64()*188 - 100) // [-100, 88]: float32 range
		got := float64(expf(x))
		want := math.Exp(float64(x))
		if want < 1.1754944e-38 { // float32 subnormal range: absolute check (ulp 1.4e-45)
			if math.Abs(got-want) > 3e-45 {
				t.Fatalf("expf(%g) = %g, want %g", x, got, want)
			}
			continue
		}
		rel := math.Abs(got-want) / want
		worst = math.Max(worst, rel)
	}
	if worst > 4e-7 { // a few float32 ulp
		t.Fatalf("expf worst relative error %g", worst)
	}
	if !math.IsInf(float64(expf(100)), 1) || expf(-200) != 0 || !math.IsNaN(float64(expf(float32(math.NaN())))) {
		t.Fatal("expf edge cases")
	}
}

func TestGeluf_againstFloat64(t *testing.T) {
	for x := -12.0; x <= 12; x += 0.001 {
		k := math.Sqrt(2 / math.Pi)
		u := k * (x + 0.044715*x*x*x)
		want := 0.5 * x * (1 + math.Tanh(u))
		sech2 := 1 - math.Tanh(u)*math.Tanh(u)
		wantGrad := 0.5*(1+math.Tanh(u)) + 0.5*x*sech2*k*(1+3*0.044715*x*x)
		got, grad := float64(geluf(float32(x))), float64(geluGradf(float32(x)))
		if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Fatalf("geluf(%g) = %g, want %g", x, got, want)
		}
		if math.Abs(grad-wantGrad) > 2e-6*math.Max(1, math.Abs(wantGrad)) {
			t.Fatalf("geluGradf(%g) = %g, want %g", x, grad, wantGrad)
		}
	}
}
