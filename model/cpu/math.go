package cpu

import "math"

// Float32 elementary functions for the CPU device's elementwise kernels. math.Exp and math.Tanh
// work in float64 and were a third of a GPT step; these are float32 with errors of a few ulp
// (tested against float64 in math_test.go), which is what the CUDA device's expf gives too.

// expf returns e^x in float32, for any x (over/underflow to +Inf/0, NaN kept).
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693145751953125
		ln2lo = 1.42860682030941723212e-6
	)
	if x > 88.72283 {
		return float32(math.Inf(1))
	}
	if x < -103.97208 {
		return 0
	}
	if x != x {
		return x
	}
	// x = n·ln2 + r, |r| ≤ ln2/2
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*ln2hi - n*ln2lo
	// e^r by a degree-6 polynomial (Taylor, |r| ≤ 0.347: truncation < 2e-8 relative)
	p := float32(1.0 / 720)
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	ni := int32(n)
	if ni < -126 { // subnormal result: scale in two steps
		return p * math.Float32frombits(uint32(ni+126+127)<<23) * math.Float32frombits(1<<23)
	}
	if ni > 127 {
		return p * 2 * math.Float32frombits(uint32(ni-1+127)<<23)
	}
	return p * math.Float32frombits(uint32(ni+127)<<23)
}

// sigmoidf is 1/(1+e^-x).
func sigmoidf(x float32) float32 { return 1 / (1 + expf(-x)) }

// GELU, tanh form: 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³). Since 1 + tanh(u) = 2σ(2u),
// this is x·σ(2u), which has no cancellation for negative x.
func geluf(x float32) float32 {
	u := float32(geluK) * (x + 0.044715*x*x*x)
	return x * sigmoidf(2*u)
}

// geluGradf is d/dx of geluf: σ(2u) + x·2σ(2u)(1−σ(2u))·u'(x).
func geluGradf(x float32) float32 {
	u := float32(geluK) * (x + 0.044715*x*x*x)
	s := sigmoidf(2 * u)
	du := float32(geluK) * (1 + 3*0.044715*x*x)
	return s + x*2*s*(1-s)*du
}
