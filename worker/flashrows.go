package worker

import (
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// flashForwardRows sets model.flash_forward_rows on the device (tensor.FlashForwardRower: the CUDA
// device's fused attention forward, 64 or 128 query rows a block; 128 tested on the H200, not yet timed).
// 0 leaves the device's default; a device without the ability refuses any other value in one line.
func flashForwardRows(dev tensor.Device, rows int) error {
	if rows == 0 {
		return nil
	}
	fr, ok := dev.(tensor.FlashForwardRower)
	if !ok {
		return fmt.Errorf("model.flash_forward_rows: %d needs --device cuda (this run's device is %s, whose attention has no kernel blocks); leave it unset", rows, dev.Name())
	}
	if err := fr.SetFlashForwardRows(rows); err != nil {
		return fmt.Errorf("model.flash_forward_rows: %w", err)
	}
	return nil
}
