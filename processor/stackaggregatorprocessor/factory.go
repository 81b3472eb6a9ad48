// Package stackaggregatorprocessor merges CPU profile samples into
// wall-clock-aligned windows per series (service, pod or host, build ID),
// summing identical stacks, so storage receives one compact profile per
// series per window.
package stackaggregatorprocessor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper/xprocessorhelper"
	"go.opentelemetry.io/collector/processor/xprocessor"

	"github.com/hotpath-dev/hotpath/processor/stackaggregatorprocessor/internal/metadata"
)

// Type is the component type used in collector configuration.
var Type = metadata.Type

// NewFactory returns the stackaggregator processor factory.
func NewFactory() xprocessor.Factory {
	return xprocessor.NewFactory(
		Type,
		func() component.Config { return createDefaultConfig() },
		xprocessor.WithProfiles(createProfiles, metadata.ProfilesStability),
	)
}

func createProfiles(ctx context.Context, set processor.Settings, cfg component.Config, next xconsumer.Profiles) (xprocessor.Profiles, error) {
	c, ok := cfg.(*Config)
	if !ok {
		return nil, fmt.Errorf("stackaggregator: unexpected config type %T", cfg)
	}
	p, err := newProcessor(c, set, next)
	if err != nil {
		return nil, err
	}
	return xprocessorhelper.NewProfiles(ctx, set, cfg, next, p.process,
		// Input is only read: samples are copied into the window's own
		// dictionary, so the pipeline need not clone data for us.
		xprocessorhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
		xprocessorhelper.WithStart(p.start),
		xprocessorhelper.WithShutdown(p.shutdown),
	)
}
