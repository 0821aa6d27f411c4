//go:build cuda

package model

// SetObserver: see Observable.
func (d *CUDA) SetObserver(f func(AllocEvent)) { d.pool.SetObserver(f) }

var _ Observable = (*CUDA)(nil)
