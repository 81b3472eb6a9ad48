// Package ebpfprofilereceiver samples every CPU with a perf_event eBPF program,
// aggregates stacks in the kernel, symbolizes them in user space and emits
// OTLP profiles every interval.
package ebpfprofilereceiver

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/metadata"
)

// typeStr is the component type, as metadata.yaml declares it.
var typeStr = metadata.Type

// NewFactory returns the receiver factory.
func NewFactory() xreceiver.Factory {
	return xreceiver.NewFactory(typeStr,
		func() component.Config { return createDefaultConfig() },
		xreceiver.WithProfiles(createProfiles, metadata.ProfilesStability))
}

func createProfiles(_ context.Context, set receiver.Settings, cfg component.Config, next xconsumer.Profiles) (xreceiver.Profiles, error) {
	return newReceiver(set, cfg.(*Config), next)
}
