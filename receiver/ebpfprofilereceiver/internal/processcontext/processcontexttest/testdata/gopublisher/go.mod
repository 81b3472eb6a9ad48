module gopublisher

go 1.25.0

require (
	github.com/hotpath-dev/hotpath/sdk/go/tracectx v0.0.0
	go.opentelemetry.io/otel v1.46.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace github.com/hotpath-dev/hotpath/sdk/go/tracectx => ../../../../../../../sdk/go/tracectx
