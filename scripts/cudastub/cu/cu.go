// Package cu is a type-checking stub of gorgonia.org/cu v0.9.6 (only what goddp uses).
package cu

type Device int
type CUContext struct{ ctx uintptr }
type DeviceAttribute int

const (
	MultiprocessorCount    DeviceAttribute = 16
	ComputeCapabilityMajor DeviceAttribute = 75
	ComputeCapabilityMinor DeviceAttribute = 76
)

func GetDevice(ordinal int) (device Device, err error)                   { return }
func NumDevices() (count int, err error)                                 { return }
func SetCurrentContext(ctx CUContext) (err error)                        { return }
func (d Device) Name() (string, error)                                   { return "", nil }
func (dev Device) Attribute(attrib DeviceAttribute) (pi int, err error)  { return }
func (dev Device) ReleasePrimaryCtx() (err error)                        { return }
func (d Device) RetainPrimaryCtx() (primaryContext CUContext, err error) { return }
