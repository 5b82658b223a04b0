package store

import (
	"cmp"
	"context"
	"log/slog"
	"slices"

	"go.uber.org/zap/zapcore"
)

// slogCore sends etcd's zap logging (server and client) into Peloton's slog
// handler, so an operator finds etcd's complaints in the same log stream,
// with the same format, as the scheduler's own. Only the level floor is
// applied here; everything else is up to the handler.
type slogCore struct {
	h     slog.Handler
	floor zapcore.Level
	drop  func(zapcore.Entry) bool // optional filter for known noise
	attrs []slog.Attr              // from With, already converted
}

var _ zapcore.Core = (*slogCore)(nil)

func newSlogCore(h slog.Handler, floor zapcore.Level) *slogCore {
	return &slogCore{h: h, floor: floor}
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return l >= c.floor && c.h.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{h: c.h, floor: c.floor, drop: c.drop, attrs: append(slices.Clip(c.attrs), fieldAttrs(fields)...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) && (c.drop == nil || !c.drop(e)) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(c.attrs...)
	r.AddAttrs(fieldAttrs(fields)...)
	return c.h.Handle(context.Background(), r)
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

// fieldAttrs renders zap fields through zap's own map encoder, which knows
// every field type (durations, errors, stringers, arrays), then sorts by key
// because the map loses zap's order.
func fieldAttrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	slices.SortFunc(attrs, func(a, b slog.Attr) int { return cmp.Compare(a.Key, b.Key) })
	return attrs
}
