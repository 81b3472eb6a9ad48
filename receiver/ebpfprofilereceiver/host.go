package ebpfprofilereceiver

import (
	"context"
	"runtime"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
)

// describeHost gives the host attributes of every profile: host.name as
// configured (or the OS's), host.id from the machine ID (/etc/machine-id, or
// /var/lib/dbus/machine-id), host.arch and os.type.
//
// The receiver sets them itself rather than through the resourcedetection
// processor's system detector: that detector asks gopsutil for the OS
// version whether or not it is wanted, and on Debian without
// /etc/lsb-release gopsutil runs /usr/bin/lsb_release, a Python program,
// at every start (about 100 ms before the receiver could start sampling),
// and the processor links every cloud detector's SDK into the binary
// (105 MB of its 229). A machine ID that cannot be read leaves host.id out,
// with a warning.
func describeHost(name string, logger *zap.Logger) *profilebuilder.Host {
	h := &profilebuilder.Host{Name: name, Arch: hostArch(runtime.GOARCH)}
	res, err := resource.New(context.Background(), resource.WithHostID(), resource.WithOSType())
	if err != nil {
		logger.Warn("host.id left out of the profiles: the machine ID cannot be read (in a container, mount the node's /etc/machine-id)",
			zap.Error(err))
	}
	for _, kv := range res.Attributes() {
		switch kv.Key {
		case semconv.HostIDKey:
			h.ID = kv.Value.AsString()
		case semconv.OSTypeKey:
			h.OSType = kv.Value.AsString()
		}
	}
	return h
}

// hostArch is host.arch (semantic conventions' values) for a GOARCH, or ""
// for one the conventions do not name.
func hostArch(goarch string) string {
	var v attribute.KeyValue
	switch goarch {
	case "amd64":
		v = semconv.HostArchAMD64
	case "arm64":
		v = semconv.HostArchARM64
	case "arm":
		v = semconv.HostArchARM32
	case "386":
		v = semconv.HostArchX86
	case "ppc64", "ppc64le":
		v = semconv.HostArchPPC64
	case "s390x":
		v = semconv.HostArchS390x
	default:
		return ""
	}
	return v.Value.AsString()
}
