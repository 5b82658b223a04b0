// Package sanitize makes text that comes from outside Peloton safe to keep:
// a substrate's status messages and reasons (a Mesos status update, a pod's
// message, a health check's output), host labels. Protobuf refuses to
// marshal a string that is not valid UTF-8, so one bad byte stored in a task
// record would make that record unwritable, and unreadable by anything that
// decodes strictly. Text makes such a string valid (every invalid sequence
// becomes U+FFFD) and cuts it on a rune boundary to a bound, so nothing a
// substrate says can grow a record without limit either.
//
// hostmgr applies it where backend events and hosts enter the stack, once
// for every backend; see hostmgr/doc.go.
//
// This package must not import any other Peloton package.
package sanitize

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// Bounds of substrate text, in bytes.
const (
	// MaxMessage bounds a task event's message: enough for a pod's
	// termination message or a health check's output line, small enough
	// that a task record (which keeps the message) stays small.
	MaxMessage = 2048
	// MaxReason bounds a task event's reason, which is meant to be one
	// greppable word.
	MaxReason = 128
	// MaxLabelKey and MaxLabelValue bound a host label; the key bound is
	// a Kubernetes qualified name's, the value bound the same as a job
	// label's (jobmgr.MaxLabelValueBytes).
	MaxLabelKey   = 253
	MaxLabelValue = 1024
	// MaxName bounds a name a substrate gives (a host, a partition).
	MaxName = 253
)

// cutMark ends a string that Text cut.
const cutMark = "…"

// Text returns s as valid UTF-8 of at most max bytes: every invalid byte
// sequence is replaced by U+FFFD, and a longer string is cut on a rune
// boundary and ends in "…" (when max leaves room for it). Clean text within
// the bound is returned as it is, without a copy.
func Text(s string, max int) string {
	if len(s) <= max && utf8.ValidString(s) {
		return s
	}
	if max <= 0 {
		return ""
	}
	s = strings.ToValidUTF8(s, string(utf8.RuneError))
	if len(s) <= max {
		return s
	}
	mark := cutMark
	if max < 2*len(cutMark) {
		mark = "" // the mark would take most of what is left
	}
	end := max - len(mark)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + mark
}

// Labels returns labels with every key and value made valid and bounded
// (MaxLabelKey, MaxLabelValue). Clean labels are returned as they are; when
// two keys clean to the same key, the first in byte order keeps its value,
// so the result does not depend on map order.
func Labels(labels map[string]string) map[string]string {
	dirty := false
	for k, v := range labels {
		if Text(k, MaxLabelKey) != k || Text(v, MaxLabelValue) != v {
			dirty = true
			break
		}
	}
	if !dirty {
		return labels
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(labels))
	for _, k := range keys {
		ck := Text(k, MaxLabelKey)
		if _, taken := out[ck]; !taken {
			out[ck] = Text(labels[k], MaxLabelValue)
		}
	}
	return out
}
