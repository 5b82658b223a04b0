//go:build !linux

package local

import (
	"os"
	"time"
)

// changeTime is fi's modification time: off Linux the change time is not
// read (its field differs between systems).
func changeTime(fi os.FileInfo) time.Time { return fi.ModTime() }
