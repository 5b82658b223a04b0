package local

import (
	"os"
	"syscall"
	"time"
)

// changeTime is the inode change time of fi: a file's owner can set its
// modification time to anything, but setting it moves the change time to
// now.
func changeTime(fi os.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return fi.ModTime()
}
