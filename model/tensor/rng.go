package tensor

import "math"

// Counter-based random numbers: element i under seed s is a pure function of (s, i), so a tensor is
// filled the same way on any device, in any order, by any number of threads. The mixer is
// SplitMix64's finaliser; normals come from Box–Muller on two such uniforms.

// Mix64 is SplitMix64's output function of x.
func Mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Uniform01 returns a float in (0,1) for (seed, i), with 24 random bits.
func Uniform01(seed uint64, i uint64) float32 {
	r := Mix64(seed ^ Mix64(i))
	return (float32(r>>40) + 0.5) / (1 << 24)
}

// Normal returns a N(0,1) sample for (seed, i).
func Normal(seed uint64, i uint64) float32 {
	u1 := Uniform01(seed, 2*i)
	u2 := Uniform01(seed, 2*i+1)
	return float32(math.Sqrt(-2*math.Log(float64(u1))) * math.Cos(2*math.Pi*float64(u2)))
}

// DeriveSeed makes independent streams from one seed: DeriveSeed(s, "layer3.w").
func DeriveSeed(seed uint64, name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return Mix64(seed ^ h)
}
