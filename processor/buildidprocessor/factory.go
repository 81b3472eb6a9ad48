// Package buildidprocessor annotates profiles with the build IDs of the
// binaries they sampled, read from the binaries on this host: the process
// executable on the resource, each mapped file on its mapping.
package buildidprocessor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper/xprocessorhelper"
	"go.opentelemetry.io/collector/processor/xprocessor"

	"github.com/hotpath-dev/hotpath/processor/buildidprocessor/internal/metadata"
)

// Type is the component type used in collector configuration.
var Type = metadata.Type

// NewFactory returns the buildid processor factory.
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
		return nil, fmt.Errorf("buildid: unexpected config type %T", cfg)
	}
	p, err := newProcessor(c, set)
	if err != nil {
		return nil, err
	}
	return xprocessorhelper.NewProfiles(ctx, set, cfg, next, p.process,
		xprocessorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}
