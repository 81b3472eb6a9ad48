package ebpfprofilereceiver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/hotpath-dev/hotpath/internal/statustest"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// A receiver whose BPF program the kernel refuses reports a permanent error
// through componentstatus (what health checks show), besides failing Start.
func TestBPFLoadFailureReportsPermanentError(t *testing.T) {
	real := openSampler
	defer func() { openSampler = real }()
	refused := errors.New("load program: permission denied (kernel refused it)")
	openSampler = func(sampler.Config) (*sampler.Sampler, error) { return nil, refused }

	cfg := testConfig()
	cfg.TraceContext.Enabled = false
	r, err := newReceiver(receivertest.NewNopSettings(typeStr), cfg, new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	host := statustest.NewHost()
	startErr := r.Start(context.Background(), host)
	if !errors.Is(startErr, refused) {
		t.Fatalf("Start = %v, want the load error", startErr)
	}
	ev := host.Events()
	if len(ev) != 1 || ev[0].Status() != componentstatus.StatusPermanentError || !strings.Contains(ev[0].Err().Error(), refused.Error()) {
		t.Fatalf("status events %v, want one permanent error carrying %q", ev, refused)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
