// Package apierr builds the errors users see: gRPC statuses whose message
// starts with the path of the field at fault ("spec.instanceCount: must be > 0"),
// so the CLI, REST and gRPC clients all read the same words.
package apierr

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Invalid is InvalidArgument for one field.
func Invalid(field, format string, args ...any) error {
	return status.Error(codes.InvalidArgument, field+": "+fmt.Sprintf(format, args...))
}

// NotFound says a named thing does not exist.
func NotFound(format string, args ...any) error {
	return status.Errorf(codes.NotFound, format, args...)
}

// AlreadyExists says a named thing exists already.
func AlreadyExists(format string, args ...any) error {
	return status.Errorf(codes.AlreadyExists, format, args...)
}

// FailedPrecondition says the request is well-formed but the system is not in
// a state that allows it.
func FailedPrecondition(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}

// Aborted says a concurrent change won; the caller may retry.
func Aborted(format string, args ...any) error {
	return status.Errorf(codes.Aborted, format, args...)
}

// Unavailable says the server cannot serve the request right now.
func Unavailable(format string, args ...any) error {
	return status.Errorf(codes.Unavailable, format, args...)
}

// Code returns the gRPC code of err (codes.OK for nil, Unknown for plain errors).
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code()
	}
	return codes.Unknown
}
