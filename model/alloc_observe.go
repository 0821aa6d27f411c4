package model

// SetObserver: see Observable.
func (c *CPU) SetObserver(f func(AllocEvent)) { c.pool.SetObserver(f) }

var _ Observable = (*CPU)(nil)
