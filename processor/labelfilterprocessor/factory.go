// Package labelfilterprocessor is a fail-closed allow-list of the resource,
// scope, profile and sample attribute keys that reach storage: every key not
// on the list is dropped and counted, so a sender cannot store personal data
// or explode cardinality by adding labels.
package labelfilterprocessor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper/xprocessorhelper"
	"go.opentelemetry.io/collector/processor/xprocessor"

	"github.com/hotpath-dev/hotpath/processor/labelfilterprocessor/internal/metadata"
)

// Type is the component type used in collector configuration.
var Type = metadata.Type

// NewFactory returns the labelfilter processor factory.
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
		return nil, fmt.Errorf("labelfilter: unexpected config type %T", cfg)
	}
	p, err := newProcessor(c, set)
	if err != nil {
		return nil, err
	}
	return xprocessorhelper.NewProfiles(ctx, set, cfg, next, p.process,
		xprocessorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}
