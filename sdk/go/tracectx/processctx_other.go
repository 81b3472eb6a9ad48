//go:build !linux

package tracectx

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
)

// PublishResource publishes a process context on Linux only (the format
// is defined for Linux); elsewhere it returns an error and does nothing.
func PublishResource(attrs ...attribute.KeyValue) error {
	return errors.New("publish process context: Linux only")
}
